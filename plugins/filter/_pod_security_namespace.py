# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pod_security_namespace and pod_security_conflict of the private role k8s_apply (namespaces with Pod
Security labels); the logic is in module_utils/_k8s_namespace.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _pod_security_namespace
version_added: 1.0.0
short_description: 'Private to the k8s_apply role, not API: A Namespace labelled for Pod Security Admission at one level'
description:
  - The Namespace object a role of the collection creates, with the label C(app.kubernetes.io/managed-by=k8sgpu.nvidia)
    and the Pod Security Admission labels C(pod-security.kubernetes.io/enforce), C(audit) and C(warn), each at
    O(level), with their C(-version) labels at O(version).
  - The roles use the strictest level their pods pass; C(restricted) where they run no pod that needs more.
positional: _input, level, version
options:
  _input:
    description: The namespace's name (a DNS label).
    type: str
    required: true
  level:
    description: The Pod Security level.
    type: str
    choices: [restricted, baseline, privileged]
    required: true
  version:
    description: The policy version, C(latest) or C(v1.<minor>).
    type: str
    default: latest
"""

EXAMPLES = r"""
namespace: "{{ 'gpu-monitoring' | k8sgpu.nvidia._pod_security_namespace('restricted') }}"
"""

RETURN = r"""
_value:
  description: The Namespace object (apiVersion, kind, metadata with name and labels).
  type: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _k8s_namespace


def pod_security_namespace(name: Any, level: Any, version: Any = "latest") -> dict:
    try:
        return _k8s_namespace.pod_security_namespace(name, level, version)
    except _k8s_namespace.NamespaceError as exc:
        raise AnsibleFilterError(f"pod_security_namespace: {exc}") from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "_pod_security_namespace": pod_security_namespace,
        }
