# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the GPU monitoring roles (dcgm_exporter, gpu_alerts, gpu_dashboard, gpu_metrics_adapter); the logic
is in module_utils/_monitoring.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring


def dcgm_counters_csv(counters: Any, profiling: bool = True, extra: Any = None) -> str:
    try:
        return _monitoring.counters_csv(counters, bool(profiling), extra or [])
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc)) from None


def dcgm_profiling_fields(csv_text: Any) -> list[str]:
    if not isinstance(csv_text, str):
        raise AnsibleFilterError("dcgm_profiling_fields expects the counters CSV text")
    return _monitoring.profiling_fields(csv_text)


def grafana_dashboard(text: Any, source: str = "dashboard") -> str:
    if not isinstance(text, str):
        raise AnsibleFilterError(f"grafana_dashboard expects the dashboard's JSON text ({source})")
    try:
        return _monitoring.grafana_dashboard(text, str(source))
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc)) from None


def gpu_alert_rules(settings: Any) -> list[dict]:
    try:
        return _monitoring.gpu_alert_rules(settings)
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc)) from None


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
            "dcgm_counters_csv": dcgm_counters_csv,
            "dcgm_profiling_fields": dcgm_profiling_fields,
            "gpu_alert_rules": gpu_alert_rules,
            "grafana_dashboard": grafana_dashboard,
            "pod_security_conflict": pod_security_conflict,
            "pod_security_namespace": pod_security_namespace,
        }
