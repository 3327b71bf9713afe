# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: does a container runtime's daemon run with the configuration files on disk?

Not a public API; modules of this collection only (docker_daemon_config, container_runtime_config).

Docker, containerd and CRI-O read their configuration files when they start. A run stopped between the write of a
file and the runtime's restart (a controller killed, a connection lost) leaves the daemon on the older content; the
next run finds the files already right and, deciding restarts from its own changes, would never restart it. So the
daemon's main process start time (systemd's ExecMainStartTimestampMonotonic, in microseconds of CLOCK_MONOTONIC) is
compared with each file's modification time, both on the host's clock: a file modified after the daemon started is
one the daemon has not read.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Callable, Iterable

PROPERTIES = ("LoadState", "ActiveState", "MainPID", "ExecMainStartTimestampMonotonic")
RUNNING = ("active", "reloading")


def _show(run_command: Callable, unit: str) -> dict | None:
    rc, out, _err = run_command(["systemctl", "show", "--property=" + ",".join(PROPERTIES), unit])
    if rc != 0:
        return None
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def loaded_state(run_command: Callable, unit: str, paths: Iterable[str],
                 clock: Callable[[], tuple[float, float]] | None = None) -> dict:
    """Whether ``unit``'s daemon started after the last change of each of ``paths``.

    ``run_command`` is AnsibleModule.run_command (or one like it); ``clock`` gives (realtime, monotonic) now, for
    tests. Returns {unit, state (systemd's ActiveState, or not-found / unknown), started (UTC, ISO 8601, '' when not
    running), newer (the paths modified after the daemon started), stale (running and some path newer)}. A path that
    does not exist, or whose modification time is later than now (a clock set back, a file copied with a future
    time), does not count: the daemon could not have read it later either.
    """
    result = {"unit": unit, "state": "unknown", "started": "", "newer": [], "stale": False}
    shown = _show(run_command, unit)
    if shown is None:
        return result
    result["state"] = "not-found" if shown.get("LoadState") == "not-found" else shown.get("ActiveState", "unknown")
    try:
        started_mono = int(shown.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
        pid = int(shown.get("MainPID") or 0)
    except ValueError:
        return result
    if result["state"] not in RUNNING or not started_mono or not pid:
        return result
    real, mono = clock() if clock else (time.time(), time.monotonic())
    started = real - (mono - started_mono)
    result["started"] = datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds")
    for path in paths:
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        if started < mtime <= real:
            result["newer"].append(path)
    result["stale"] = bool(result["newer"])
    return result


def loaded_result(module, unit: str | None, paths: Iterable[str]) -> dict:
    """The modules' ``loaded`` return value: loaded_state for ``unit``, or {} when no unit is given."""
    if not unit:
        return {}
    return loaded_state(module.run_command, unit, list(paths))
