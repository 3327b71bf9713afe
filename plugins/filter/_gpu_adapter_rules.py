# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gpu_adapter_rules of the gpu_metrics_adapter role; the logic is in module_utils/_metrics_adapter.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _gpu_adapter_rules
version_added: 1.0.0
short_description: 'Private to the gpu_metrics_adapter role, not API: prometheus-adapter rules for the DCGM exporter''s GPU utilisation'
description:
  - Returns the adapter's configuration (its C(--config) file) with custom rules only.
  - A per-pod rule serves O(metric) for pods, mapping the exporter's C(exported_namespace)/C(exported_pod) labels
    (the pod's labels, renamed by Prometheus because the ServiceMonitor keeps C(honorLabels) false) to the namespace
    and pod resources.
  - An object rule serves O(object_metric) on C(Service/<exporter_service>) in each namespace - O(aggregation) over
    the GPUs that pods of that namespace hold, from series whose C(service) target label is O(_input).
positional: _input, metric, aggregation, object_metric, extra_rules
options:
  _input:
    description: Name of the DCGM exporter's Service.
    type: str
    required: true
  metric:
    description: The exporter's metric, served per pod under the same name.
    type: str
    default: DCGM_FI_DEV_GPU_UTIL
  aggregation:
    description: How values of several GPUs combine.
    type: str
    choices: [avg, max, min, sum]
    default: avg
  object_metric:
    description: Name of the object metric.
    type: str
    default: DCGM_FI_DEV_GPU_UTIL_AVG
  extra_rules:
    description: More adapter rules, appended as they are.
    type: list
    elements: dict
"""

EXAMPLES = r"""
adapter_config: "{{ 'dcgm-exporter' | k8sgpu.nvidia._gpu_adapter_rules }}"
"""

RETURN = r"""
_value:
  description: "The adapter configuration, C({rules: [...]})."
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _metrics_adapter


def gpu_adapter_rules(exporter_service, metric="DCGM_FI_DEV_GPU_UTIL", aggregation="avg", object_metric="DCGM_FI_DEV_GPU_UTIL_AVG", extra_rules=None):
    """module_utils/_metrics_adapter.py's gpu_adapter_rules, its errors as the filter's."""
    try:
        return _metrics_adapter.gpu_adapter_rules(exporter_service, metric, aggregation, object_metric, extra_rules)
    except _metrics_adapter.AdapterRulesError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_gpu_adapter_rules": gpu_adapter_rules}
