# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filter controller_file: the roles gpu_alerts and dcgm_exporter through the private role
k8s_apply, and gpu_metrics_adapter).

Where a role may write a file on the controller, and whether it may replace the file there:
- a relative path is taken under the playbook's directory (playbook_dir);
- an absolute path must be under playbook_dir or under the directory the site names in k8sgpu_controller_dir;
- a '..' component, a control character or a symbolic link (the file, or a directory on the way out of the root) is
  refused;
- an existing file is replaced only when its first line is the role's marker (MARKER_PREFIX + role); its mode is kept.
Every refusal names the variable, the path and the fix, before anything is written."""
from __future__ import annotations

import os
import re
import stat

MARKER_PREFIX = "# Managed by k8sgpu.nvidia "
SHARED_ROOT_VARIABLE = "k8sgpu_controller_dir"
_PEM = re.compile(r"\A(?:-----BEGIN [A-Z0-9 ]+-----\n[A-Za-z0-9+/=\n]+-----END [A-Z0-9 ]+-----\n?)+\Z")


class ControllerFileError(ValueError):
    """A path a role may not write, with a message naming the variable, the path and the fix."""


def marker(role: str) -> str:
    """The first line of every file the role writes on the controller."""
    return (f"{MARKER_PREFIX}{role}: written by the role from its variables; an edit is replaced on the next run, "
            f"and only a file that starts with this line is replaced or removed.\n")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _check_text(variable: str, value) -> str:
    if not isinstance(value, str) or not value:
        raise ControllerFileError(f"{variable} must be a non-empty path, got {value!r}.")
    if re.search(r"[\x00-\x1f\x7f]", value):
        raise ControllerFileError(f"{variable} ({value!r}) holds a newline or another control character: give a plain "
                                  "path.")
    if ".." in value.split("/"):
        raise ControllerFileError(f"{variable} ({value}) has a '..' component: give a path under the playbook's "
                                  f"directory (relative), or under {SHARED_ROOT_VARIABLE}, without '..'.")
    return value


def resolve(variable: str, value, playbook_dir: str, controller_dir: str = "") -> str:
    """The absolute, normalised path value names, or ControllerFileError when the run does not own that place."""
    _check_text(variable, value)
    if not isinstance(playbook_dir, str) or not os.path.isabs(playbook_dir):
        raise ControllerFileError(f"{variable}: the playbook's directory is unknown ({playbook_dir!r}).")
    roots = [os.path.realpath(playbook_dir)]
    if controller_dir:
        _check_text(SHARED_ROOT_VARIABLE, controller_dir)
        if not os.path.isabs(controller_dir):
            raise ControllerFileError(f"{SHARED_ROOT_VARIABLE} ({controller_dir}) must be an absolute path.")
        roots.append(os.path.realpath(controller_dir))
    path = os.path.normpath(value if os.path.isabs(value) else os.path.join(playbook_dir, value))
    # The deepest existing directory on the way, with its links resolved: a link may not lead out of the root.
    parent = os.path.dirname(path)
    while not os.path.exists(parent) and parent != "/":
        parent = os.path.dirname(parent)
    real = os.path.join(os.path.realpath(parent), os.path.relpath(path, parent))
    if not any(_within(real, root) and real != root for root in roots):
        where = " or ".join(roots)
        raise ControllerFileError(
            f"{variable} ({value}) is {real} on the controller, outside the directories this run writes in ({where}). "
            f"Nothing was written. Give a path relative to the playbook's directory, or set {SHARED_ROOT_VARIABLE} "
            "to a directory kept for the collection's output and give a path under it.")
    return path


def plan(variable: str, value, role: str, playbook_dir: str, controller_dir: str = "", kind: str = "marker",
         secret: bool = False) -> dict:
    """What the role may do with one file: path (absolute), exists, managed (its marker is there, or for kind=pem it
    holds PEM blocks only), mode (the existing file's, or 0600/0644 for a new one), directory_missing, marker (the
    line to start the file with; empty for kind=pem). Raises ControllerFileError for a file it must not replace."""
    path = resolve(variable, value, playbook_dir, controller_dir)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    result = {"path": path, "exists": st is not None, "managed": False, "mode": "0600" if secret else "0644",
              "directory_missing": not os.path.isdir(os.path.dirname(path)),
              "marker": marker(role) if kind == "marker" else ""}
    if st is None:
        return result
    fix = f"remove it if nothing else uses it, or set {variable} to another path"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise ControllerFileError(f"{variable}: {path} exists and is not a regular file (a link or a directory): the "
                                  f"role writes only its own files. Nothing was written. Fix: {fix}.")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError as exc:
        raise ControllerFileError(f"{variable}: cannot read {path} ({exc}). Nothing was written.") from None
    if kind == "pem":
        managed = bool(_PEM.match(text))
        what = "certificate or key (PEM blocks only)"
    else:
        managed = text.startswith(MARKER_PREFIX + role + ":")
        what = f"file of the role (its first line '{MARKER_PREFIX}{role}: ...')"
    if not managed:
        raise ControllerFileError(f"{variable}: {path} exists and is not a {what}: the role does not replace a file it "
                                  f"did not write. Nothing was written. Fix: {fix}.")
    result["managed"] = True
    result["mode"] = "0%o" % stat.S_IMODE(st.st_mode)
    return result


def removable(variable: str, value, role: str, playbook_dir: str, controller_dir: str = "", kind: str = "marker") -> dict:
    """For state=absent: path and remove (true only for a file the role wrote); never raises for an unrelated file,
    it is left alone (reason says why)."""
    try:
        p = plan(variable, value, role, playbook_dir, controller_dir, kind)
    except ControllerFileError as exc:
        return {"path": value, "remove": False, "reason": str(exc).replace("Nothing was written.", "It stays.")}
    return {"path": p["path"], "remove": p["exists"], "reason": ""}
