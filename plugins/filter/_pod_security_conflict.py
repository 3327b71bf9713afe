# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pod_security_conflict filter; the logic is in module_utils/_k8s_namespace.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _pod_security_conflict
version_added: 1.0.0
short_description: 'Private to the k8s_apply role, not API: why an existing namespace would refuse pods that need a Pod Security level'
description:
  - Compares the namespace's C(pod-security.kubernetes.io/enforce) label with the level the pods need and, when
    the namespace enforces a stricter one, says so with the fix (relabel it, or choose another namespace).
  - Only C(enforce) refuses pods; a namespace without it admits them under the cluster's default (C(privileged)
    unless the API server's admission configuration says otherwise).
positional: _input, needed
options:
  _input:
    description: The Namespace as M(kubernetes.core.k8s_info) returns it, or none when it does not exist.
    type: dict
    required: true
  needed:
    description: The level the pods need.
    type: str
    choices: [restricted, baseline, privileged]
    required: true
"""

EXAMPLES = r"""
problem: "{{ ns.resources | first | default(none) | k8sgpu.nvidia._pod_security_conflict('privileged') }}"
"""

RETURN = r"""
_value:
  description: The reason and the fix, or an empty string when the pods are admitted.
  type: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _k8s_namespace


def pod_security_conflict(namespace: Any, needed: Any) -> str:
    if not isinstance(namespace, (dict, type(None))):
        raise AnsibleFilterError("pod_security_conflict expects a Namespace object (or none)")
    try:
        return _k8s_namespace.pod_security_conflict(namespace, needed)
    except _k8s_namespace.NamespaceError as exc:
        raise AnsibleFilterError(f"pod_security_conflict: {exc}") from None


class FilterModule:
    def filters(self) -> dict:
        return {"_pod_security_conflict": pod_security_conflict}
