# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for Kubernetes taints."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: taint_to_string
version_added: 1.0.0
short_description: Write a Kubernetes taint the way kubectl does
description:
  - Turns a taint object (C(key), optional C(value), C(effect)) into C(key=value:Effect),
    or C(key:Effect) when it has no value, the form C(kubectl taint) takes.
positional: _input
options:
  _input:
    description: A taint, as found in a Node's C(spec.taints).
    type: dict
    required: true
"""

EXAMPLES = r"""
# "node-role.kubernetes.io/control-plane:NoSchedule"
taints: "{{ node.spec.taints | default([]) | map('k8sgpu.nvidia.taint_to_string') | list }}"
"""

RETURN = r"""
_value:
  description: The taint as C(key[=value]:Effect).
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import taint_str


def taint_to_string(taint: dict) -> str:
    """Return a taint as ``key[=value]:Effect``, the form ``kubectl taint`` takes."""
    if not isinstance(taint, dict) or "key" not in taint or "effect" not in taint:
        raise AnsibleFilterError(f"taint_to_string expects a taint with 'key' and 'effect', got {taint!r}")
    return taint_str(taint)


class FilterModule:
    def filters(self) -> dict:
        return {"taint_to_string": taint_to_string}
