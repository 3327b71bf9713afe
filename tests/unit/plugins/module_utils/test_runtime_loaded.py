"""_runtime_loaded: a runtime's daemon against its files' modification times (issue 51 item 1).

systemctl's answers are the lines `systemctl show --property=LoadState,ActiveState,MainPID,ExecMainStartTimestampMonotonic`
printed for containerd.service on the lab's Debian 12 GPU host (systemd 252); the files are real files whose
modification times the tests set.
"""
from __future__ import annotations

import os

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._runtime_loaded import loaded_state

# The host's clock now: realtime, monotonic (seconds).
NOW = (1_800_000_000.0, 5_000.0)
# containerd's main process started 100 s ago on the monotonic clock.
SHOW = ("LoadState=loaded\nActiveState=active\nMainPID=812\nExecMainStartTimestampMonotonic=4900000000\n")


def runner(out=SHOW, rc=0, calls=None):
    def run(cmd):
        if calls is not None:
            calls.append(cmd)
        return rc, out, ""
    return run


def touch(path, when):
    path.write_text("x")
    os.utime(path, (when, when))
    return str(path)


def test_a_file_changed_after_the_daemon_started_is_not_loaded(tmp_path):
    started = NOW[0] - 100
    before = touch(tmp_path / "config.toml", started - 5)
    after = touch(tmp_path / "99-nvidia.toml", started + 3)
    calls = []
    state = loaded_state(runner(calls=calls), "containerd.service", [before, after, str(tmp_path / "missing")],
                         clock=lambda: NOW)
    assert state == {"unit": "containerd.service", "state": "active", "started": "2027-01-15T07:58:20+00:00",
                     "newer": [after], "stale": True}
    assert calls == [["systemctl", "show", "--property=LoadState,ActiveState,MainPID,ExecMainStartTimestampMonotonic",
                      "containerd.service"]]


def test_files_older_than_the_daemon_are_loaded(tmp_path):
    old = touch(tmp_path / "daemon.json", NOW[0] - 100.5)
    state = loaded_state(runner(), "docker.service", [old], clock=lambda: NOW)
    assert state["stale"] is False and state["newer"] == [] and state["state"] == "active"


def test_a_modification_time_in_the_future_does_not_count(tmp_path):
    # A clock set back, or a file copied with its time: a restart would not make the daemon newer than it.
    future = touch(tmp_path / "daemon.json", NOW[0] + 3600)
    assert loaded_state(runner(), "docker.service", [future], clock=lambda: NOW)["stale"] is False


def test_a_daemon_that_does_not_run_is_not_stale(tmp_path):
    newer = touch(tmp_path / "daemon.json", NOW[0] - 1)
    stopped = "LoadState=loaded\nActiveState=inactive\nMainPID=0\nExecMainStartTimestampMonotonic=0\n"
    assert loaded_state(runner(stopped), "docker.service", [newer], clock=lambda: NOW) == {
        "unit": "docker.service", "state": "inactive", "started": "", "newer": [], "stale": False}
    missing = "LoadState=not-found\nActiveState=inactive\nMainPID=0\nExecMainStartTimestampMonotonic=0\n"
    assert loaded_state(runner(missing), "crio.service", [newer], clock=lambda: NOW)["state"] == "not-found"
    # No systemd (systemctl fails): unknown, not stale.
    assert loaded_state(runner("", rc=1), "docker.service", [newer], clock=lambda: NOW) == {
        "unit": "docker.service", "state": "unknown", "started": "", "newer": [], "stale": False}
