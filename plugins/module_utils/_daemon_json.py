# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: merge runtimes and settings into Docker's daemon.json.

Not a public API; modules of this collection only. parse_config, dump_config and
plan_config are pure and unit-tested; read_config and write_config do the file
work (backup, atomic replace keeping owner, group and mode) for the module.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import ConfigFileError, read_file, write_file

# Runtimes dockerd knows without a "runtimes" entry (daemon/runtime_unix.go).
BUILTIN_RUNTIMES = ("runc", "io.containerd.runc.v2")
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


@dataclass
class Plan:
    """The wanted daemon.json, and what differs from the current one."""

    previous: dict
    config: dict
    runtimes_added: list[str] = field(default_factory=list)
    runtimes_updated: list[str] = field(default_factory=list)
    runtimes_removed: list[str] = field(default_factory=list)

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
) -> Plan:
    """Compute the new daemon.json from the current one. Raises DaemonJsonError for an unusable request."""
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
            if not isinstance(spec, dict):
                raise DaemonJsonError(
                    f"runtimes.{name} must be a dict such as {{path: nvidia-container-runtime}}, not {spec!r}."
                )
            if name not in configured:
                plan.runtimes_added.append(name)
            elif configured[name] != spec:
                plan.runtimes_updated.append(name)
            else:
                continue
            configured[name] = copy.deepcopy(spec)
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


def write_config(module, path: str, text: str, exists: bool, backup: bool) -> str | None:
    """Atomically replace (or create) path with text; return the backup's path, if one was made.

    See _atomic_file.write_file; its errors become DaemonJsonError.
    """
    try:
        return write_file(module, path, text.encode("utf-8"), exists=exists, backup=backup)
    except ConfigFileError as exc:
        raise DaemonJsonError(str(exc)) from exc
