# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The adapter_helm_values filter; the logic is in module_utils/_metrics_adapter.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _adapter_helm_values
version_added: 1.0.0
short_description: >-
  Private to the gpu_metrics_adapter role, not API: helm values for the prometheus-community/prometheus-adapter
  chart from an adapter configuration
description:
  - Splits the Prometheus URL into the chart's C(prometheus.url), C(prometheus.port) and C(prometheus.path), turns
    the chart's default rules off, and passes the configuration's rules as C(rules.custom).
positional: _input, prometheus_url
options:
  _input:
    description: Adapter configuration (P(k8sgpu.nvidia._gpu_adapter_rules#filter)).
    type: dict
    required: true
  prometheus_url:
    description: http(s) URL of Prometheus.
    type: str
    required: true
"""

EXAMPLES = r"""
values: "{{ 'dcgm-exporter' | k8sgpu.nvidia._gpu_adapter_rules | k8sgpu.nvidia._adapter_helm_values('http://prometheus-operated.monitoring.svc:9090') }}"
"""

RETURN = r"""
_value:
  description: Chart values.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _metrics_adapter


def adapter_helm_values(config, prometheus_url):
    """module_utils/_metrics_adapter.py's adapter_helm_values, its errors as the filter's."""
    try:
        return _metrics_adapter.adapter_helm_values(config, prometheus_url)
    except _metrics_adapter.AdapterRulesError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_adapter_helm_values": adapter_helm_values}
