"""_eks_nodegroup: the planning of eks_nodegroup - which labels, taints, sizes and tags to send, which fields cannot change,
and the cluster-autoscaler node-template tags of the Auto Scaling groups. The requests themselves are sent to
moto's HTTP server in tests/cloud/test_eks_nodegroup.py."""
from __future__ import annotations

import botocore.session
import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_nodegroup as eks

MODEL = botocore.session.get_session().get_service_model("eks")
EFFECTS = MODEL.shape_for("TaintEffect").enum
AMI_TYPES = MODEL.shape_for("AMITypes").enum
P = eks.TEMPLATE_PREFIX


def test_botocore_model_has_the_gpu_ami_types():
    for t in ("AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA",
              "BOTTLEROCKET_ARM_64_NVIDIA"):
        eks.check_enum("ami_type", t, AMI_TYPES, "AMITypes")


def test_check_enum_names_option_shape_and_choices():
    with pytest.raises(eks.PlanError) as e:
        eks.check_enum("ami_type", "AL2023_NVIDIA", AMI_TYPES, "AMITypes")
    assert "ami_type='AL2023_NVIDIA'" in str(e.value)
    assert "AMITypes" in str(e.value) and "AL2023_x86_64_NVIDIA" in str(e.value)
    eks.check_enum("ami_type", None, AMI_TYPES, "AMITypes")  # unset: not checked


@pytest.mark.parametrize("given,sent", [("NoSchedule", "NO_SCHEDULE"), ("NO_EXECUTE", "NO_EXECUTE"),
                                        ("PreferNoSchedule", "PREFER_NO_SCHEDULE")])
def test_effects_in_either_spelling(given, sent):
    assert eks.eks_effect(given, EFFECTS) == sent


def test_unknown_effect_refused_with_both_spellings():
    with pytest.raises(eks.PlanError, match="NO_SCHEDULE.*NoSchedule"):
        eks.eks_effect("NoScheduled", EFFECTS)


