# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter grafana_dashboard of the gpu_dashboard role; the logic is in module_utils/_monitoring.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring


def grafana_dashboard(text: Any, source: str = "dashboard") -> str:
    if not isinstance(text, str):
        raise AnsibleFilterError(f"grafana_dashboard expects the dashboard's JSON text ({source})")
    try:
        return _monitoring.grafana_dashboard(text, str(source))
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "grafana_dashboard": grafana_dashboard,
        }
