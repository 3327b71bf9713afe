# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: plan containerd and CRI-O configuration with ``nvidia-ctk runtime configure``.

Not a public API. nvidia-ctk knows each runtime's configuration format (containerd config versions 2 and 3 and
their CRI plugin names, CRI-O's drop-ins) and copies the options of the existing runc runtime (SystemdCgroup...)
into the nvidia one, so the collection lets it decide the content. What nvidia-ctk lacks for Ansible is a way to
see the change before it is made: its --dry-run prints the drop-in and the main file one after the other with no
separator, it makes no backup, and it writes in place. So nvidia-ctk runs on copies in a scratch directory, the
results are compared with the real files, and only the files that differ are replaced (by the caller, atomically,
with a backup).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import ConfigFileError, read_file

RUNTIMES = ("containerd", "crio")
DEFAULT_PATHS = {
    # The paths nvidia-ctk itself uses (cmd/nvidia-ctk/runtime/configure/configure.go).
    "containerd": ("/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"),
    "crio": ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.toml"),
}


class NvidiaCtkError(RuntimeError):
    """nvidia-ctk could not plan the change; the message says which runtime, file and why."""


@dataclass
class FileChange:
    """One file nvidia-ctk would write: its content now (None: absent) and after."""

    path: str
    before: bytes | None
    after: bytes

    @property
    def changed(self) -> bool:
        return self.before != self.after


def command(
    nvidia_ctk: str,
    runtime: str,
    config_path: str,
    drop_in_path: str,
    runtime_name: str,
    runtime_path: str,
    set_as_default: bool,
    enable_cdi: bool,
) -> list[str]:
    """The nvidia-ctk command line for the given (scratch) paths."""
    cmd = [
        nvidia_ctk,
        "--quiet",
        "runtime",
        "configure",
        f"--runtime={runtime}",
        f"--config={config_path}",
        f"--drop-in-config={drop_in_path}",
        f"--nvidia-runtime-name={runtime_name}",
        f"--nvidia-runtime-path={runtime_path}",
    ]
    if set_as_default:
        cmd.append("--set-as-default")
    if enable_cdi:
        cmd.append("--enable-cdi")
    return cmd


