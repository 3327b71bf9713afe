from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.taint_to_string import taint_to_string


@pytest.mark.parametrize(
    ("taint", "expected"),
    [
        ({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
         "node-role.kubernetes.io/control-plane:NoSchedule"),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, "nvidia.com/gpu=present:NoSchedule"),
        ({"key": "dedicated", "value": "", "effect": "NoExecute"}, "dedicated:NoExecute"),
    ],
)
def test_taint_to_string(taint, expected):
    assert taint_to_string(taint) == expected


@pytest.mark.parametrize("bad", [{"key": "x"}, {"effect": "NoSchedule"}, "x:NoSchedule", None])
def test_taint_to_string_rejects_non_taints(bad):
    with pytest.raises(AnsibleFilterError, match="expects a taint"):
        taint_to_string(bad)
