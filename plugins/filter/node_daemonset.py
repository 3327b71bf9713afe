# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_daemonset filter: the DaemonSet the collection's node agents (device plugin, DCGM exporter) share; the logic
is in module_utils/_node_daemonset.py (which the filters device_plugin_objects and dcgm_exporter_objects use too)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: node_daemonset
version_added: 1.0.0
short_description: The DaemonSet around a node agent's pod, as the device plugin and DCGM exporter roles deploy it
description:
  - Wraps a pod's spec (its C(containers), C(volumes) and any other pod spec fields) in the DaemonSet the
    collection's node agents share, so that the M(k8sgpu.nvidia.device_plugin) and M(k8sgpu.nvidia.dcgm_exporter)
    roles write it once (their filters P(k8sgpu.nvidia.device_plugin_objects#filter) and
    P(k8sgpu.nvidia.dcgm_exporter_objects#filter) build their DaemonSets with it).
  - The DaemonSet is labelled with O(labels) (also its selector and the pods' labels),
    C(app.kubernetes.io/version=<version>) and C(app.kubernetes.io/managed-by=k8sgpu.nvidia), updates its pods one
    Node at a time (C(RollingUpdate)), and runs them only on Nodes labelled O(node_label)C(=true).
  - The pods get O(annotations), the priority class, the runtime class when given, no service account token, the
    tolerations, the image pull secrets when given and the C(RuntimeDefault) seccomp profile. The pod's own fields
    come last and win.
  - Fails naming the argument when the pod has no containers, the labels are empty or an argument has the wrong
    type.
positional: _input, name, namespace, labels, version, node_label, tolerations, priority_class, runtime_class, pull_secrets, annotations
options:
  _input:
    description: The pod's spec, at least C(containers).
    type: dict
    required: true
  name:
    description: The DaemonSet's name.
    type: str
    required: true
  namespace:
    description: Its namespace.
    type: str
    required: true
  labels:
    description: The labels that select its pods (C(app.kubernetes.io/name), C(app.kubernetes.io/instance)).
    type: dict
    required: true
  version:
    description: The agent's version, the label C(app.kubernetes.io/version).
    type: str
    required: true
  node_label:
    description: The Node label (value C(true)) the node affinity requires, for example C(nvidia.com/gpu.present).
    type: str
    required: true
  tolerations:
    description: The pods' tolerations, as Kubernetes toleration objects.
    type: list
    elements: dict
    required: true
  priority_class:
    description: The pods' priority class.
    type: str
    required: true
  runtime_class:
    description: The pods' runtime class; empty for the node's default.
    type: str
    default: ""
  pull_secrets:
    description: Names of image pull Secrets.
    type: list
    elements: str
    default: []
  annotations:
    description: Annotations of the pods, for example a checksum of their configuration that rolls them when it changes.
    type: dict
    default: {}
"""

EXAMPLES = r"""
daemonset: >-
  {{ {'containers': [{'name': 'agent', 'image': 'registry.example/agent:1.0'}]}
     | k8sgpu.nvidia.node_daemonset('agent', 'kube-system', {'app.kubernetes.io/name': 'agent'}, '1.0',
                                    'nvidia.com/gpu.present', [], 'system-node-critical') }}
"""

RETURN = r"""
_value:
  description: The DaemonSet (C(apps/v1)).
  type: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_daemonset


def node_daemonset(pod: Any, name: Any, namespace: Any, labels: Any, version: Any, node_label: Any,
                   tolerations: Any, priority_class: Any, runtime_class: Any = "", pull_secrets: Any = None,
                   annotations: Any = None) -> dict:
    try:
        return _node_daemonset.node_daemonset(pod, name, namespace, labels, version, node_label, tolerations,
                                              priority_class, runtime_class, pull_secrets, annotations)
    except _node_daemonset.NodeDaemonSetError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"node_daemonset": node_daemonset}
