"""node_of_host: the Node from kubernetes.core.k8s_info's result, or the error that names the host, the Node and the fix
(node_maintenance and gpu_health refuse a host without a Node through it)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._node_of_host import node_of_host

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "annotations": {"a": "b"}},
        "spec": {"unschedulable": True}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def test_the_node_read():
    read = {"changed": False, "api_found": True, "resources": [NODE], "failed": False}
    assert node_of_host(read, "gpu-1.example.net", "gpu-1") == NODE


@pytest.mark.parametrize("resources", [[], [NODE, NODE]])
def test_no_node_names_the_host_the_node_and_the_fix(resources):
    with pytest.raises(AnsibleFilterError) as err:
        node_of_host({"resources": resources}, "gpu-1.example.net", "gpu-1")
    assert str(err.value) == ("gpu-1.example.net: no Node gpu-1 in the cluster (kubectl get nodes). Set "
                              "k8sgpu_node_name for the host to its Node's name, or leave the host out of the run.")


@pytest.mark.parametrize("read", [None, "text", {}, {"resources": "gpu-1"}, {"skipped": True}])
def test_not_a_k8s_info_result(read):
    with pytest.raises(AnsibleFilterError, match=r"node_of_host expects the result of kubernetes.core.k8s_info for "
                                                 r"gpu-1.example.net's Node"):
        node_of_host(read, "gpu-1.example.net", "gpu-1")
