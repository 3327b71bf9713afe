"""module_utils/_k8s_rollout.py: rollout and per-Node diagnosis (module k8s_rollout_wait)."""
from __future__ import annotations

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _k8s_rollout as m

LABEL = "nvidia.com/gpu.present"
DS = {"metadata": {"generation": 2}, "spec": {"template": {"spec": {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["true"]}]}]}}},
}}}}


def node(name, labels=None, gpus=None, ready="True", taints=None):
    status = {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown"}]}
    if gpus is not None:
        status["capacity"] = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": {LABEL: "true"} if labels is None else labels},
            "spec": {"taints": taints or []}, "status": status}


def pod(name, node_name, ready=True, waiting=None):
    cs = {"name": "exporter", "state": {"waiting": waiting} if waiting else {"running": {}}}
    return {"metadata": {"name": name}, "spec": {"nodeName": node_name},
            "status": {"phase": "Running", "containerStatuses": [cs],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_rolled_out_needs_the_latest_generation_and_every_pod_available():
    status = {"observedGeneration": 2, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2}
    assert m.daemonset_rolled_out({**DS, "status": status})
    assert not m.daemonset_rolled_out({**DS, "status": {**status, "observedGeneration": 1}})
    assert not m.daemonset_rolled_out({**DS, "status": {**status, "numberAvailable": 1}})
    assert not m.daemonset_rolled_out(None)


def test_problems_name_each_gpu_node_and_why():
    nodes = [
        node("ok"),
        node("tainted", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        node("down", ready="Unknown"),
        node("crashing"),
        node("cpu", labels={}),
        node("gpu-unlabelled", labels={}, gpus=8),
        node("in-group-unlabelled", labels={}),
    ]
    crash = {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}
    pods = [pod("e-ok", "ok"), pod("e-crash", "crashing", ready=False, waiting=crash)]
    problems = m.daemonset_node_problems(nodes, DS, pods, ["in-group-unlabelled", "ghost"], "dcgm-exporter pod")
    assert problems == {
        "tainted": "no dcgm-exporter pod on this node: untolerated taint(s) dedicated=infra:NoSchedule",
        "down": "Node is not Ready (NodeStatusUnknown)",
        "crashing": "dcgm-exporter pod e-crash is waiting: CrashLoopBackOff: back-off 5m0s",
        "in-group-unlabelled": "no dcgm-exporter pod on this node: the node does not match nvidia.com/gpu.present In "
                               "true (DaemonSet node affinity)",
        "ghost": "no Node named ghost",
    }
    # A Node with GPUs that is neither labelled nor in the group is not a failure, but is named apart.
    assert m.gpu_nodes_outside(nodes, DS, ["in-group-unlabelled"]) == ["gpu-unlabelled"]


def test_terminating_pods_do_not_count():
    gone = pod("e-old", "ok")
    gone["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    assert m.daemonset_node_problems([node("ok")], DS, [gone], what="x pod") == {"ok": "no x pod on this node yet"}


def test_a_node_an_autoscaler_is_removing_is_no_rollout_problem():
    assert m.node_going_away({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}})
    assert m.node_going_away({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}})
    assert m.node_going_away({"metadata": {"deletionTimestamp": "2026-11-25T00:00:00Z"}})
    assert not m.node_going_away({"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})
    assert not m.node_going_away({"spec": {"unschedulable": True}})
