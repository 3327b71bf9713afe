# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpu_alert_rules of the gpu_alerts role; the logic is in module_utils/_monitoring.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring


def gpu_alert_rules(settings: Any) -> list[dict]:
    try:
        return _monitoring.gpu_alert_rules(settings)
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "gpu_alert_rules": gpu_alert_rules,
        }
