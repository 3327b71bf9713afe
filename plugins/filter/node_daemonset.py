# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_daemonset filter: the DaemonSet the collection's node agents (device plugin, DCGM exporter) share."""
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
    roles write it once.
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

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

MANAGED_BY = {"app.kubernetes.io/managed-by": "k8sgpu.nvidia"}


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise AnsibleFilterError(f"node_daemonset: {what} must be a non-empty string, got {value!r}")
    return value


def node_daemonset(pod: Any, name: Any, namespace: Any, labels: Any, version: Any, node_label: Any,
                   tolerations: Any, priority_class: Any, runtime_class: Any = "", pull_secrets: Any = None,
                   annotations: Any = None) -> dict:
    """A DaemonSet that runs `pod` (its containers, volumes and any other pod spec fields) on every Node labelled
    `node_label`=true: labelled with `labels` (also its selector and the pods' labels), the version and
    app.kubernetes.io/managed-by=k8sgpu.nvidia; rolling updates; the pods with `annotations`, the priority class,
    the runtime class when given, no service account token, the tolerations, the pull secrets when given and the
    RuntimeDefault seccomp profile. The pod's own fields come last and win."""
    if not isinstance(pod, Mapping) or not pod.get("containers"):
        raise AnsibleFilterError(f"node_daemonset expects the pod's spec (a dict with containers), got {pod!r}")
    if not isinstance(labels, Mapping) or not labels:
        raise AnsibleFilterError(f"node_daemonset: labels must be a non-empty dict (the selector), got {labels!r}")
    if not isinstance(tolerations, Sequence) or isinstance(tolerations, str):
        raise AnsibleFilterError(f"node_daemonset: tolerations must be a list, got {tolerations!r}")
    secrets = pull_secrets or []
    if isinstance(secrets, str) or not isinstance(secrets, Sequence):
        raise AnsibleFilterError(f"node_daemonset: pull_secrets must be a list of Secret names, got {pull_secrets!r}")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise AnsibleFilterError(f"node_daemonset: annotations must be a dict, got {annotations!r}")
    selector = dict(labels)
    spec: dict = {"priorityClassName": _text(priority_class, "priority_class")}
    if runtime_class:
        spec["runtimeClassName"] = _text(runtime_class, "runtime_class")
    spec.update({
        # Node agents talk to the kubelet and the devices, not to the API server.
        "automountServiceAccountToken": False,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": _text(node_label, "node_label"), "operator": "In", "values": ["true"]}]}]}}},
        "tolerations": list(tolerations),
    })
    if secrets:
        spec["imagePullSecrets"] = [{"name": _text(secret, "a pull secret")} for secret in secrets]
    spec["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    spec.update(pod)
    template_meta: dict = {"labels": dict(selector)}
    if annotations:
        template_meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": _text(name, "name"),
            "namespace": _text(namespace, "namespace"),
            "labels": {**selector, "app.kubernetes.io/version": str(version), **MANAGED_BY},
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": template_meta, "spec": spec},
        },
    }


class FilterModule:
    def filters(self) -> dict:
        return {"node_daemonset": node_daemonset}
