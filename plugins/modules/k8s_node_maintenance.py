#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_node_maintenance
short_description: Cordon and drain a Node as kubectl drain does, within a fleet-wide limit, and wait for it to be back
version_added: 1.0.0
description:
  - V(cordon) and V(drain) first count the fleet's Nodes out of service (cordoned or NotReady, from the live cluster) and
    refuse, naming them, when taking this Node out too would exceed O(max_unavailable). Then the Node is cordoned,
    with O(annotations) set in the same patch.
  - V(drain) then evicts its pods with the Eviction API (policy/v1) as C(kubectl drain --ignore-daemonsets) does, in
    kubectl's order of checks. DaemonSet pods and mirror (static) pods are never evicted; finished pods are deleted;
    pods with C(emptyDir) volumes are refused unless O(delete_emptydir_data), pods without a controller unless
    O(force). A refused pod fails the task before any eviction, naming every such pod.
  - An eviction that a PodDisruptionBudget refuses (HTTP 429) is tried again every O(retry_delay) seconds until
    O(timeout) (measured on a monotonic clock), as kubectl does; then the task fails naming each pod left, the budget
    that selects it with the disruptions it allows, or the API server's reason.
  - Written instead of using M(kubernetes.core.k8s_drain) because, in the kubernetes.core releases this collection
    supports (5.x, 6.x), that module checks C(emptyDir) volumes before ownership, so a DaemonSet pod with an C(emptyDir)
    fails the drain ("cannot delete Pods with local storage") and with C(delete_emptydir_data) is deleted; it stops at
    the first refused eviction without naming the budget; and it has no fleet-wide limit.
  - V(wait) waits until the Node is Ready, advertises exactly O(expected_gpus) of O(resource), and, with
    O(boot_id_before), reports another C(status.nodeInfo.bootID) (it rebooted).
  - V(uncordon) makes the Node schedulable and removes O(annotations) (their keys) in one patch.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
attributes:
  check_mode:
    support: full
    details:
      - The limit is checked and the Node patch sent with C(dryRun=All); the pods that would be evicted or deleted are
        returned and nothing is evicted. Refused pods fail the task as they would for real.
  diff_mode:
    support: none
