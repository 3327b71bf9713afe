# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pod_security_namespace and pod_security_conflict of the private role _k8s (namespaces with Pod
Security labels); the logic is in module_utils/_monitoring.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring


def pod_security_namespace(name: Any, level: Any, version: Any = "latest") -> dict:
    try:
        return _monitoring.pod_security_namespace(name, level, version)
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(f"pod_security_namespace: {exc}") from None


def pod_security_conflict(namespace: Any, needed: Any) -> str:
    if not isinstance(namespace, (dict, type(None))):
        raise AnsibleFilterError("pod_security_conflict expects a Namespace object (or none)")
    try:
        return _monitoring.pod_security_conflict(namespace, needed)
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(f"pod_security_conflict: {exc}") from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "pod_security_namespace": pod_security_namespace,
            "pod_security_conflict": pod_security_conflict,
        }
