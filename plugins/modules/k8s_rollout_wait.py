#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_rollout_wait
short_description: Wait for a DaemonSet or Deployment rollout, and name each Node that is not ready and why
version_added: 1.0.0
description:
  - Polls the workload until its controller has seen the latest spec and every pod it wants runs that spec and is
    available, or O(timeout) seconds (a monotonic clock) pass.
  - For a DaemonSet it then reads the Nodes and the DaemonSet's pods, and names each Node that must run a pod (those
    in O(nodes) and those with the label the DaemonSet's node affinity requires) but has no Ready one, with the reason
    (the Node is missing or NotReady, an untolerated taint, the node affinity, a waiting container).
  - It fails when the rollout did not finish or a Node has no Ready pod. The private role C(k8s_apply) (entry point
    C(rollout)) is how the collection's roles call it.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
options:
  kind:
    description: The workload's kind.
    type: str
    choices: [DaemonSet, Deployment]
    default: DaemonSet
  namespace:
    description: The workload's namespace.
    type: str
    required: true
  name:
    description: The workload's name.
    type: str
    required: true
  timeout:
    description: How long to wait, in seconds. V(0) checks once.
    type: int
    default: 300
  sleep:
    description: Seconds between checks.
    type: int
    default: 2
  nodes:
    description: Node names that must run a pod of the DaemonSet, besides those its node affinity selects.
    type: list
    elements: str
    default: []
  what:
    description: How the failure message names the DaemonSet's pods, for example C(dcgm-exporter pod).
    type: str
    default: pod
  gpu_resource:
    description: The extended resource whose Nodes RV(nodes_outside) lists, and which O(wait_allocatable) waits for.
    type: str
    default: nvidia.com/gpu
  wait_allocatable:
    description:
      - With a DaemonSet that rolled out with no Node in RV(problems), also wait, within the same O(timeout) (counted
        from the start), until every Node in O(nodes) advertises allocatable O(gpu_resource), as
        M(k8sgpu.nvidia.k8s_gpu_allocatable) does. The counts are returned in RV(allocatable); a Node still without
        any does not fail the task (call M(k8sgpu.nvidia.k8s_gpu_allocatable) then, which names why).
      - Saves the device plugin's wait a second module call where everything is in place.
    type: bool
    default: false
requirements:
  - kubernetes >= 24.2.0 (Python)
notes:
  - Needs RBAC C(get) on the workload, and for a DaemonSet C(list) on nodes and on pods in its namespace.
"""

EXAMPLES = r"""
- name: Wait for the DCGM exporter on every GPU node
  k8sgpu.nvidia.k8s_rollout_wait:
    kind: DaemonSet
    namespace: dcgm-exporter
    name: dcgm-exporter
    nodes: "{{ groups['gpu_nodes'] | map('k8sgpu.nvidia.node_name', hostvars) | list }}"
    what: dcgm-exporter pod
    timeout: 300
"""

RETURN = r"""
rolled_out:
  description: Whether the rollout finished.
  returned: always
  type: bool
  sample: true
problems:
  description: Per Node that must run a pod of the DaemonSet but has no Ready one, why. Empty for a Deployment.
  returned: always
  type: dict
  sample: {gpu-02: "no dcgm-exporter pod on this node: untolerated taint(s) dedicated=infra:NoSchedule"}
nodes_outside:
  description: Nodes with O(gpu_resource) capacity that the DaemonSet does not select and O(nodes) does not name.
  returned: always
  type: list
  elements: str
  sample: [gpu-03]
status:
  description: The workload's status at the last check (empty when it does not exist).
  returned: always
  type: dict
  sample: {desiredNumberScheduled: 2, numberReady: 2}
allocatable:
  description: Per Node in O(nodes), its allocatable O(gpu_resource) at the last check.
  returned: with O(wait_allocatable), when the DaemonSet rolled out with no Node in RV(problems)
  type: dict
  sample: {gpu-01: 8, gpu-02: 8}
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 4.1
"""

import time

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_gpu import wait_allocatable
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_rollout import (
    daemonset_node_problems,
    daemonset_rolled_out,
    deployment_rolled_out,
    gpu_nodes_outside,
)

PLURAL = {"DaemonSet": "daemonsets", "Deployment": "deployments"}


def _selector(match_labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def main() -> None:
    argument_spec = dict(
        kind=dict(type="str", choices=list(PLURAL), default="DaemonSet"),
        namespace=dict(type="str", required=True),
        name=dict(type="str", required=True),
        timeout=dict(type="int", default=300),
        sleep=dict(type="int", default=2),
        nodes=dict(type="list", elements="str", default=[]),
        what=dict(type="str", default="pod"),
        gpu_resource=dict(type="str", default="nvidia.com/gpu"),
        wait_allocatable=dict(type="bool", default=False),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    p = module.params
    api = dynamic_client(module)
    kind, ns, name = p["kind"], p["namespace"], p["name"]
    path = f"/apis/apps/v1/namespaces/{ns}/{PLURAL[kind]}/{name}"
    done = daemonset_rolled_out if kind == "DaemonSet" else deployment_rolled_out

    def read(url: str, **kwargs):
        try:
            return api.request("get", url, serializer=raw_json, **kwargs)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            module.fail_json(msg=f"Could not read {url}: {api_error_message(exc)}")

    start = time.monotonic()
    while True:
        live = read(path)
        rolled_out = done(live)
        waited = round(time.monotonic() - start, 1)
        if rolled_out or waited >= p["timeout"]:
            break
        time.sleep(max(1, p["sleep"]))

    problems, outside = {}, []
    if kind == "DaemonSet":
        nodes = (read("/api/v1/nodes") or {}).get("items") or []
        pods = []
        if live:
            selector = _selector(((live.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
            pods = (read(f"/api/v1/namespaces/{ns}/pods", label_selector=selector) or {}).get("items") or []
        problems = daemonset_node_problems(nodes, live, pods, p["nodes"], p["what"])
        outside = gpu_nodes_outside(nodes, live, p["nodes"], p["gpu_resource"])
    counts = None
    if kind == "DaemonSet" and p["wait_allocatable"] and rolled_out and not problems:
        counts, _nodes, waited = wait_allocatable(lambda: (read("/api/v1/nodes") or {}).get("items") or [],
                                                  p["nodes"], p["gpu_resource"], p["timeout"], p["sleep"], start,
                                                  nodes=nodes)
    status = (live or {}).get("status") or {}
    result = dict(changed=False, rolled_out=rolled_out, problems=problems, nodes_outside=outside, status=status,
                  waited=waited)
    if counts is not None:
        result["allocatable"] = counts
    if rolled_out and not problems:
        module.exit_json(**result)
    state = "rolled out" if rolled_out else f"did not finish rolling out in {p['timeout']} s"
    module.fail_json(
        msg=f"{kind} {ns}/{name} {state} ({status if live else 'not found'}); {len(problems)} Node(s) without a "
            f"Ready {p['what']}: " + "; ".join(f"{node}: {why}" for node, why in sorted(problems.items())),
        **result)


if __name__ == "__main__":
    main()
