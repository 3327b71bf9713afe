from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._node_labels_by_node import GFD_KEYS, node_labels_by_node

H100 = {"nodename": "gpu-01",
        "nvidia_gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "compute_capability": "9.0"}],
        "nvidia_driver_version": "580.159.04"}
HOSTVARS = {
    "gpu-01.example.net": {"ansible_facts": H100, "k8sgpu_node_labels": {"team": "a", "role": None}},
    "gpu-02": {"k8sgpu_node_name": "node-b"},  # no facts: no GFD labels
}
HOSTS = list(HOSTVARS)


def test_present_labels_per_node():
    out = node_labels_by_node(HOSTS, HOSTVARS, labels={"role": "train-gpu", "zone": "z1"}, remove=["legacy"])
    assert out["node-b"] == {"gpu": "true", "nvidia.com/gpu.present": "true", "role": "train-gpu", "zone": "z1",
                             "legacy": None}
    one = out["gpu-01"]
    assert one["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and one["nvidia.com/cuda.driver-version.major"] == "580"
    # The host's own labels win over the common ones; None removes.
    assert one["team"] == "a" and one["role"] is None and one["legacy"] is None and one["zone"] == "z1"


def test_without_gpu_labels_and_facts():
    out = node_labels_by_node(HOSTS, HOSTVARS, labels={"role": "x"}, gpu=False, from_facts=False)
    assert out == {"gpu-01": {"role": None, "team": "a"}, "node-b": {"role": "x"}}


def test_absent_removes_exactly_what_present_sets():
    labels = {"role": "train-gpu", "gone": None}
    present = node_labels_by_node(HOSTS, HOSTVARS, labels=labels, remove=["legacy"])
    absent = node_labels_by_node(HOSTS, HOSTVARS, labels=labels, remove=["legacy"], state="absent")
    for node, wanted in present.items():
        assert all(value is None for value in absent[node].values())
        set_keys = {key for key, value in wanted.items() if value is not None}
        # Every label present sets, and every GFD name (an earlier run may have set them from facts), nothing else:
        # not the keys present removes ("legacy", "gone", the host's "role": None).
        assert set(absent[node]) == set_keys | set(GFD_KEYS)
    assert "legacy" not in absent["node-b"] and "gone" not in absent["node-b"] and "role" not in absent["gpu-01"]


def test_absent_without_facts_leaves_gfd_names_alone():
    absent = node_labels_by_node(["gpu-02"], HOSTVARS, from_facts=False, state="absent")
    assert absent == {"node-b": {"gpu": None, "nvidia.com/gpu.present": None}}


def test_every_gfd_name_is_known():
    facts = {**H100, "nvidia_driver_version": "580.159.04", "nvidia_cuda_driver_version": "13.0"}
    out = node_labels_by_node(["h"], {"h": {"ansible_facts": {**facts, "nodename": "h"}}}, gpu=False)
    assert set(out["h"]) == set(GFD_KEYS)


@pytest.mark.parametrize("kwargs, message", [
    ({"labels": ["role"]}, "labels must be a dict"),
    ({"remove": "role"}, "remove must be a list"),
    ({"state": "gone"}, "state must be present or absent"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        node_labels_by_node(HOSTS, HOSTVARS, **kwargs)


def test_bad_host_labels_name_the_host():
    with pytest.raises(AnsibleFilterError, match="k8sgpu_node_labels of h"):
        node_labels_by_node(["h"], {"h": {"k8sgpu_node_name": "h", "k8sgpu_node_labels": "role=x"}})


def test_a_host_without_a_node_name_is_named():
    with pytest.raises(AnsibleFilterError, match="No Kubernetes Node name for host lost"):
        node_labels_by_node(["lost"], {"lost": {}})
    with pytest.raises(AnsibleFilterError, match="list of inventory hosts"):
        node_labels_by_node("gpu-02", HOSTVARS)