def plan(
    run_command,
    nvidia_ctk: str,
    runtime: str,
    config_path: str,
    drop_in_path: str,
    runtime_name: str = "nvidia",
    runtime_path: str = "/usr/bin/nvidia-container-runtime",
    set_as_default: bool = True,
    enable_cdi: bool = False,
) -> tuple[list[FileChange], list[str]]:
    """Run nvidia-ctk on copies of config_path and drop_in_path; return the files it writes and the command.

    run_command is AnsibleModule.run_command (or one like it). Paths are absolute and resolved by the caller.
    The scratch directory mirrors the real paths under its root, so the ``imports`` glob nvidia-ctk adds to
    containerd's main file names the scratch drop-in directory; that root is cut from the results.
    """
    if runtime not in RUNTIMES:
        raise NvidiaCtkError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}.")
    for path in (config_path, drop_in_path):
        if not os.path.isabs(path):
            raise NvidiaCtkError(f"{path!r} is not an absolute path.")
    if config_path == drop_in_path:
        raise NvidiaCtkError(f"the drop-in file and the main file are the same path, {config_path}.")
    # The drop-in first: written before the main file imports it.
    try:
        before = {p: read_file(p) for p in (drop_in_path, config_path)}
    except ConfigFileError as exc:
        raise NvidiaCtkError(str(exc)) from None
    scratch = tempfile.mkdtemp(prefix="k8sgpu-nvidia-ctk-")
    try:
        inside = {p: scratch + p for p in before}
        # An imports entry for the real drop-in directory must name the scratch one, or nvidia-ctk adds a second.
        drop_in_dir = os.path.dirname(drop_in_path).encode() + b"/"
        for real, copy in inside.items():
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            if before[real] is not None:
                with open(copy, "wb") as f:
                    f.write(before[real].replace(drop_in_dir, scratch.encode() + drop_in_dir))
        cmd = command(
            nvidia_ctk, runtime, inside[config_path], inside[drop_in_path],
            runtime_name, runtime_path, set_as_default, enable_cdi,
        )
        rc, out, err = run_command(cmd)
        if rc != 0:
            detail = (err or out or "").strip().splitlines()
            raise NvidiaCtkError(
                f"nvidia-ctk could not configure {runtime} from {config_path} (exit {rc}): "
                f"{' '.join(detail[-3:]) or 'no output'}. Fix {config_path} or the options; nothing was changed."
            )
        changes = []
        for real, copy in inside.items():
            after = read_file(copy)
            if after is None:
                continue
            changes.append(FileChange(real, before[real], after.replace(scratch.encode(), b"")))
        return changes, command(
            nvidia_ctk, runtime, config_path, drop_in_path, runtime_name, runtime_path, set_as_default, enable_cdi
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# The NVIDIA Container Runtime's own configuration (read by nvidia-container-runtime and its hook at every
# container start), written by the toolkit package's postinst with ``nvidia-ctk config``.
TOOLKIT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"


def config_value(value) -> str:
    """One ``--set key=value`` value as nvidia-ctk parses it (booleans true/false, lists colon-separated)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ":".join(str(v) for v in value)
    return str(value)


def config_command(nvidia_ctk: str, config_path: str, settings: dict) -> list[str]:
    """The ``nvidia-ctk config --in-place --set ...`` command line for the given (scratch) path, keys sorted."""
    cmd = [nvidia_ctk, "--quiet", "config", f"--config-file={config_path}", "--in-place"]
    for key in sorted(settings):
        cmd.append(f"--set={key}={config_value(settings[key])}")
    return cmd


def plan_config(run_command, nvidia_ctk: str, config_path: str, settings: dict) -> tuple[FileChange, list[str]]:
    """Run ``nvidia-ctk config --in-place --set ...`` on a scratch copy of config_path; return the change and command.

    nvidia-ctk keeps every key the file sets, sets the given ones, and writes the file in its own layout (settings at
    their defaults commented out), which is what the toolkit package's postinst writes too: a file that postinst
    wrote and this function then set is stable under both. A missing file counts as the toolkit's defaults.
    """
    if not os.path.isabs(config_path):
        raise NvidiaCtkError(f"{config_path!r} is not an absolute path.")
    if not isinstance(settings, dict) or not settings:
        raise NvidiaCtkError("no settings given: name at least one key of the toolkit's config.toml.")
    for key, value in settings.items():
        if not isinstance(key, str) or not key or any(c in key for c in "= \n"):
            raise NvidiaCtkError(f"{key!r} is not a config.toml key (for example accept-nvidia-visible-devices-"
                                 "as-volume-mounts or nvidia-container-runtime.log-level).")
        if value is None or isinstance(value, dict) or "\n" in config_value(value):
            raise NvidiaCtkError(f"the value of {key} must be a boolean, a number, a string or a list, not {value!r}.")
    try:
        before = read_file(config_path)
    except ConfigFileError as exc:
        raise NvidiaCtkError(str(exc)) from None
    scratch = tempfile.mkdtemp(prefix="k8sgpu-nvidia-ctk-config-")
    try:
        copy = os.path.join(scratch, "config.toml")
        if before is not None:
            with open(copy, "wb") as f:
                f.write(before)
        rc, out, err = run_command(config_command(nvidia_ctk, copy, settings))
        if rc != 0:
            detail = " ".join((err or out or "").strip().splitlines()[-3:]) or "no output"
            raise NvidiaCtkError(
                f"nvidia-ctk could not set {', '.join(sorted(settings))} in {config_path} (exit {rc}): {detail}. "
                f"Fix {config_path} or the setting's name or value; nothing was changed."
            )
        after = read_file(copy)
        if after is None:
            raise NvidiaCtkError(f"nvidia-ctk config wrote no file for {config_path}; nothing was changed.")
        return FileChange(config_path, before, after), config_command(nvidia_ctk, config_path, settings)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
