# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: merge runtimes and settings into Docker's daemon.json.

Not a public API; modules of this collection only. parse_config, dump_config and
plan_config are pure and unit-tested; read_config and write_config do the file
work (backup, atomic replace keeping owner, group and mode) for the module.

A runtime entry is what dockerd reads from it (api/types/system/runtime.go in moby): ``path`` and
``runtimeArgs`` for a runc-compatible program, or ``runtimeType`` and ``options`` for a containerd shim.
Other keys, such as the ``args`` that ``nvidia-ctk runtime configure --runtime=docker`` writes, are ignored by
dockerd. An existing entry that runs the same program with the same arguments is already right.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import (
    DEFAULT_BACKUP_DIR,
    SECRET_FILE_MODE,
    ConfigFileError,
    read_file,
    write_file,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._redact import (  # noqa: F401  # pylint: disable=unused-import
    # re-exported: the names docker_daemon_config and earlier tests import from here
    REDACTED,
    redact_config,
    redact_string,
    secret_strings,
)

# Runtimes dockerd knows without a "runtimes" entry (daemon/runtime_unix.go).
BUILTIN_RUNTIMES = ("runc", "io.containerd.runc.v2")
# The keys dockerd reads from a runtime entry (moby api/types/system/runtime.go).
RUNTIME_KEYS = ("path", "runtimeArgs", "runtimeType", "options")
# Where dockerd, started by systemd, looks for a runtime given by name (exec.LookPath).
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_UNTOUCHED = "fix or remove it; it was left untouched"


class DaemonJsonError(ValueError):
    """The file or the wanted change cannot be used; the message says why."""


def parse_config(data: bytes, path: str) -> dict:
    """Return daemon.json's object. Empty (or whitespace-only) content is {}.

    Raises DaemonJsonError naming path, and the line and column of a JSON syntax error.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DaemonJsonError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); {_UNTOUCHED}.") from None
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DaemonJsonError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; {_UNTOUCHED}."
        ) from None
    if not isinstance(config, dict):
        raise DaemonJsonError(f"{path} holds a JSON {_json_type(config)}, not an object; {_UNTOUCHED}.")
    return config


def dump_config(config: dict) -> str:
    """daemon.json text: 2-space indent, keys in their order, trailing newline."""
    return json.dumps(config, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


# Redaction of what the module returns (config, previous, diff); the file keeps the real values. One redaction for
# every module of the collection (module_utils/_redact.py); these names stay importable from here.
def merge_settings(base: dict, updates: dict) -> dict:
    """Return a copy of base with updates deep-merged into it.

    Dicts merge key by key, at every depth; any other value replaces (lists included); None removes the key.
    Existing keys keep their position and new keys are appended.
    """
    merged = copy.deepcopy(base)
    for key, value in updates.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict):
            current = merged.get(key)
            sub = merge_settings(current if isinstance(current, dict) else {}, value)
            if sub or key in merged or not value:
                merged[key] = sub
        else:
            merged[key] = copy.deepcopy(value)
    return merged


Resolver = Callable[[str], "str | None"]


def resolve_program(name: str, search_path: str = DAEMON_PATH) -> str | None:
    """The file a runtime's path runs, with symbolic links resolved; None when there is none.

    A bare name is looked up on search_path (dockerd's PATH under systemd), as dockerd and the runc shim do; a
    path with a slash is taken as it is.
    """
    if not isinstance(name, str) or not name:
        return None
    found = name if "/" in name else shutil.which(name, path=search_path)
    if not found or not os.path.isfile(found):
        return None
    return os.path.realpath(found)


def _same_program(a: Any, b: Any, resolve: Resolver) -> bool:
    if a == b:
        return True
    ra = resolve(a) if isinstance(a, str) else None
    return ra is not None and ra == (resolve(b) if isinstance(b, str) else None)


def _runtime_args(entry: dict) -> list:
    args = entry.get("runtimeArgs")
    return list(args) if isinstance(args, list) else []


def _check_wanted(name: str, spec: Any) -> None:
    if not isinstance(spec, dict):
        raise DaemonJsonError(
            f"runtimes.{name} must be a dict such as {{path: nvidia-container-runtime}}, not {spec!r}."
        )
    if "args" in spec:
        raise DaemonJsonError(
            f"runtimes.{name}.args is not read by dockerd: give the runtime's arguments as runtimeArgs."
        )
    unknown = sorted(set(spec) - set(RUNTIME_KEYS))
    if unknown:
        raise DaemonJsonError(
            f"runtimes.{name} has keys dockerd does not read ({', '.join(unknown)}); use {', '.join(RUNTIME_KEYS)}."
        )
    if "path" in spec and "runtimeType" in spec:
        raise DaemonJsonError(f"runtimes.{name}: dockerd takes either path or runtimeType, not both.")
    if "runtimeArgs" in spec and not isinstance(spec["runtimeArgs"], list):
        raise DaemonJsonError(f"runtimes.{name}.runtimeArgs must be a list of strings, not {spec['runtimeArgs']!r}.")


def runtime_update(current: Any, wanted: dict, resolve: Resolver = resolve_program) -> dict | None:
    """The entry to write for a runtime, or None when current already runs what wanted asks for.

    For a wanted ``path``: the same program (a bare name found on dockerd's PATH and an absolute path to the same
    file are the same) with the same ``runtimeArgs`` (none given: the current ones, whatever they are) is already
    right, also when current is a runc shim entry whose ``options.BinaryName`` is that program. Otherwise the wanted
    keys are merged into current, keeping its other keys (its ``runtimeArgs`` when none are given), or replace it when
    current is of the other kind (dockerd takes path or runtimeType, not both). A wanted ``runtimeType`` compares and
    merges key by key.
    """
    if not isinstance(current, dict):
        return copy.deepcopy(wanted)
    if "path" in wanted:
        args_ok = "runtimeArgs" not in wanted or _runtime_args(current) == _runtime_args(wanted)
        if "path" in current and "runtimeType" not in current:
            if _same_program(current["path"], wanted["path"], resolve):
                if args_ok:
                    return None
                return {**copy.deepcopy(current), "runtimeArgs": copy.deepcopy(wanted["runtimeArgs"])}
            return {**copy.deepcopy(current), **copy.deepcopy(wanted)}
        options = current.get("options")
        binary = options.get("BinaryName") if isinstance(options, dict) else None
        if (
            current.get("runtimeType") in BUILTIN_RUNTIMES[1:]
            and binary
            and not _runtime_args(wanted)
            and _same_program(binary, wanted["path"], resolve)
        ):
            return None
        return copy.deepcopy(wanted)
    if "path" in current:
        return copy.deepcopy(wanted)
    merged = {**copy.deepcopy(current), **copy.deepcopy(wanted)}
    return None if merged == current else merged


@dataclass
class Plan:
    """The wanted daemon.json, and what differs from the current one."""

    previous: dict
    config: dict
    runtimes_added: list[str] = field(default_factory=list)
    runtimes_updated: list[str] = field(default_factory=list)
    runtimes_removed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.config != self.previous


def _may_be_default(name: str, runtimes: dict) -> bool:
    """Whether dockerd accepts name as default-runtime: a configured or built-in runtime, or a containerd shim
    name (io.containerd.<name>.<version>: a dot, not first, and no slash), which dockerd 23+ resolves itself."""
    if name in runtimes or name in BUILTIN_RUNTIMES:
        return True
    return "." in name and "/" not in name and not name.startswith(".")


def plan_config(
    current: dict,
    runtimes: dict | None = None,
    default_runtime: str | None = None,
    settings: dict | None = None,
    state: str = "present",
    resolve: Resolver = resolve_program,
) -> Plan:
    """Compute the new daemon.json from the current one. Raises DaemonJsonError for an unusable request.

    resolve maps a runtime's path to the file it runs (resolve_program: on this host), to tell whether an existing
    entry already runs the wanted program.
    """
    runtimes = runtimes or {}
    settings = settings or {}
    if "runtimes" in settings and runtimes:
        raise DaemonJsonError("Set the 'runtimes' key with the runtimes option, not in settings as well.")
    if "default-runtime" in settings and default_runtime:
        raise DaemonJsonError("Set the 'default-runtime' key with the default_runtime option, not in settings as well.")
    existing = current.get("runtimes")
    if (runtimes or state == "absent") and existing is not None and not isinstance(existing, dict):
        raise DaemonJsonError(f"The 'runtimes' key holds a JSON {_json_type(existing)}, not an object.")

    config = merge_settings(current, settings)
    plan = Plan(previous=current, config=config)
    configured = config.get("runtimes")
    configured = dict(configured) if isinstance(configured, dict) else {}

    if state == "present":
        for name, spec in runtimes.items():
            _check_wanted(name, spec)
            entry = configured.get(name)
            if name not in configured:
                plan.runtimes_added.append(name)
                configured[name] = copy.deepcopy(spec)
                continue
            if isinstance(entry, dict) and entry.get("args") and "runtimeArgs" not in entry:
                plan.warnings.append(
                    f"runtimes.{name} has 'args' {entry['args']!r}, which dockerd does not read (its key is "
                    "runtimeArgs): the runtime runs without them. Left as it is."
                )
            update = runtime_update(entry, spec, resolve)
            if update is not None:
                plan.runtimes_updated.append(name)
                configured[name] = update
        if plan.runtimes_added or plan.runtimes_updated:
            config["runtimes"] = configured
        if default_runtime and config.get("default-runtime") != default_runtime:
            if not _may_be_default(default_runtime, configured):
                raise DaemonJsonError(
                    f"default_runtime {default_runtime!r} is not a runtime of daemon.json nor of runtimes, so dockerd "
                    "would not start; add it to runtimes."
                )
            config["default-runtime"] = default_runtime
    else:
        plan.runtimes_removed = [name for name in runtimes if name in configured]
        for name in plan.runtimes_removed:
            del configured[name]
        if plan.runtimes_removed:
            if configured:
                config["runtimes"] = configured
            else:
                del config["runtimes"]
        # A default-runtime naming a runtime just removed would stop dockerd from starting: it goes too.
        default = config.get("default-runtime")
        if default is not None and (default in plan.runtimes_removed or (default_runtime and default == default_runtime)):
            del config["default-runtime"]
    return plan


def read_config(path: str) -> tuple[bytes | None, dict]:
    """Return (raw bytes, parsed object) of path; (None, {}) when it does not exist."""
    try:
        data = read_file(path)
    except ConfigFileError as exc:
        raise DaemonJsonError(str(exc)) from None
    return (None, {}) if data is None else (data, parse_config(data, path))


def holds_secret(config: dict) -> bool:
    """Whether daemon.json's content holds something redact_config hides (a new file holding one is made 0600)."""
    return redact_config(config) != config


def write_config(
    module, path: str, text: str, exists: bool, backup: bool, backup_dir: str = DEFAULT_BACKUP_DIR,
    secret: bool = False,
) -> str | None:
    """Atomically replace (or create) path with text; return the backup's path, if one was made.

    See _atomic_file.write_file; a new file is made mode 0600 when secret (it holds a secret), else 0644. Its errors
    become DaemonJsonError.
    """
    try:
        return write_file(module, path, text.encode("utf-8"), exists=exists, backup=backup, backup_dir=backup_dir,
                          new_mode=SECRET_FILE_MODE if secret else None)
    except ConfigFileError as exc:
        raise DaemonJsonError(str(exc)) from exc
