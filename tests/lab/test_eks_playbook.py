"""playbooks/eks.yml end to end against moto (the AWS half) and the lab's API server (the Kubernetes half), and the
fake cluster autoscaler (tests/lab/scale_from_zero.py) that gives the lab a GPU node pool scaling from zero.

The fake autoscaler's own tests come first: everything else here relies on it adding a node only for the pods a
pool of that shape would take, only after the scheduler found them unschedulable, and removing it again.
"""
from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from scale_from_zero import FakeAutoscaler

TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def namespace(core):
    name = f"k8sgpu-eks-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def gpu_pod(name: str, selector: dict | None, tolerate: bool = True, gpus: int = 1) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "registry.invalid/none:1",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if selector:
        spec["nodeSelector"] = selector
    if tolerate:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"name": name}, "spec": spec}


def pod_state(core, ns: str, name: str) -> tuple[str, str | None]:
    p = core.read_namespaced_pod(name, ns)
    return p.status.phase, p.spec.node_name


def wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.3)
    return bool(pred())


def test_fake_autoscaler_adds_a_node_only_for_a_matching_pending_pod_and_scales_back_to_zero(core, namespace):
    selector = {"role": "train-gpu", "k8sgpu-test/pool": namespace}
    prefix = f"k8sgpu-sfz-{namespace[-6:]}"
    with FakeAutoscaler(core, node_prefix=prefix, labels=selector, taints=[TAINT], gpus=1, delay=1.0,
                        namespaces=[namespace], max_nodes=2, scale_down_after=2.0) as pool:
        # Not tolerating the pool's taint, or not selecting the pool: no node, ever.
        core.create_namespaced_pod(namespace, gpu_pod("intolerant", selector, tolerate=False))
        core.create_namespaced_pod(namespace, gpu_pod("unselective", {"k8sgpu-test/other-pool": namespace}))
        core.create_namespaced_pod(namespace, gpu_pod("too-big", selector, gpus=2))
        assert wait(lambda: all(core.read_namespaced_pod(n, namespace).status.conditions
                                for n in ("intolerant", "unselective", "too-big")), 30)
        time.sleep(3)
        assert pool.nodes == [] and pool.scale_ups == []

        core.create_namespaced_pod(namespace, gpu_pod("train", selector))
        assert pool.wait_for(lambda s: s.scale_ups and s.scale_ups[0].pod_running, 60), pool.errors
        ev = pool.scale_ups[0]
        assert ev.pod == f"{namespace}/train" and "didn't match Pod's node affinity/selector" in ev.reason, ev
        assert ev.pending_to_node_s >= 1.0                     # the node came after the pod was pending + delay
        assert ev.pod_node == ev.node == pool.nodes[0] and ev.node.startswith(prefix)
        node = core.read_node(ev.node)
        assert node.metadata.labels["role"] == "train-gpu" and node.status.allocatable["nvidia.com/gpu"] == "1"
        assert [(t.key, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
        assert pod_state(core, namespace, "train") == ("Running", ev.node)
        # The others still have no node: one node, filled by the first pod; the rest never matched.
        for n in ("intolerant", "unselective", "too-big"):
            assert pod_state(core, namespace, n) == ("Pending", None)
        assert len(pool.nodes) == 1

        core.delete_namespaced_pod("train", namespace, grace_period_seconds=0)
        assert pool.wait_scaled_to_zero(60), (pool.removed, pool.errors)
        assert list(pool.removed) == pool.nodes
    with pytest.raises(client.ApiException) as gone:
        core.read_node(pool.nodes[0])
    assert gone.value.status == 404


def test_fake_autoscaler_deletes_its_nodes_on_exit(core, namespace):
    selector = {"k8sgpu-test/pool": namespace}
    with FakeAutoscaler(core, node_prefix=f"k8sgpu-sfz-{namespace[-6:]}", labels=selector, gpus=2,
                        namespaces=[namespace]) as pool:
        core.create_namespaced_pod(namespace, gpu_pod("a", selector, gpus=2))
        assert pool.wait_for(lambda s: s.scale_ups and s.scale_ups[0].pod_running, 60), pool.errors
        assert pool.removed == {}
    assert pool.nodes and set(pool.removed) == set(pool.nodes)
    assert not [n for n in core.list_node().items if n.metadata.name in pool.nodes]