options:
  name:
    description: The Node.
    type: str
    required: true
  state:
    description:
      - V(cordon) checks the limit and cordons; V(drain) also evicts the pods; V(wait) waits until the Node is back;
        V(uncordon) gives it back to the scheduler.
    type: str
    choices: [cordon, drain, wait, uncordon]
    default: drain
  max_unavailable:
    description:
      - The most fleet Nodes out of service at once, this one included, as a number (1 or more) or a percentage of the
        fleet (C(25%), rounded down, at least 1). Omit it to skip the limit check.
      - The fleet is every Node matching O(fleet_selector) or with O(resource) in its capacity. A Node counts as out
        of service when it is cordoned or its Ready condition is not C(True). This Node counts once, out already or not.
    type: raw
  fleet_selector:
    description: Label selector of the fleet's Nodes, for example C(nvidia.com/gpu.present=true).
    type: str
    default: ""
  resource:
    description: The extended resource of the fleet's Nodes, and the one V(wait) counts.
    type: str
    default: nvidia.com/gpu
  annotations:
    description:
      - Annotations set on the Node with the cordon (V(cordon), V(drain); only when the Node is not cordoned yet), or
        removed (by key) with the uncordon.
    type: dict
    default: {}
  delete_emptydir_data:
    description: Evict pods with C(emptyDir) volumes too (their data is lost), as C(kubectl drain --delete-emptydir-data).
    type: bool
    default: false
  force:
    description: Delete pods without a controller too (they are not recreated), as C(kubectl drain --force).
    type: bool
    default: false
  grace_period:
    description: Seconds each pod is given to terminate; omit it for the pod's own C(terminationGracePeriodSeconds).
    type: int
  timeout:
    description: Seconds the drain (evictions, retries and the pods' termination) or the wait may take.
    type: int
    default: 300
  retry_delay:
    description: Seconds between attempts of an eviction a PodDisruptionBudget refused. More than 0.
    type: float
    default: 5
  expected_gpus:
    description: For V(wait), the count of O(resource) the Node must advertise as allocatable; omit it not to check.
    type: int
  boot_id_before:
    description:
      - For V(wait), the Node's C(status.nodeInfo.bootID) before a reboot; the Node must report another one. Empty
        skips this check.
    type: str
    default: ""
  field_manager:
    description: Field manager name recorded on the Node's managed fields.
    type: str
    default: k8sgpu.nvidia
requirements:
  - kubernetes >= 24.2.0 (Python)
notes:
  - Needs RBAC C(get), C(list) and C(patch) on C(nodes); C(list) on C(pods); C(create) on C(pods/eviction); C(delete)
    on C(pods) (finished pods); C(get) on C(daemonsets); C(list) on C(poddisruptionbudgets).
  - Several hosts of one batch checking the limit at the same time each see the others still in service; run the
    V(cordon) one host at a time (C(throttle) 1, as the node_maintenance role does) so each sees the ones before it.
seealso:
  - module: kubernetes.core.k8s_drain
  - name: Safely drain a node
    description: Kubernetes documentation.
    link: https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/
"""

EXAMPLES = r"""
- name: Take the Node out, at most 10% of the GPU Nodes out of service at once
  k8sgpu.nvidia.k8s_node_maintenance:
    name: gpu-07
    state: cordon
    max_unavailable: 10%
    fleet_selector: nvidia.com/gpu.present=true
  throttle: 1

- name: Drain it as kubectl drain --ignore-daemonsets
  k8sgpu.nvidia.k8s_node_maintenance:
    name: gpu-07
    timeout: 600

- name: Wait until it is Ready with its 8 GPUs and rebooted
  k8sgpu.nvidia.k8s_node_maintenance:
    name: gpu-07
    state: wait
    expected_gpus: 8
    boot_id_before: "{{ boot_id }}"
    timeout: 600

- name: Give it back
  k8sgpu.nvidia.k8s_node_maintenance:
    name: gpu-07
    state: uncordon
    annotations: {example.com/maintenance: null}
"""

RETURN = r"""
node:
  description: The Node's state when the task ended (for V(cordon) and V(drain), as read before the cordon).
  returned: success
  type: dict
  contains:
    unschedulable:
      description: Whether the Node was cordoned.
      type: bool
    ready:
      description: Whether its Ready condition is C(True).
      type: bool
    gpus:
      description: Allocatable count of O(resource).
      type: int
    boot_id:
      description: C(status.nodeInfo.bootID) (empty where the kubelet reports none).
      type: str
    annotations:
      description: The Node's annotations.
      type: dict
  sample: {unschedulable: false, ready: true, gpus: 8, boot_id: 6f1c..., annotations: {}}
fleet:
  description: The limit check (V(cordon), V(drain) with O(max_unavailable)).
  returned: when checked
  type: dict
  contains:
    limit:
      description: Nodes allowed out at once.
      type: int
    fleet:
      description: Nodes in the fleet.
      type: int
    out:
      description: The other fleet Nodes out of service, and why (C(cordoned), C(NotReady)).
      type: dict
  sample: {limit: 1, fleet: 12, out: {}}
evicted:
  description: Pods evicted (or, in check mode, that would be), as C(namespace/name).
  returned: state is drain
  type: list
  elements: str
deleted:
  description: Finished pods deleted (or that would be).
  returned: state is drain
  type: list
  elements: str
left_pods:
  description:
    - Pods the drain leaves on the Node by design, as C(namespace/name (why)) (C(DaemonSet), C(mirror pod)), as
      C(kubectl drain --ignore-daemonsets) leaves them.
    - Named C(skipped) before 1.1.0; renamed because Ansible reads a result's C(skipped) as the task's status (a drain
      that evicted a pod and left a DaemonSet pod was shown as C(skipping:) and passed C(is skipped)).
  returned: state is drain
  type: list
  elements: str
  sample: [kube-system/nvidia-device-plugin-daemonset-x7k2p (DaemonSet)]
  version_added: 1.1.0
waited:
  description: Seconds the drain or the wait took.
  returned: state is drain or wait
  type: float
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import (
    MaintenanceError,
    NodeMaintenance,
    boot_id,
    gpu_count,
    parse_max_unavailable,
    ready_condition,
)


def _state(node: dict, resource: str) -> dict:
    return {
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "ready": ready_condition(node).get("status") == "True",
        "gpus": gpu_count(node, resource),
        "boot_id": boot_id(node),
        "annotations": (node.get("metadata") or {}).get("annotations") or {},
    }


def _run(module, nm: NodeMaintenance) -> dict:
    p = module.params
    result: dict = {"changed": False}
    node = nm.read_node()
    result["node"] = _state(node, p["resource"])
    if p["state"] == "wait":
        result["node"] = nm.wait(p["resource"], p["expected_gpus"], p["timeout"], p["boot_id_before"])
        result["waited"] = result["node"].pop("waited")
        return result
    if p["state"] == "uncordon":
        annotations = result["node"]["annotations"]
        patch: dict = {}
        if result["node"]["unschedulable"]:
            patch["spec"] = {"unschedulable": None}
        gone = {k: None for k in p["annotations"] if k in annotations}
        if gone:
            patch["metadata"] = {"annotations": gone}
        if patch:
            nm.patch_node(patch)
            result["changed"] = True
        return result

    # cordon, drain
    if not result["node"]["unschedulable"]:
        if p["max_unavailable"] is not None:
            fleet = nm.fleet(p["fleet_selector"], p["resource"], p["max_unavailable"])
            result["fleet"] = fleet
            if not fleet["allowed"]:
                out = ", ".join(f"{n} ({why})" for n, why in fleet["out"].items())
                raise MaintenanceError(
                    f"refusing to take Node {p['name']} out of service: {len(fleet['out'])} of the fleet's "
                    f"{fleet['fleet']} Nodes are out already ({out}) and max_unavailable {p['max_unavailable']} allows "
                    f"{fleet['limit']} at once. Bring those Nodes back (kubectl uncordon, or fix the NotReady ones) "
                    "or raise the limit (k8sgpu_max_unavailable).")
        patch = {"spec": {"unschedulable": True}}
        if p["annotations"]:
            patch["metadata"] = {"annotations": {k: None if v is None else str(v) for k, v in p["annotations"].items()}}
        nm.patch_node(patch)
        result["changed"] = True
    if p["state"] == "drain":
        actions = nm.plan(p["delete_emptydir_data"], p["force"])
        report = nm.drain(actions, p["timeout"], p["retry_delay"], p["grace_period"])
        result.update(evicted=sorted(report.evicted), deleted=sorted(report.deleted), left_pods=sorted(report.left),
                      waited=report.waited)
        result["changed"] = result["changed"] or bool(report.evicted or report.deleted)
    return result


def main() -> None:
    argument_spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["cordon", "drain", "wait", "uncordon"], default="drain"),
        max_unavailable=dict(type="raw"),
        fleet_selector=dict(type="str", default=""),
        resource=dict(type="str", default="nvidia.com/gpu"),
        annotations=dict(type="dict", default={}),
        delete_emptydir_data=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        grace_period=dict(type="int"),
        timeout=dict(type="int", default=300),
        retry_delay=dict(type="float", default=5),
        expected_gpus=dict(type="int"),
        boot_id_before=dict(type="str", default=""),
        field_manager=dict(type="str", default="k8sgpu.nvidia"),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    p = module.params
    if p["timeout"] < 1:
        module.fail_json(msg=f"timeout must be 1 second or more, not {p['timeout']}")
    if p["retry_delay"] <= 0:
        module.fail_json(msg=f"retry_delay must be more than 0 seconds, not {p['retry_delay']}")
    if p["expected_gpus"] is not None and p["expected_gpus"] < 0:
        module.fail_json(msg=f"expected_gpus must be 0 or more, not {p['expected_gpus']}")
    if p["grace_period"] is not None and p["grace_period"] < 0:
        module.fail_json(msg=f"grace_period must be 0 or more, not {p['grace_period']}")
    if p["max_unavailable"] is not None:
        try:
            parse_max_unavailable(p["max_unavailable"])
        except MaintenanceError as exc:
            module.fail_json(msg=str(exc))

    nm = NodeMaintenance(dynamic_client(module), p["name"], check_mode=module.check_mode,
                         field_manager=p["field_manager"])
    try:
        module.exit_json(**_run(module, nm))
    except MaintenanceError as exc:
        module.fail_json(msg=f"Node {p['name']}: {exc}")
    except Exception as exc:  # the dynamic client raises its own exception classes
        module.fail_json(msg=f"Node {p['name']}: {p['state']} failed: {api_error_message(exc)}")


if __name__ == "__main__":
    main()
