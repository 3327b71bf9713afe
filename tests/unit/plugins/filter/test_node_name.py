from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.node_name import node_name

HOSTVARS = {
    "gpu-01.example.net": {"ansible_facts": {"hostname": "gpu-01"}},
    "gpu-02.example.net": {"k8sgpu_node_name": "node-b", "ansible_facts": {"hostname": "gpu-02"}},
    "gpu-03.example.net": {},
}


@pytest.mark.parametrize("host,expected", [
    ("gpu-01.example.net", "gpu-01"), ("gpu-02.example.net", "node-b"), ("gpu-03.example.net", "gpu-03.example.net"),
])
def test_node_name(host, expected):
    assert node_name(host, HOSTVARS) == expected


def test_unknown_host():
    with pytest.raises(AnsibleFilterError, match="not in the inventory"):
        node_name("nope", HOSTVARS)
