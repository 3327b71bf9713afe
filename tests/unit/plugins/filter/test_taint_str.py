"""taint_str: a taint as kubectl writes it (the filter taint_to_string, which no role used, is removed: issue 48)."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import taint_str


@pytest.mark.parametrize(
    ("taint", "expected"),
    [
        ({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
         "node-role.kubernetes.io/control-plane:NoSchedule"),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, "nvidia.com/gpu=present:NoSchedule"),
        ({"key": "dedicated", "value": "", "effect": "NoExecute"}, "dedicated:NoExecute"),
    ],
)
def test_taint_str(taint, expected):
    assert taint_str(taint) == expected
