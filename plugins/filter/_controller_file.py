# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter controller_file, used by the roles that write files on the controller (gpu_alerts and dcgm_exporter through
k8s_apply, gpu_metrics_adapter); the logic is in module_utils/_controller_files.py."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _controller_file
version_added: 2.0.0
short_description: >-
  Private to the roles gpu_metrics_adapter and k8s_apply, not API: where a role may write a file on the
  controller, and whether it may replace the file there
description:
  - A relative path is taken under C(playbook_dir); an absolute path must be under C(playbook_dir) or under the
    directory the site names in C(k8sgpu_controller_dir). A C('..') component, a control character, and a symbolic link
    that leads out of those directories are refused.
  - An existing file is replaced only when the role wrote it - its first line is the marker
    C(# Managed by k8sgpu.nvidia <role>:) (O(kind=marker)), or it holds PEM blocks only (O(kind=pem), the adapter's
    certificate files); its mode is kept. Otherwise the filter fails naming the variable, the file and the fix (remove
    it, or choose another path), before anything is written.
  - With O(remove=true) (state absent) it never fails on an unrelated file; it returns C(remove=false) and the reason.
  - Reads the controller's filesystem; use it for files written with C(delegate_to=localhost).
positional: _input, variable, role, playbook_dir, controller_dir
options:
  _input:
    description: The path, as the variable holds it.
    type: str
    required: true
  variable:
    description: The variable that holds the path, for messages.
    type: str
    required: true
  role:
    description: The role that writes the file (its marker names it).
    type: str
    required: true
  playbook_dir:
    description: C(playbook_dir).
    type: str
    required: true
  controller_dir:
    description: C(k8sgpu_controller_dir | default('')), the site's directory for the collection's output.
    type: str
    default: ''
  kind:
    description: V(marker) for text files that start with the marker line, V(pem) for certificate and key files.
    type: str
    default: marker
  secret:
    description: A new file is made 0600 instead of 0644.
    type: bool
    default: false
  remove:
    description: Return what state absent may remove instead of what state present may write.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Write the rules file
  ansible.builtin.copy:
    content: "{{ _file.marker }}{{ rules_text }}"
    dest: "{{ _file.path }}"
    mode: "{{ _file.mode }}"
  delegate_to: localhost
  vars:
    _file: "{{ rules_path | k8sgpu.nvidia._controller_file('rules_path', 'gpu_alerts', playbook_dir) }}"
"""

RETURN = r"""
_value:
  description:
    - C(path) (absolute), C(exists), C(managed), C(mode) (the existing file's, or 0644/0600), C(directory_missing),
      C(marker) (the first line to write; empty for O(kind=pem)).
    - With O(remove=true), C(path), C(remove) and C(reason).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _controller_files


def controller_file(value, variable, role, playbook_dir, controller_dir="", kind="marker", secret=False, remove=False):
    """module_utils/_controller_files.py's plan (or removable), its errors as the filter's."""
    try:
        if remove:
            return _controller_files.removable(variable, value, role, playbook_dir, controller_dir or "", kind)
        return _controller_files.plan(variable, value, role, playbook_dir, controller_dir or "", kind, bool(secret))
    except _controller_files.ControllerFileError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_controller_file": controller_file}
