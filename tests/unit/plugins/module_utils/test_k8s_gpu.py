from __future__ import annotations

import time

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _k8s_gpu
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_gpu import diagnose

R = "nvidia.com/gpu"
DS = {"spec": {"template": {"spec": {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}},
}}}}


def node(gpus=None, ready="True", labels=None, taints=None):
    status = {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady" if ready != "True" else "KubeletReady",
                              "message": "container runtime is down" if ready != "True" else ""}]}
    if gpus is not None:
        status["allocatable"] = {R: str(gpus)}
    return {"metadata": {"name": "gpu-1", "labels": labels if labels is not None else {"nvidia.com/gpu.present": "true"}},
            "spec": {"taints": taints or []}, "status": status}


def pod(ready=True, waiting=None):
    cs = {"name": "c", "state": {"waiting": waiting} if waiting else {"running": {}}}
    return {"metadata": {"name": "nvdp-abc"}, "status": {
        "phase": "Running" if ready else "Pending", "containerStatuses": [cs],
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_ready_node_with_gpus():
    assert diagnose("gpu-1", node(8), R, [pod()], DS) == ""


def test_missing_node():
    assert diagnose("gpu-9", None, R) == "no Node named gpu-9"


def test_not_ready_node():
    assert diagnose("gpu-1", node(ready="False"), R, [], DS) == "Node is not Ready (KubeletNotReady: container runtime is down)"


def test_label_missing_for_affinity():
    msg = diagnose("gpu-1", node(labels={}), R, [], DS)
    assert "no device plugin pod on this node" in msg and "nvidia.com/gpu.present In true" in msg


def test_untolerated_taint():
    msg = diagnose("gpu-1", node(taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"},
                                         {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), R, [], DS)
    assert msg == "no device plugin pod on this node: untolerated taint(s) dedicated=x:NoSchedule"


def test_image_pull_backoff():
    msg = diagnose("gpu-1", node(), R, [pod(False, {"reason": "ImagePullBackOff", "message": "Back-off pulling image"})], DS)
    assert msg == "device plugin pod nvdp-abc is waiting: ImagePullBackOff: Back-off pulling image"


def test_plugin_ready_but_no_gpus():
    assert "the plugin found no GPU" in diagnose("gpu-1", node(0), R, [pod()], DS)


def _gpu_node(name, gpus):
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def test_wait_allocatable_uses_the_first_list_given_then_reads_until_every_node_has_gpus():
    reads = [[_gpu_node("a", 8), _gpu_node("b", 8)]]
    first = [_gpu_node("a", 8), _gpu_node("b", 0)]
    counts, by_name, waited = _k8s_gpu.wait_allocatable(lambda: reads.pop(0), ["a", "b"], "nvidia.com/gpu", 30, 0,
                                                        time.monotonic(), nodes=first)
    assert counts == {"a": 8, "b": 8} and set(by_name) == {"a", "b"} and not reads
    assert 0.9 <= waited < 30


def test_wait_allocatable_stops_at_the_timeout_with_a_missing_node_at_zero():
    calls = []

    def list_nodes():
        calls.append(1)
        return [_gpu_node("a", 0)]

    counts, by_name, waited = _k8s_gpu.wait_allocatable(list_nodes, ["a", "gone"], "nvidia.com/gpu", 0, 0,
                                                        time.monotonic())
    assert counts == {"a": 0, "gone": 0} and "gone" not in by_name and len(calls) == 1 and waited >= 0
