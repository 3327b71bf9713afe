# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpu_alert_rules of the gpu_alerts role; the logic is in module_utils/_alert_rules.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _gpu_alert_rules
version_added: 1.0.0
short_description: 'Private to the gpu_alerts role, not API: the GPU alert rules of the gpu_alerts role, as Prometheus rule groups'
description:
  - Builds one rule group with the alerts C(DCGMExporterTargetDown) (C(up == 0) for the exporter's job),
    C(GPUXidError) (C(DCGM_FI_DEV_XID_ERRORS) non-zero, some codes ignorable), C(GPUTemperatureHigh) and
    C(GPUMemoryTemperatureHigh) (C(DCGM_FI_DEV_GPU_TEMP), C(DCGM_FI_DEV_MEMORY_TEMP) over a threshold),
    C(GPUEccDoubleBitErrors) (C(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) above 0), C(GPURowRemapFailure)
    (C(DCGM_FI_DEV_ROW_REMAP_FAILURE)), C(GPUFramebufferNearlyFull) (used over used+free above a percentage) and
    C(GPUNodeGPUsNotReported) (kube-state-metrics' C(kube_node_status_allocatable{resource="nvidia_com_gpu"}),
    divided by the time-slicing replicas, above the number of GPUs the exporter reports per C(node)).
  - The result is both a Prometheus rules file's C(groups) and a PrometheusRule's C(spec.groups).
  - Fails naming the setting when a duration, number, percentage or XID code is malformed.
positional: _input
options:
  _input:
    description: >-
      The settings - job, selector, severity_critical, severity_warning, target_down_for, xid_for, xid_ignore,
      gpu_temp_celsius, gpu_temp_for, memory_temp_celsius, memory_temp_for, ecc_dbe_for, row_remap_for,
      framebuffer_percent, framebuffer_for, gpu_count_for, gpu_count_metric, gpu_replicas, group_name, extra_labels,
      runbook_url (the gpu_alerts role's variables without the prefix).
    type: dict
    required: true
"""

EXAMPLES = r"""
groups: "{{ settings | k8sgpu.nvidia._gpu_alert_rules }}"
"""

RETURN = r"""
_value:
  description: The rule groups.
  type: list
  elements: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _alert_rules


def gpu_alert_rules(settings: Any) -> list[dict]:
    try:
        return _alert_rules.gpu_alert_rules(settings)
    except _alert_rules.AlertRulesError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "_gpu_alert_rules": gpu_alert_rules,
        }
