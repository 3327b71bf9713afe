#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Check and write a role's small configuration files in one run
version_added: 1.1.0
description:
  - Makes each entry of O(files) what it says, in the order given - a regular file with the given text, a
    directory, or no file at all - and sets owner, group and mode, in one module run.
  - Written because M(ansible.builtin.copy), M(ansible.builtin.template) and M(ansible.builtin.file) run once per
    file, and on a host where nothing changes that run is the whole cost. The driver and container_toolkit roles
    manage up to five files each (apt sources, apt proxy settings, the repository's keyring); measured on the lab
    (C(bench/site_scale.py), 2 vCPUs, 20 GPU hosts), each of those runs cost 0.15-0.42 seconds per host. This module
    does the same checks and writes with the same library functions as M(ansible.builtin.copy) -
    C(AnsibleModule.atomic_move) and C(AnsibleModule.set_fs_attributes_if_different) - for all of them at once.
  - Text is rendered on the controller, for example with C(lookup('ansible.builtin.template', ...)), and compared
    byte for byte; a file whose text is already right is not written (its modification time stays).
  - A file is written to a temporary file in the same directory and renamed over the old one, so a reader never
    sees half a file. Its owner, group and mode are set after the rename; an existing file's SELinux context is
    kept.
  - Nothing is backed up - the files are generated in full from the role's variables. Use
    M(ansible.builtin.copy) with C(backup) for files that hold anything else.
  - An entry that fails stops the module; the entries before it stay done, and the error names the path.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reads every path and reports what would change, with the diff; writes nothing. A file whose directory
      does not exist yet is reported as one to create.
  diff_mode:
    support: full
    details:
      - One diff per changed entry, headed with its path - the text before and after for a file, the state for a
        removed file (never its text), and the owner, group or mode that would change.
options:
  files:
    description:
      - The files and directories, handled in this order (so a directory comes before the files in it).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path. A symbolic link is refused, so the module never writes through one.
        type: path
        required: true
      state:
        description:
          - V(file) - a regular file with O(files[].content). Its directory must exist (list it before as a
            V(directory) entry); in check mode a missing directory is not an error, as an earlier task that did not
            run for real (a package that ships it) may create it, and the file is reported as one to create.
          - V(directory) - a directory; its parent must exist.
          - V(absent) - no file at O(files[].path); a directory there fails the task.
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description: The file's whole text, with V(state=file), where it is required. Written as UTF-8.
        type: str
      owner:
        description: Owner name or id, as in M(ansible.builtin.file). Left as it is when not given.
        type: str
      group:
        description: Group name or id. Left as it is when not given.
        type: str
      mode:
        description:
          - Mode as a quoted octal string such as V('0644'), or a symbolic mode as M(ansible.builtin.file) takes.
          - Required for V(file) and V(directory), so that a new file never gets the process's umask by accident.
        type: raw
notes:
  - The text of every entry is a module argument, so it shows in the task's invocation with C(-vvv). Give
    credentials to M(ansible.builtin.copy) with C(no_log) instead; a V(absent) entry for such a file is fine, as
    its diff shows no text.
seealso:
  - module: ansible.builtin.copy
  - module: ansible.builtin.file
  - module: ansible.builtin.template
"""

EXAMPLES = r"""
- name: The repository's keyring and source, and no proxy setting
  k8sgpu.nvidia.managed_files:
    files:
      - path: /etc/apt/keyrings
        state: directory
        owner: root
        group: root
        mode: "0755"
      - path: /etc/apt/keyrings/example.asc
        content: "{{ example_key_text }}"
        owner: root
        group: root
        mode: "0644"
      - path: /etc/apt/sources.list.d/example.sources
        content: "{{ lookup('ansible.builtin.template', 'example.sources.j2') }}"
        owner: root
        group: root
        mode: "0644"
      - path: /etc/apt/apt.conf.d/90example-proxy
        state: absent
  register: example_files

- name: Refresh apt's lists when the source changed
  ansible.builtin.apt:
    update_cache: true
  when: "'/etc/apt/sources.list.d/example.sources' in example_files.changed_paths"
"""

RETURN = r"""
files:
  description: One entry per O(files) entry, in the same order.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path, normalised (no trailing C(/)).
      type: str
      sample: /etc/apt/sources.list.d/example.sources
    state:
      description: The state asked for.
      type: str
      sample: file
    changed:
      description: Whether the entry changed (would change, in check mode) - its text, its existence, or its owner,
        group or mode.
      type: bool
    created:
      description: Whether the file or directory did not exist before (was created, or would be in check mode).
      type: bool
  sample:
    - {path: /etc/apt/keyrings, state: directory, changed: false, created: false}
changed_paths:
  description: The paths of the entries that changed (or would, in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [/etc/apt/sources.list.d/example.sources]
"""

import errno
import os
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text

STATES = ("file", "directory", "absent")


def _lstat(b_path: bytes):
    try:
        return os.lstat(b_path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def _kind(st) -> str:
    if st is None:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "not a regular file"


def _write(module: AnsibleModule, b_path: bytes, data: bytes) -> None:
    """Write data next to b_path and rename it over b_path (atomic_move keeps an existing file's attributes)."""
    fd, tmp = tempfile.mkstemp(prefix=b".k8sgpu-", dir=os.path.dirname(b_path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        module.atomic_move(tmp, to_native(b_path), unsafe_writes=False)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _attributes(module: AnsibleModule, entry: dict) -> tuple[bool, dict]:
    """Set owner, group and mode (in check mode: compare them); (changed, diff of those that change)."""
    args = module.load_file_common_arguments({"path": entry["path"], "owner": entry["owner"],
                                              "group": entry["group"], "mode": entry["mode"]})
    diff = {"before_header": entry["path"], "after_header": entry["path"],
            "before": {"path": entry["path"]}, "after": {"path": entry["path"]}}
    changed = module.set_fs_attributes_if_different(args, False, diff, expand=False)
    return changed, (diff if changed else {})


def _refusal(path: str, kind: str, state: str) -> str:
    found = {"directory": "a directory", "file": "a regular file"}.get(kind, kind)
    wanted = {"file": "a regular file", "directory": "a directory", "absent": "a regular file to remove"}[state]
    return f"{path}: is {found}, not {wanted}; move it away or fix the path"


def handle(module: AnsibleModule, entry: dict) -> tuple[dict, list]:
    """Make one entry what it says; (result, diffs)."""
    path, state = entry["path"], entry["state"]
    b_path = to_bytes(path, errors="surrogate_or_strict")
    try:
        st = _lstat(b_path)
    except OSError as exc:
        module.fail_json(msg=f"{path}: cannot read it: {to_native(exc)}", path=path)
    kind = _kind(st)
    result = {"path": path, "state": state, "changed": False, "created": False}
    diffs = []
    if kind != "absent" and kind != (state if state != "absent" else "file"):
        module.fail_json(msg=_refusal(path, kind, state), path=path)

    if state == "absent":
        if kind == "file":
            result["changed"] = True
            diffs.append({"before_header": path, "after_header": path,
                          "before": {"path": path, "state": "file"}, "after": {"path": path, "state": "absent"}})
            if not module.check_mode:
                try:
                    os.unlink(b_path)
                except OSError as exc:
                    module.fail_json(msg=f"{path}: cannot remove it: {to_native(exc)}", path=path)
        return result, diffs

    parent = os.path.dirname(path)
    # In check mode a missing directory may come from an earlier task that did not run for real (a package that
    # ships it), so the entry is reported as a change; the real run fails when it is still missing.
    if not os.path.isdir(to_bytes(parent, errors="surrogate_or_strict")) and not module.check_mode:
        module.fail_json(msg=f"{path}: its directory {parent} does not exist; list it before as a "
                             "state=directory entry", path=path)

    if state == "directory" and kind == "absent":
        result["changed"] = result["created"] = True
        diffs.append({"before_header": path, "after_header": path,
                      "before": {"path": path, "state": "absent"}, "after": {"path": path, "state": "directory"}})
        if not module.check_mode:
            try:
                os.mkdir(b_path, 0o700)
            except OSError as exc:
                module.fail_json(msg=f"{path}: cannot create it: {to_native(exc)}", path=path)
    elif state == "file":
        data = to_bytes(entry["content"], errors="surrogate_or_strict")
        before = b""
        if kind == "file":
            try:
                with open(b_path, "rb") as current:
                    before = current.read()
            except OSError as exc:
                module.fail_json(msg=f"{path}: cannot read it: {to_native(exc)}", path=path)
        if kind == "absent" or before != data:
            result["changed"] = True
            result["created"] = kind == "absent"
            diffs.append({"before_header": path if kind == "file" else f"{path} (absent)", "after_header": path,
                          "before": to_text(before, errors="surrogate_or_replace"),
                          "after": to_text(data, errors="surrogate_or_replace")})
            if not module.check_mode:
                try:
                    _write(module, b_path, data)
                except OSError as exc:
                    module.fail_json(msg=f"{path}: cannot write it: {to_native(exc)}", path=path)

    # In check mode a file or directory still to create has no attributes to compare.
    if kind != "absent" or not module.check_mode:
        changed, diff = _attributes(module, entry)
        if changed:
            result["changed"] = True
            if not result["created"]:
                diffs.append(diff)
    return result, diffs


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list", "elements": "dict", "required": True,
                "options": {
                    "path": {"type": "path", "required": True},
                    "state": {"type": "str", "choices": list(STATES), "default": "file"},
                    "content": {"type": "str"},
                    "owner": {"type": "str"},
                    "group": {"type": "str"},
                    "mode": {"type": "raw"},
                },
                "required_if": [("state", "file", ("content", "mode")), ("state", "directory", ("mode",))],
            },
        },
        supports_check_mode=True,
    )
    seen = set()
    for entry in module.params["files"]:
        entry["path"] = os.path.normpath(entry["path"])
        if not os.path.isabs(entry["path"]):
            module.fail_json(msg=f"files: {entry['path']} is not an absolute path")
        if entry["path"] in seen:
            module.fail_json(msg=f"files: {entry['path']} is listed twice")
        seen.add(entry["path"])

    results, diffs = [], []
    for entry in module.params["files"]:
        result, entry_diffs = handle(module, entry)
        results.append(result)
        diffs.extend(entry_diffs)
    changed_paths = [r["path"] for r in results if r["changed"]]
    out = {"changed": bool(changed_paths), "files": results, "changed_paths": changed_paths}
    if module._diff:
        out["diff"] = diffs
    module.exit_json(**out)


if __name__ == "__main__":
    main()
