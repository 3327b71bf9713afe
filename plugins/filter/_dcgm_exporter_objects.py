# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter dcgm_exporter_objects of the dcgm_exporter role; the logic is in module_utils/_dcgm.py (its DaemonSet in
module_utils/_node_daemonset.py, shared with device_plugin_objects)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _dcgm_exporter_objects
version_added: 2.0.0
short_description: 'Private to the dcgm_exporter role, not API: the dcgm_exporter role''s objects, and its scrape configuration file, as data'
description:
  - Builds what the M(k8sgpu.nvidia.dcgm_exporter) role puts into the cluster, from the role's settings, one part or
    all three.
  - C(objects), in the order the role applies them - the ConfigMap C(<name>-counters) with the counters CSV
    (C(counters.csv)), the DaemonSet (the node agents', module_utils/_node_daemonset.py, around the
    exporter's pod, C(SYS_ADMIN) only when the CSV asks for profiling fields, its pods annotated
    C(k8sgpu.nvidia/counters-sha256) so that they roll when the counters change) and the Service (port C(metrics)).
  - C(service_monitor), the ServiceMonitor (C(monitoring.coreos.com/v1), C(honorLabels) false, the Node's name
    relabelled into C(node)).
  - C(scrape_config), the text of the equivalent Prometheus scrape configuration file (C(kubernetes_sd_configs) role
    C(endpoints)), which the role writes on the controller when the cluster has no ServiceMonitor CRD. Its first
    comment is the setting C(managed); every value in it is written as P(ansible.builtin.to_json#filter) writes it.
  - A part reads only the settings it needs, so Ansible templates only those.
  - Fails naming the setting when one is missing or of the wrong type.
positional: _input, part, allow_unsafe_settings
options:
  _input:
    description: >-
      The settings - name, namespace, version, image, image_pull_policy, image_pull_secrets, labels (the selector),
      counters_csv (as P(k8sgpu.nvidia._dcgm_counters_csv#filter) writes it), port, collect_interval_ms,
      gpus_by_volume_mount, kubelet_pod_resources_dir, node_affinity_label, tolerations, priority_class,
      runtime_class, resources, probe_initial_delay, probe_period, probe_timeout, probe_failure_threshold (for
      C(objects): a kubelet_pod_resources_dir that is not C(<kubelet root-dir>/pod-resources) fails naming
      dcgm_exporter_kubelet_pod_resources_dir, or with O(allow_unsafe_settings) is warned about); name, namespace,
      labels, service_monitor_labels, scrape_interval (for C(service_monitor)); name,
      namespace, scrape_interval and managed, the text of the file's first comment (for C(scrape_config)). They are
      the dcgm_exporter role's variables without the prefix, and what its vars derive from them.
    type: dict
    required: true
  part:
    description: The part to build; without it, all three in a dict.
    type: str
    choices: [objects, service_monitor, scrape_config]
  allow_unsafe_settings:
    description: The role's dcgm_exporter_allow_unsafe_settings - a kubelet_pod_resources_dir outside the kubelet's
      pod-resources directory is let through, with a warning, instead of failing.
    type: bool
    default: false
    version_added: 2.0.0
"""

EXAMPLES = r"""
objects: "{{ _dcgm_exporter_settings | k8sgpu.nvidia._dcgm_exporter_objects('objects') }}"
service_monitor: "{{ _dcgm_exporter_settings | k8sgpu.nvidia._dcgm_exporter_objects('service_monitor') }}"
everything: "{{ _dcgm_exporter_settings | k8sgpu.nvidia._dcgm_exporter_objects }}"
"""

RETURN = r"""
_value:
  description: >-
    With O(part), that part (a list of objects, a dict, a text); without it, a dict of the three parts, keyed by
    their names.
  type: raw
  contains:
    objects:
      description: The ConfigMap, the DaemonSet and the Service, in this order.
      type: list
      elements: dict
    service_monitor:
      description: The ServiceMonitor.
      type: dict
    scrape_config:
      description: The Prometheus scrape configuration file (C(scrape_configs)), its text.
      type: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _dcgm, _node_daemonset


def dcgm_exporter_objects(settings: Any, part: Any = None, allow_unsafe_settings: Any = False) -> Any:
    try:
        if part in (None, "objects") and isinstance(settings, dict) and "kubelet_pod_resources_dir" in settings:
            warning = _dcgm.check_host_paths({"kubelet_pod_resources_dir": settings["kubelet_pod_resources_dir"],
                                              "allow_unsafe_settings": allow_unsafe_settings})
            if warning:
                Display().warning(warning)  # once per run: Display shows a given warning text once
        return _dcgm.exporter_objects(settings, part, allow_unsafe_settings)
    except _node_daemonset.NodeDaemonSetError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_dcgm_exporter_objects": dcgm_exporter_objects}
