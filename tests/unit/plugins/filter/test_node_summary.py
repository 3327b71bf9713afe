"""module k8s_cluster_nodes' summaries and summary_lines (module_utils/_node_summary.py) on Node objects shaped as the API server returns them."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._node_summary import (
    NodeSummaryError,
    node_summary,
    node_summary_line,
)

CP = {
    "metadata": {"name": "cp-1", "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/os": "linux"}},
    "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
    "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
               "capacity": {"cpu": "4"}},
}
GPU = {
    "metadata": {"name": "gpu-1"},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    "status": {"conditions": [{"type": "Ready", "status": "False"}],
               "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "6"}},
}


def test_control_plane_node():
    assert node_summary(CP) == {"name": "cp-1", "ready": True, "gpus": 0, "gpus_allocatable": 0,
                                "roles": ["control-plane"], "taints": ["node-role.kubernetes.io/control-plane:NoSchedule"]}


def test_gpu_node_not_ready_with_allocatable_below_capacity():
    s = node_summary(GPU)
    assert (s["ready"], s["gpus"], s["gpus_allocatable"], s["roles"]) == (False, 8, 6, [])
    assert s["taints"] == ["nvidia.com/gpu=present:NoSchedule"]


def test_node_without_status_is_unknown_not_ready():
    assert node_summary({"metadata": {"name": "new"}})["ready"] is False


def test_line():
    line = node_summary_line(node_summary(GPU))
    assert line.split() == ["gpu-1", "NotReady", "gpus=8", "roles=-", "taints=nvidia.com/gpu=present:NoSchedule"]


@pytest.mark.parametrize("bad", [None, {}, {"metadata": {}}, "gpu-1"])
def test_not_a_node(bad):
    with pytest.raises(NodeSummaryError, match="node_summary expects a Node object"):
        node_summary(bad)
