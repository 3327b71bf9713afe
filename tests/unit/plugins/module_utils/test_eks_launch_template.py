"""_eks_nodegroup: eks_nodegroup's launch_template option (issue 34 item 7: the launch template whose user data isolates GPUs)
- CreateNodegroup's launchTemplate, what EKS refuses with it, and what can change in place (the version, through
UpdateNodegroupVersion) and what cannot (another template, adding or removing one). The requests themselves go to
moto's HTTP server in tests/cloud/test_eks_nodegroup.py."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_nodegroup as eks


@pytest.mark.parametrize("opt,want", [
    (None, None), ({}, None),
    ({"id": "lt-0abc", "name": None, "version": "3"}, {"id": "lt-0abc", "version": "3"}),
    ({"name": "train-gpu", "version": 2}, {"name": "train-gpu", "version": "2"}),
    ({"name": "train-gpu", "version": None}, {"name": "train-gpu"}),
])
def test_launch_template_request(opt, want):
    assert eks.launch_template(opt) == want


@pytest.mark.parametrize("opt,disk,words", [
    ({"id": "lt-0abc", "name": "x"}, None, "give its id or its name (one of them)"),
    ({"version": "1"}, None, "give its id or its name"),
    ({"name": "x", "version": "$Latest"}, None, "version '$Latest' is not a launch template version number"),
    ({"name": "x", "version": "0"}, None, "is not a launch template version number"),
    ({"name": "x", "version": "1"}, 100, "disk_size cannot be given with launch_template"),
])
def test_launch_template_refusals(opt, disk, words):
    with pytest.raises(eks.PlanError) as exc:
        eks.launch_template(opt, disk)
    assert words in str(exc.value)


LIVE = {"launchTemplate": {"name": "train-gpu", "version": "1", "id": "lt-0abc"}}


def test_same_template_and_version_sends_nothing():
    assert eks.launch_template_plan(LIVE, {"name": "train-gpu", "version": "1"}) == ([], {})
    assert eks.launch_template_plan(LIVE, {"id": "lt-0abc", "version": "1"}) == ([], {})
    assert eks.launch_template_plan(LIVE, {"name": "train-gpu"}) == ([], {})  # no version: not compared
    assert eks.launch_template_plan({}, None) == ([], {})  # option unset: not compared


def test_a_new_version_is_an_update_nodegroup_version():
    assert eks.launch_template_plan(LIVE, {"name": "train-gpu", "version": "2"}) == (
        [], {"name": "train-gpu", "version": "2"})
    assert eks.launch_template_plan(LIVE, {"id": "lt-0abc", "version": "2"}) == ([], {"id": "lt-0abc", "version": "2"})


def test_another_template_or_none_before_cannot_change_in_place():
    changes, upd = eks.launch_template_plan(LIVE, {"name": "other", "version": "1"})
    assert upd == {} and changes == [("launch_template", "launchTemplate",
                                      {"name": "train-gpu", "version": "1", "id": "lt-0abc"},
                                      {"name": "other", "version": "1"})]
    changes, _plan = eks.launch_template_plan({"launchTemplate": None}, {"name": "train-gpu", "version": "1"})
    assert changes == [("launch_template", "launchTemplate", None, {"name": "train-gpu", "version": "1"})]
    msg = eks.immutable_message("train", "gpu", changes)
    assert "launch_template (EKS field launchTemplate) is None" in msg and "delete the nodegroup" in msg
