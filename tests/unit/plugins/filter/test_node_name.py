from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.node_name import node_name
from ansible_collections.k8sgpu.nvidia.plugins.filter.node_names import node_names

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


# ---------------------------------------------------------------- issue 34 item 8: malformed or shared Node names

@pytest.mark.parametrize("hv,source", [
    ({"ansible_facts": {"nodename": "gpu_01"}}, "uname -n"),                     # '_' (a Windows-style hostname)
    ({"ansible_facts": {"nodename": "-gpu"}}, "uname -n"),
    ({"ansible_facts": {"nodename": "gpu..example"}}, "uname -n"),
    ({"ansible_facts": {"nodename": "a" * 254}}, "uname -n"),
    ({"ansible_facts": {"nodename": "gpu-1\nkind: ClusterRoleBinding"}}, "uname -n"),
    ({"ansible_facts": {"nodename": "gpu-1/../../namespaces/kube-system"}}, "uname -n"),
    ({"k8sgpu_node_name": "Node-B"}, "k8sgpu_node_name"),                        # no Node has upper case
    ({"k8sgpu_node_name": "node b"}, "k8sgpu_node_name"),
])
def test_a_malformed_node_name_is_refused_naming_the_host_and_the_fix(hv, source):
    with pytest.raises(AnsibleFilterError) as err:
        node_name("gpu-x", {"gpu-x": hv})
    msg = str(err.value)
    assert "Host gpu-x maps to the Kubernetes Node name" in msg and "DNS-1123 subdomain" in msg, msg
    assert source in msg and "Set k8sgpu_node_name for gpu-x" in msg and "Nothing was changed" in msg


@pytest.mark.parametrize("name", ["a", "gpu-01", "gpu-01.example.net", "10.0.0.7", "a" * 253])
def test_valid_names_pass(name):
    assert node_name("h", {"h": {"ansible_facts": {"nodename": name}}}) == name


def test_node_names_maps_each_host():
    assert node_names(["gpu-01.example.net", "GPU-02", "alias"], HOSTVARS) == {
        "gpu-01.example.net": "gpu-01.example.net", "GPU-02": "gpu-02.site.example", "alias": "node-c"}


@pytest.mark.parametrize("second,how", [
    # A GPU host whose hostname is another host's Node (upper case: the kubelet lowercases it).
    ({"ansible_facts": {"nodename": "GPU-01.example.net"}}, "gpu-b: uname -n"),
    ({"k8sgpu_node_name": "gpu-01.example.net"}, "gpu-b: host variable k8sgpu_node_name"),
])
def test_two_hosts_on_one_node_are_refused_naming_both(second, how):
    hostvars = {"gpu-a": {"ansible_facts": {"nodename": "gpu-01.example.net"}}, "gpu-b": second,
                "gpu-c": {"ansible_facts": {"nodename": "gpu-03"}}}
    with pytest.raises(AnsibleFilterError) as err:
        node_names(["gpu-a", "gpu-c", "gpu-b"], hostvars)
    msg = str(err.value)
    assert "Hosts gpu-a and gpu-b map to one Kubernetes Node, gpu-01.example.net" in msg, msg
    assert "gpu-a: uname -n" in msg and how in msg and "set k8sgpu_node_name" in msg and "Nothing was changed" in msg


def test_a_host_listed_twice_is_not_a_duplicate():
    assert node_names(["alias", "alias"], HOSTVARS) == {"alias": "node-c"}


def test_node_names_unknown_hosts():
    with pytest.raises(AnsibleFilterError, match="No Kubernetes Node name for host unreachable.example.net"):
        node_names(["alias", "unreachable.example.net"], HOSTVARS)
    assert node_names(["alias", "unreachable.example.net"], HOSTVARS, unknown="omit") == {"alias": "node-c"}
    # omit leaves out a host without a name, never a malformed one
    with pytest.raises(AnsibleFilterError, match="DNS-1123"):
        node_names(["bad"], {"bad": {"k8sgpu_node_name": "Bad"}}, unknown="omit")


@pytest.mark.parametrize("hosts", ["gpu-a", {"gpu-a": 1}, None])
def test_node_names_expects_a_list(hosts):
    with pytest.raises(AnsibleFilterError, match="expects a list of inventory hosts"):
        node_names(hosts, HOSTVARS)
