#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_gpu_allocatable
short_description: Wait until Nodes advertise allocatable GPUs, and say why not
version_added: 1.0.0
description:
  - Polls the Nodes until every one in O(names) advertises an allocatable O(resource) (C(nvidia.com/gpu) by
    default) greater than zero, or O(timeout) passes.
  - On timeout it fails with, per Node that is not ready, the reason read from the API - the Node is missing or
    NotReady; no device plugin pod runs there because the Node fails the DaemonSet's node affinity or has an
    untolerated taint; the plugin pod is waiting (for example C(ImagePullBackOff), C(CrashLoopBackOff)); or the
    plugin runs but found no GPU.
  - Written because M(kubernetes.core.k8s_info) can wait for a condition on one object, not for a resource
    quantity on many Nodes, and cannot explain a failure in terms of the device plugin.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
options:
  names:
    description: Node names that must advertise the resource.
    type: list
    elements: str
    required: true
  resource:
    description: Extended resource name.
    type: str
    default: nvidia.com/gpu
  timeout:
    description: How long to wait, in seconds. V(0) checks once.
    type: int
    default: 300
  sleep:
    description: Seconds between checks.
    type: int
    default: 2
  daemonset_name:
    description: The device plugin DaemonSet, used to explain failures (pods per Node, tolerations, node affinity).
    type: str
  daemonset_namespace:
    description: Namespace of O(daemonset_name).
    type: str
    default: kube-system
requirements:
  - kubernetes >= 24.2.0 (Python)
notes:
  - Needs RBAC C(list) on C(nodes), and for the diagnosis C(get) on the DaemonSet and C(list) on pods in its namespace.
"""

EXAMPLES = r"""
- name: Wait for the device plugin to register the GPUs
  k8sgpu.nvidia.k8s_gpu_allocatable:
    names: "{{ groups['gpu_nodes'] | map('k8sgpu.nvidia.node_name', hostvars) | list }}"
    daemonset_name: nvidia-device-plugin-daemonset
    timeout: 300
"""

RETURN = r"""
allocatable:
  description: Allocatable amount of O(resource) per Node in O(names), at the last check.
  returned: always
  type: dict
  sample: {gpu-01: 8, gpu-02: 0}
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 4.1
not_ready:
  description: Per Node without the resource, the reason.
  returned: failure
  type: dict
  sample: {gpu-02: "device plugin pod nvidia-device-plugin-daemonset-x2v4k is waiting: ImagePullBackOff: Back-off pulling image"}
"""

import time

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_gpu import diagnose, wait_allocatable


def _selector(match_labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def main() -> None:
    argument_spec = dict(
        names=dict(type="list", elements="str", required=True),
        resource=dict(type="str", default="nvidia.com/gpu"),
        timeout=dict(type="int", default=300),
        sleep=dict(type="int", default=2),
        daemonset_name=dict(type="str"),
        daemonset_namespace=dict(type="str", default="kube-system"),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    p = module.params
    api = dynamic_client(module)

    def list_nodes() -> list:
        try:
            return api.request("get", "/api/v1/nodes", serializer=raw_json).get("items") or []
        except Exception as exc:
            module.fail_json(msg=f"Could not list Nodes: {api_error_message(exc)}")

    counts, nodes, waited = wait_allocatable(list_nodes, p["names"], p["resource"], p["timeout"], p["sleep"],
                                             time.monotonic())

    if all(counts.values()):
        module.exit_json(changed=False, allocatable=counts, waited=waited)

    daemonset, pods_by_node = None, {}
    if p["daemonset_name"]:
        ns, name = p["daemonset_namespace"], p["daemonset_name"]
        try:
            daemonset = api.request("get", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}", serializer=raw_json)
            selector = _selector(((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
            pods = api.request("get", f"/api/v1/namespaces/{ns}/pods", label_selector=selector,
                               serializer=raw_json).get("items") or []
            for pod in pods:
                pods_by_node.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(pod)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                module.warn(f"Could not read DaemonSet {ns}/{name} or its pods to explain the failure: {api_error_message(exc)}")
            else:
                module.warn(f"DaemonSet {ns}/{name} does not exist")
    not_ready = {
        name: diagnose(name, nodes.get(name), p["resource"], pods_by_node.get(name, []), daemonset)
        for name, count in counts.items() if not count
    }
    module.fail_json(
        msg=f"{len(not_ready)} of {len(counts)} Node(s) advertise no allocatable {p['resource']} after {waited:g} s: "
            + "; ".join(f"{name}: {why}" for name, why in sorted(not_ready.items())),
        allocatable=counts, waited=waited, not_ready=not_ready,
    )


if __name__ == "__main__":
    main()
