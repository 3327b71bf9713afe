# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _gpu_node_tolerations filter; the taint key is module_utils/_gpu_health_plan.py's, the gpu_health role's."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _gpu_node_tolerations
version_added: 2.0.0
short_description: >-
  Private to the roles dcgm_exporter and device_plugin, not API: the tolerations a GPU Node's own DaemonSet needs
description:
  - The tolerations of the taints that GPU Nodes carry and that a DaemonSet serving the GPUs must not be kept off by,
    in this order - C(nvidia.com/gpu) (C(Exists), C(NoSchedule); a cloud's GPU node pools taint their Nodes so), and
    the taint of the C(gpu_health) role on a Node with an unhealthy GPU (C(Exists), C(NoSchedule)), so that the device
    plugin keeps serving the Node's other GPUs and the DCGM exporter keeps reporting the unhealthy one.
  - The gpu_health role's taint key is written once, in the collection's Python; this filter gives it to the roles.
positional: _input
options:
  _input:
    description: Ignored (use C(none)).
    type: raw
    required: true
"""

EXAMPLES = r"""
_device_plugin_tolerations: "{{ none | k8sgpu.nvidia._gpu_node_tolerations + device_plugin_extra_tolerations }}"
"""

RETURN = r"""
_value:
  description: The tolerations, as a DaemonSet's pod template lists them (C(key), C(operator), C(effect)).
  type: list
  elements: dict
"""

from typing import Any

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gpu_health_plan import TAINT_KEY


def gpu_node_tolerations(_input: Any = None) -> list[dict]:
    return [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]


class FilterModule:
    def filters(self) -> dict:
        return {"_gpu_node_tolerations": gpu_node_tolerations}