def test_normalize_taints_drops_empty_value_and_refuses_duplicates():
    got = eks.normalize_taints([{"key": "b", "value": "", "effect": "NoSchedule"},
                                {"key": "a", "value": "x", "effect": "NO_EXECUTE"}], EFFECTS)
    assert got == [{"key": "a", "value": "x", "effect": "NO_EXECUTE"}, {"key": "b", "effect": "NO_SCHEDULE"}]
    with pytest.raises(eks.PlanError, match="twice"):
        eks.normalize_taints([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NO_SCHEDULE"}], EFFECTS)


def test_label_update_sends_only_differences():
    live = {"keep": "1", "change": "old", "drop": "x"}
    want = {"keep": "1", "change": "new", "add": "y"}
    assert eks.label_update(live, want) == {"addOrUpdateLabels": {"add": "y", "change": "new"},
                                            "removeLabels": ["drop"]}
    assert eks.label_update(want, want) == {}


def test_taint_update_keys_by_key_and_effect():
    live = [{"key": "gpu", "value": "a", "effect": "NO_SCHEDULE"}, {"key": "old", "effect": "NO_EXECUTE"}]
    want = [{"key": "gpu", "value": "b", "effect": "NO_SCHEDULE"}, {"key": "gpu", "effect": "NO_EXECUTE"}]
    upd = eks.taint_update(live, want)
    assert upd["addOrUpdateTaints"] == [{"key": "gpu", "effect": "NO_EXECUTE"},
                                        {"key": "gpu", "value": "b", "effect": "NO_SCHEDULE"}]
    assert upd["removeTaints"] == [{"key": "old", "effect": "NO_EXECUTE"}]
    assert eks.taint_update(want, want) == {}


def test_live_taints_match_normalized_ones():
    ng = {"taints": [{"key": "k", "value": "", "effect": "NO_SCHEDULE"}]}
    assert eks.taint_update(eks.live_taints(ng), eks.normalize_taints([{"key": "k", "effect": "NoSchedule"}],
                                                                      EFFECTS)) == {}


def test_scaling_from_zero_allowed_and_bad_sizes_refused():
    assert eks.scaling_config({"min_size": 0, "max_size": 3, "desired_size": 0}) == {
        "minSize": 0, "maxSize": 3, "desiredSize": 0}
    for bad, msg in (({"max_size": 0}, "max_size"), ({"min_size": 3, "max_size": 2}, "more than"),
                     ({"min_size": 0, "max_size": 2, "desired_size": 5}, "outside"), ({"min_size": -1}, "0 or more")):
        with pytest.raises(eks.PlanError, match=msg):
            eks.scaling_config(bad)


def test_scaling_update_leaves_autoscaler_desired_size_inside_bounds():
    live = {"minSize": 0, "maxSize": 4, "desiredSize": 3}
    assert eks.scaling_update(live, {"minSize": 0, "maxSize": 4}) == {}
    assert eks.scaling_update(live, {"maxSize": 2}) == {"minSize": 0, "maxSize": 2, "desiredSize": 2}
    assert eks.scaling_update(live, {"minSize": 1}) == {"minSize": 1, "maxSize": 4, "desiredSize": 3}


def test_update_config():
    assert eks.update_config({"max_unavailable": None, "max_unavailable_percentage": 20}) == {
        "maxUnavailablePercentage": 20}
    assert eks.update_config_update({"maxUnavailable": 1}, {"maxUnavailablePercentage": 20}) == {
        "maxUnavailablePercentage": 20}
    assert eks.update_config_update({"maxUnavailable": 1}, {"maxUnavailable": 1}) == {}
    assert eks.update_config_update({"maxUnavailable": 1}, {}) == {}


def test_immutable_changes_named_with_old_and_new():
    live = {"amiType": "AL2_x86_64", "instanceTypes": ["g4dn.xlarge", "g5.xlarge"], "subnets": ["a", "b"],
            "diskSize": 20, "capacityType": "ON_DEMAND", "nodeRole": "arn:r"}
    same = {"ami_type": "AL2_x86_64", "instance_types": ["g5.xlarge", "g4dn.xlarge"], "subnets": ["b", "a"],
            "disk_size": 20, "capacity_type": None, "node_role": "arn:r"}
    assert eks.immutable_changes(live, same) == []
    changes = eks.immutable_changes(live, {**same, "ami_type": "AL2023_x86_64_NVIDIA", "capacity_type": "SPOT"})
    assert changes == [("ami_type", "amiType", "AL2_x86_64", "AL2023_x86_64_NVIDIA"),
                       ("capacity_type", "capacityType", "ON_DEMAND", "SPOT")]
    msg = eks.immutable_message("c", "ng", changes)
    assert "ami_type (EKS field amiType) is 'AL2_x86_64', the task asks for 'AL2023_x86_64_NVIDIA'" in msg


def test_desired_labels_adds_accelerator():
    assert eks.desired_labels(None, None) is None
    assert eks.desired_labels({"role": "train-gpu"}, "nvidia-tesla-t4") == {
        "role": "train-gpu", eks.ACCELERATOR_LABEL: "nvidia-tesla-t4"}
    with pytest.raises(eks.PlanError, match="accelerator"):
        eks.desired_labels({eks.ACCELERATOR_LABEL: "a"}, "b")


def test_template_tags():
    tags = eks.template_tags({"role": "train-gpu"},
                             [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
                              {"key": "dedicated", "effect": "PREFER_NO_SCHEDULE"}], 4)
    assert tags == {P + "label/role": "train-gpu", P + "taint/nvidia.com/gpu": "present:NoSchedule",
                    P + "taint/dedicated": ":PreferNoSchedule", P + "resources/nvidia.com/gpu": "4"}
    assert P + "resources/nvidia.com/gpu" not in eks.template_tags({}, [], 0)


def test_marker_round_trip_and_split_at_256():
    keys = [f"{P}label/example.com/label-number-{i:03d}" for i in range(40)]
    marker = eks.write_marker(keys)
    assert len(marker) > 1 and all(len(v) <= eks.MARKER_VALUE_MAX for v in marker.values())
    assert eks.marker_keys(marker) == [eks.MARKER_KEY] + [f"{eks.MARKER_KEY}-{i}" for i in range(2, len(marker) + 1)]
    assert eks.read_marker(marker) == set(keys)


def test_asg_plan_deletes_only_its_own_stale_tags():
    live = {P + "label/role": "train-gpu", P + "label/old": "x", P + "label/someone-elses": "y",
            "other": "z", **eks.write_marker([P + "label/role", P + "label/old"])}
    want = {P + "label/role": "train-gpu", P + "resources/nvidia.com/gpu": "1"}
    put, delete, after = eks.asg_tag_plan(live, want)
    assert delete == [P + "label/old"]
    assert put == {P + "resources/nvidia.com/gpu": "1",
                   eks.MARKER_KEY: "label/role,resources/nvidia.com/gpu"}
    assert after[P + "label/someone-elses"] == "y" and after["other"] == "z"
    put2, delete2, _after2 = eks.asg_tag_plan(after, want)
    assert (put2, delete2) == ({}, [])


def test_asg_plan_drops_extra_marker_chunks():
    many = [f"{P}label/example.com/label-number-{i:03d}" for i in range(40)]
    live = {**{k: "v" for k in many}, **eks.write_marker(many)}
    _put, delete, after = eks.asg_tag_plan(live, {P + "label/x": "1"})
    assert f"{eks.MARKER_KEY}-2" in delete and set(many) <= set(delete)
    assert after == {P + "label/x": "1", eks.MARKER_KEY: "label/x"}


def test_gpu_count_for_mixed_types_takes_smallest():
    assert eks.gpu_count_for(["g4dn.xlarge"], {"g4dn.xlarge": 1}) == (1, None)
    count, warning = eks.gpu_count_for(["g4dn.12xlarge", "g4dn.xlarge"], {"g4dn.12xlarge": 4, "g4dn.xlarge": 1})
    assert count == 1 and "gpu_count" in warning
    assert eks.gpu_count_for(["t3.medium"], {}) == (0, None)


def test_accelerator_for_from_gpu_names():
    assert eks.accelerator_for(["g4dn.xlarge"], {"g4dn.xlarge": ["T4"]}) == ("nvidia-tesla-t4", None)
    assert eks.accelerator_for(["g5.xlarge", "g5.2xlarge"], {"g5.xlarge": ["A10G"], "g5.2xlarge": ["A10G"]}) == (
        "nvidia-a10g", None)
    assert eks.accelerator_for(["x9.large"], {"x9.large": ["Z1"]}) == ("nvidia-z1", None)
    assert eks.accelerator_for(["m5.large"], {"m5.large": []}) == (None, None)
    value, warning = eks.accelerator_for(["g5.xlarge", "g6.xlarge"], {"g5.xlarge": ["A10G"], "g6.xlarge": ["L4"]})
    assert value is None and "g5.xlarge: A10G" in warning and "g6.xlarge: L4" in warning


def test_region_error_names_region_and_fix():
    import boto3  # pylint: disable=import-outside-toplevel

    from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _aws_common  # pylint: disable=import-outside-toplevel

    session = boto3.session.Session(region_name="eu-west-1")
    assert _aws_common.region_error(session, "eu-west-1", ["eks", "iam"]) is None
    msg = _aws_common.region_error(session, "eu-west-9", ["eks"])
    assert "region 'eu-west-9'" in msg and "eu-west-1" in msg and "endpoint_url" in msg
