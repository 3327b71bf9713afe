from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.node_name import node_name

HOSTVARS = {
    # The kubelet registers uname -n, trimmed and lowercased (nodeutil.GetHostname), not the short hostname.
    "gpu-01.example.net": {"ansible_facts": {"hostname": "gpu-01", "nodename": "gpu-01.example.net"}},
    "GPU-02": {"ansible_facts": {"hostname": "GPU-02", "nodename": " GPU-02.Site.Example \n"}},
    "gpu-03.example.net": {"k8sgpu_node_name": "node-b", "ansible_facts": {"nodename": "gpu-03"}},
    "alias": {"k8sgpu_node_name": "node-c"},  # the override needs no facts
    "unreachable.example.net": {"ansible_host": "10.0.0.9"},
    "only-short-hostname": {"ansible_facts": {"hostname": "short"}},
}


@pytest.mark.parametrize("host,expected", [
    ("gpu-01.example.net", "gpu-01.example.net"),
    ("GPU-02", "gpu-02.site.example"),
    ("gpu-03.example.net", "node-b"),
    ("alias", "node-c"),
])
def test_node_name(host, expected):
    assert node_name(host, HOSTVARS) == expected


@pytest.mark.parametrize("host", ["unreachable.example.net", "only-short-hostname"])
def test_no_nodename_fails_naming_the_host_and_the_fix(host):
    # Never the inventory name: it is a guess (an FQDN, an alias) the kubelet did not register.
    with pytest.raises(AnsibleFilterError) as err:
        node_name(host, HOSTVARS)
    assert host in str(err.value) and "k8sgpu_node_name" in str(err.value) and "nodename" in str(err.value)


def test_unknown_host():
    with pytest.raises(AnsibleFilterError, match="not in the inventory"):
        node_name("nope", HOSTVARS)
