# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter device_plugin_objects of the device_plugin role; the logic is in module_utils/_device_plugin.py (its
DaemonSet in module_utils/_node_daemonset.py, shared with dcgm_exporter_objects)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _device_plugin_objects
version_added: 2.0.0
short_description: 'Private to the device_plugin role, not API: the device_plugin role''s objects, its ConfigMap and DaemonSet, as data'
description:
  - Builds the objects the M(k8sgpu.nvidia.device_plugin) role applies (install method C(manifest)), in the order it
    applies them, from the role's settings.
  - The ConfigMap C(<name>-config) holds the plugin's configuration file C(config.yaml), the configuration written as
    P(ansible.builtin.to_nice_yaml#filter) with C(indent=2) writes it.
  - The DaemonSet is the node agents' (module_utils/_node_daemonset.py) around the plugin's pod (container
    C(nvidia-device-plugin-ctr), no capabilities, the kubelet's device plugin directory, the ConfigMap, and every GPU
    as a C(/dev/null) volume mounted at C(/var/run/nvidia-container-devices/all)); its pods carry the annotation
    C(k8sgpu.nvidia/config-sha256), the SHA-256 of the configuration as P(ansible.builtin.to_json#filter) writes it,
    so they roll when the configuration changes.
  - Fails naming the setting when one is missing or of the wrong type.
positional: _input
options:
  _input:
    description: >-
      The settings - name, namespace, version, image, image_pull_policy, image_pull_secrets, labels (the selector),
      config (the plugin's configuration), node_affinity_label, tolerations, priority_class, runtime_class, resources
      (the device_plugin role's variables without the prefix, and what its vars derive from them).
    type: dict
    required: true
"""

EXAMPLES = r"""
objects: "{{ _device_plugin_settings | k8sgpu.nvidia._device_plugin_objects }}"
"""

RETURN = r"""
_value:
  description: The ConfigMap (C(v1)) and the DaemonSet (C(apps/v1)), in this order.
  type: list
  elements: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _device_plugin, _node_daemonset


def device_plugin_objects(settings: Any) -> list[dict]:
    try:
        return _device_plugin.objects(settings)
    except _node_daemonset.NodeDaemonSetError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_device_plugin_objects": device_plugin_objects}
