# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The adapter_rbac_rules filter; the logic is in module_utils/_metrics_adapter.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _adapter_rbac_rules
version_added: 1.0.0
short_description: 'Private to the gpu_metrics_adapter role, not API: the RBAC rules prometheus-adapter''s configuration needs, and no more'
description:
  - From the adapter's configuration (P(k8sgpu.nvidia._gpu_adapter_rules#filter)), the rules of two ClusterRoles.
  - C(adapter) is what the adapter itself reads to answer (C(get), C(list), C(watch)) - the resources its rules map
    series to (C(resources.overrides)), per API group, and C(namespaces).
  - C(metrics_reader) is what the HPA controller may read from C(custom.metrics.k8s.io) (C(get), C(list)) - one
    C(<resource>/<metric>) per rule and resource (namespaces aside), the form the API server's authorizer checks
    for C(/apis/custom.metrics.k8s.io/<version>/namespaces/<ns>/<resource>/<name>/<metric>).
  - Never a wildcard (resource, API group or verb) and never C(secrets). A rule that would need one is refused,
    naming the rule (its index and C(seriesQuery)) and the fix - resources from C(resources.template) (give
    C(resources.overrides) with explicit resources), an override naming C(*), a subresource or Secrets, and a
    metric name that a regular expression computes (C(name.as) with C($1) - give the literal name). Until 1.1.0
    such a rule widened the adapter's ClusterRole to C(*/*), the read of every Secret.
positional: _input
options:
  _input:
    description: The adapter's configuration, a dict with a C(rules) list.
    type: dict
    required: true
"""

EXAMPLES = r"""
rbac: "{{ 'dcgm-exporter' | k8sgpu.nvidia._gpu_adapter_rules | k8sgpu.nvidia._adapter_rbac_rules }}"
# {adapter: [{apiGroups: [""], resources: [namespaces, pods, services], verbs: [get, list, watch]}],
#  metrics_reader: [{apiGroups: [custom.metrics.k8s.io],
#                    resources: [pods/DCGM_FI_DEV_GPU_UTIL, services/DCGM_FI_DEV_GPU_UTIL_AVG], verbs: [get, list]}]}
"""

RETURN = r"""
_value:
  description: C(adapter) and C(metrics_reader), each a list of PolicyRules.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _metrics_adapter


def adapter_rbac_rules(config):
    """module_utils/_metrics_adapter.py's adapter_rbac_rules, its errors as the filter's."""
    try:
        return _metrics_adapter.adapter_rbac_rules(config)
    except _metrics_adapter.AdapterRulesError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_adapter_rbac_rules": adapter_rbac_rules}
