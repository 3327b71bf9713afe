"""eks_nodegroup against moto's HTTP server (tests/cloud/conftest.py), run as `ansible localhost -m`.

What these prove: the module's requests are accepted by moto's implementation of the EKS, Auto Scaling and EC2
APIs (boto3 validates each request against botocore's model before sending it), it sends only what differs, a
second run sends nothing, check mode sends no write, and the cluster-autoscaler tags land on a real (moto) Auto
Scaling group with its own stale ones removed. What they do not prove: that EKS itself accepts these requests
(moto checks little: any amiType, any instance type), EKS's asynchronous states (moto is ACTIVE at once and
every update is Successful at once, so the waiting on DescribeUpdate never loops), UpdateNodegroupVersion and
TagResource/UntagResource on a nodegroup (moto 5.2.5 does not implement the first and tags clusters only), and
that the cluster-autoscaler reads the tags as intended.
"""
from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._eks_user_data import gpu_user_data  # noqa: E402  # pylint: disable=wrong-import-position

P = "k8s.io/cluster-autoscaler/node-template/"
MARKER = "k8sgpu.nvidia/managed-template-tags"


@pytest.fixture
def gpu_pool(network):
    """Options of a GPU nodegroup that scales from zero (no ASG tags: moto creates no ASG)."""
    return {"name": "gpu-t4", "node_role": network["role"], "subnets": network["subnets"],
            "ami_type": "AL2023_x86_64_NVIDIA", "capacity_type": "SPOT", "instance_types": ["g4dn.xlarge"],
            "scaling": {"min_size": 0, "max_size": 3}, "labels": {"role": "train-gpu", "tier": "a"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                       {"key": "spot", "effect": "PREFER_NO_SCHEDULE"}],
            "tags": {"team": "ml"}, "autoscaler_tags": False}
# No update_config here: moto 5.2.5's CreateNodegroup drops it (moto/eks/responses.py create_nodegroup does not
# read updateConfig), so it is set and compared in the update test, through UpdateNodegroupConfig.


def describe(aws, cluster, name="gpu-t4"):
    ng = aws["eks"].describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
    for k in ("createdAt", "modifiedAt"):  # moto's timestamps move on every update
        ng.pop(k, None)
    return ng


def exists(aws, cluster, name="gpu-t4") -> bool:
    return name in aws["eks"].list_nodegroups(clusterName=cluster)["nodegroups"]


def ok(result):
    assert not result.get("failed"), result.get("msg")
    return result


def test_create_then_second_run_changes_nothing(run, aws, cluster, gpu_pool):
    r = ok(run({"cluster_name": cluster, **gpu_pool}))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["CreateNodegroup"]
    ng = describe(aws, cluster)
    assert ng["status"] == "ACTIVE"
    assert ng["amiType"] == "AL2023_x86_64_NVIDIA" and ng["capacityType"] == "SPOT"
    assert ng["scalingConfig"] == {"minSize": 0, "maxSize": 3, "desiredSize": 0}
    assert ng["labels"] == {"role": "train-gpu", "tier": "a"}
    # Kubernetes' NoSchedule was sent as EKS's NO_SCHEDULE.
    assert sorted(ng["taints"], key=lambda t: t["key"]) == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
        {"key": "spot", "effect": "PREFER_NO_SCHEDULE"}]
    assert ng["tags"] == {"team": "ml"}
    assert r["nodegroup"]["nodegroupName"] == "gpu-t4"

    again = ok(run({"cluster_name": cluster, **gpu_pool}))
    assert not again["changed"] and again["requests"] == []
    assert describe(aws, cluster) == ng


def test_labels_taints_scaling_update_config_only_differences(run, aws, cluster, gpu_pool):
    ok(run({"cluster_name": cluster, **gpu_pool}))
    changed = {**gpu_pool, "labels": {"role": "infer-gpu", "zone": "b"},
               "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
                          {"key": "dedicated", "value": "ml", "effect": "NoExecute"}],
               "scaling": {"min_size": 0, "max_size": 8}, "update_config": {"max_unavailable_percentage": 25}}
    r = ok(run({"cluster_name": cluster, **changed}, diff=True))
    assert r["changed"]
    assert [q["operation"] for q in r["requests"]] == ["UpdateNodegroupConfig"]
    params = r["requests"][0]["params"]
    assert params["labels"] == {"addOrUpdateLabels": {"role": "infer-gpu", "zone": "b"}, "removeLabels": ["tier"]}
    assert params["taints"] == {"addOrUpdateTaints": [{"key": "dedicated", "value": "ml", "effect": "NO_EXECUTE"}],
                                "removeTaints": [{"key": "spot", "effect": "PREFER_NO_SCHEDULE"}]}
    assert params["scalingConfig"] == {"minSize": 0, "maxSize": 8, "desiredSize": 0}
    assert params["updateConfig"] == {"maxUnavailablePercentage": 25}
    assert [u["status"] for u in r["updates"]] == ["Successful"]
    assert r["diff"]["before"]["labels"] == {"role": "train-gpu", "tier": "a"}
    assert r["diff"]["after"]["labels"] == {"role": "infer-gpu", "zone": "b"}

    ng = describe(aws, cluster)
    assert ng["labels"] == {"role": "infer-gpu", "zone": "b"}
    assert sorted((t["key"], t.get("value"), t["effect"]) for t in ng["taints"]) == [
        ("dedicated", "ml", "NO_EXECUTE"), ("nvidia.com/gpu", "present", "NO_SCHEDULE")]
    assert ng["scalingConfig"]["maxSize"] == 8 and ng["updateConfig"] == {"maxUnavailablePercentage": 25}

    again = ok(run({"cluster_name": cluster, **changed}))
    assert not again["changed"] and again["requests"] == []


def test_check_mode_sends_no_write(run, aws, cluster, gpu_pool, caplog):
    r = ok(run({"cluster_name": cluster, **gpu_pool}, check=True, diff=True))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["CreateNodegroup"]
    assert r["diff"]["after"]["amiType"] == "AL2023_x86_64_NVIDIA" and r["diff"]["before"] == {}
    assert not exists(aws, cluster)

    ok(run({"cluster_name": cluster, **gpu_pool}))
    before = describe(aws, cluster)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        r = ok(run({"cluster_name": cluster, **gpu_pool, "labels": {"role": "x"}, "taints": [],
                    "scaling": {"min_size": 1, "max_size": 2}}, check=True, diff=True))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["UpdateNodegroupConfig"]
    assert r["diff"]["after"]["labels"] == {"role": "x"} and r["diff"]["after"]["taints"] == []
    assert describe(aws, cluster) == before
    # moto saw reads only: GETs (DescribeNodegroup), no POST (create, update, tag).
    lines = [m.getMessage() for m in caplog.records if m.name == "werkzeug"]
    assert lines and all('"GET ' in line for line in lines), lines

    r = ok(run({"cluster_name": cluster, "name": "gpu-t4", "state": "absent"}, check=True))
    assert r["changed"] and exists(aws, cluster)


def test_immutable_field_fails_with_field_old_and_new(run, aws, cluster, gpu_pool):
    ok(run({"cluster_name": cluster, **gpu_pool}))
    before = describe(aws, cluster)
    r = run({"cluster_name": cluster, **gpu_pool, "ami_type": "BOTTLEROCKET_x86_64_NVIDIA",
             "instance_types": ["g5.xlarge"], "labels": {"role": "changed"}})
    assert r.get("failed") and r["_rc"] != 0
    assert "ami_type (EKS field amiType) is 'AL2023_x86_64_NVIDIA', the task asks for 'BOTTLEROCKET_x86_64_NVIDIA'" \
        in r["msg"]
    assert "instance_types (EKS field instanceTypes) is ['g4dn.xlarge'], the task asks for ['g5.xlarge']" in r["msg"]
    assert r["requests"] == [] and describe(aws, cluster) == before


@pytest.mark.parametrize("bad,shape", [({"ami_type": "AL2023_NVIDIA"}, "AMITypes"),
                                       ({"capacity_type": "PREEMPTIBLE"}, "CapacityTypes"),
                                       ({"taints": [{"key": "g", "effect": "NoSchedul"}]}, "TaintEffect")])
def test_bad_enum_fails_before_any_request(run, aws, cluster, gpu_pool, caplog, bad, shape):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        r = run({"cluster_name": cluster, **gpu_pool, **bad})
    assert r.get("failed") and shape in r["msg"]
    assert [m for m in caplog.records if m.name == "werkzeug"] == []  # not one request reached moto
    assert not exists(aws, cluster)  # moto itself would have created it: it accepts any amiType


def test_delete_then_absent_changes_nothing(run, aws, cluster, gpu_pool):
    ok(run({"cluster_name": cluster, **gpu_pool}))
    r = ok(run({"cluster_name": cluster, "name": "gpu-t4", "state": "absent"}, diff=True))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["DeleteNodegroup"]
    assert r["diff"]["before"]["amiType"] == "AL2023_x86_64_NVIDIA" and r["diff"]["after"] == {}
    assert not exists(aws, cluster)
    again = ok(run({"cluster_name": cluster, "name": "gpu-t4", "state": "absent"}))
    assert not again["changed"] and again["requests"] == []


def test_nodegroup_tag_change_reaches_tag_resource(run, aws, cluster, gpu_pool):
    """moto 5.2.5's TagResource tags clusters only (moto/eks/models.py tag_resource), so a tag change on a
    nodegroup cannot succeed here: this shows the module sends TagResource for the nodegroup's ARN, with the
    tags that differ, and fails with the operation and AWS's error in the message."""
    ok(run({"cluster_name": cluster, **gpu_pool}))
    arn = describe(aws, cluster)["nodegroupArn"]
    r = ok(run({"cluster_name": cluster, **gpu_pool, "tags": {"team": "ml", "cost": "gpu"}}, check=True))
    assert r["requests"] == [{"operation": "TagResource", "params": {"resourceArn": arn, "tags": {"cost": "gpu"}}}]
    r = run({"cluster_name": cluster, **gpu_pool, "tags": {"team": "ml", "cost": "gpu"}})
    assert r.get("failed") and "TagResource: ResourceNotFoundException" in r["msg"] and "gpu-t4" in r["msg"]


def test_missing_required_create_options(run, aws, cluster):
    r = run({"cluster_name": cluster, "name": "gpu-t4", "ami_type": "AL2023_x86_64_NVIDIA"})
    assert r.get("failed") and "give node_role and subnets" in r["msg"]
    assert not exists(aws, cluster)


def asg_tags(aws, name):
    g = aws["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return {t["Key"]: (t["Value"], t["PropagateAtLaunch"]) for t in g["Tags"]}


def test_autoscaler_node_template_tags(run, aws, cluster, gpu_pool):
    ok(run({"cluster_name": cluster, **gpu_pool}))
    asg = describe(aws, cluster)["resources"]["autoScalingGroups"][0]["name"]

    # An ACTIVE nodegroup whose Auto Scaling group does not exist (moto names it, creates none): a clear failure.
    r = run({"cluster_name": cluster, **gpu_pool, "autoscaler_tags": True})
    assert r.get("failed") and asg in r["msg"] and "does not return" in r["msg"]

    # The group, under the name EKS gave, with a node-template tag somebody wrote by hand.
    aws["autoscaling"].create_launch_configuration(LaunchConfigurationName=f"lc-{cluster}", ImageId="ami-12c6146b",
                                                   InstanceType="g4dn.xlarge")
    aws["autoscaling"].create_auto_scaling_group(
        AutoScalingGroupName=asg, LaunchConfigurationName=f"lc-{cluster}", MinSize=0, MaxSize=3, DesiredCapacity=0,
        VPCZoneIdentifier=",".join(gpu_pool["subnets"]),
        Tags=[{"Key": P + "label/by-hand", "Value": "yes", "PropagateAtLaunch": True}])

    opts = {**gpu_pool, "autoscaler_tags": True, "accelerator": "nvidia-tesla-t4"}
    r = ok(run({"cluster_name": cluster, **opts}, diff=True))
    assert r["changed"]
    assert r["gpu_count"] == 1  # g4dn.xlarge's GpuInfo, from moto's DescribeInstanceTypes
    want = {P + "label/role": "train-gpu", P + "label/tier": "a",
            P + "label/k8s.amazonaws.com/accelerator": "nvidia-tesla-t4",
            P + "taint/nvidia.com/gpu": "present:NoSchedule", P + "taint/spot": ":PreferNoSchedule",
            P + "resources/nvidia.com/gpu": "1"}
    tags = asg_tags(aws, asg)
    for k, v in want.items():
        assert tags[k] == (v, False), k
    assert set(tags[MARKER][0].split(",")) == {k[len(P):] for k in want}
    assert tags[P + "label/by-hand"] == ("yes", True)  # not ours: left alone
    # The accelerator label is also on the nodegroup, so the nodes carry what the template promises.
    assert describe(aws, cluster)["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-tesla-t4"
    assert r["diff"]["after"]["autoscaling_group_tags"][asg][P + "label/role"] == "train-gpu"
    assert P + "label/role" not in r["diff"]["before"]["autoscaling_group_tags"][asg]

    again = ok(run({"cluster_name": cluster, **opts}))
    assert not again["changed"] and again["requests"] == []

    # A label and a taint removed: their template tags go; the hand-written one stays.
    fewer = {**opts, "labels": {"role": "train-gpu"},
             "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], "gpu_count": 4}
    r = ok(run({"cluster_name": cluster, **fewer}))
    assert r["changed"]
    tags = asg_tags(aws, asg)
    assert P + "label/tier" not in tags and P + "taint/spot" not in tags
    assert tags[P + "label/role"] == ("train-gpu", False)
    assert tags[P + "resources/nvidia.com/gpu"] == ("4", False)
    assert tags[P + "label/by-hand"] == ("yes", True)
    assert set(tags[MARKER][0].split(",")) == {"label/role", "label/k8s.amazonaws.com/accelerator",
                                               "taint/nvidia.com/gpu", "resources/nvidia.com/gpu"}
    assert ok(run({"cluster_name": cluster, **fewer}))["changed"] is False

    # Check mode: reports the tag changes, writes none.
    before = asg_tags(aws, asg)
    r = ok(run({"cluster_name": cluster, **fewer, "gpu_count": 0}, check=True))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["DeleteTags", "CreateOrUpdateTags"]
    assert r["requests"][0]["params"]["Tags"] == [{"ResourceId": asg, "ResourceType": "auto-scaling-group",
                                                   "Key": P + "resources/nvidia.com/gpu"}]
    assert asg_tags(aws, asg) == before


def test_secret_not_in_output(run, cluster, gpu_pool):
    r = ok(run({"cluster_name": cluster, **gpu_pool}, check=True))
    assert "testing-secret" not in r["_stdout"]


@pytest.mark.skipif(not shutil.which("python3", path="/usr/bin"), reason="no /usr/bin/python3")
def test_fails_naming_boto3_when_missing(run, cluster, gpu_pool):
    has = subprocess.run(["/usr/bin/python3", "-c", "import boto3"], capture_output=True, check=False).returncode == 0
    if has:
        pytest.skip("/usr/bin/python3 has boto3: no interpreter without it here")
    r = run({"cluster_name": cluster, **gpu_pool}, python="/usr/bin/python3")
    assert r.get("failed") and "boto3" in r["msg"] and "requirements-eks.txt" in r["msg"]


def test_unknown_instance_type_fails_before_create_nodegroup(run, aws, cluster, gpu_pool):
    """The instance types are looked up (EC2 DescribeInstanceTypes) before CreateNodegroup: an unknown one fails
    naming it, and no nodegroup is left behind to fail every later run."""
    r = run({"cluster_name": cluster, **gpu_pool, "instance_types": ["g9z.xlarge", "g4dn.xlarge"]})
    assert r.get("failed") and "g9z.xlarge" in r["msg"] and "InvalidInstanceType" in r["msg"]
    assert "nothing was created" in r["msg"] and "describe-instance-type-offerings" in r["msg"]
    assert r["requests"] == [] and not exists(aws, cluster)
    # Check mode reads the types too: the same failure, not a planned create.
    r = run({"cluster_name": cluster, **gpu_pool, "instance_types": ["g9z.xlarge"]}, check=True)
    assert r.get("failed") and "g9z.xlarge" in r["msg"]


def test_accelerator_label_derived_from_instance_types(run, aws, cluster, gpu_pool):
    """Without accelerator, the k8s.amazonaws.com/accelerator label (nodegroup and node-template tag) comes from the
    instance types' GPUs that the module reads for the GPU count: g4dn.xlarge has one NVIDIA T4."""
    ok(run({"cluster_name": cluster, **gpu_pool}))
    asg = describe(aws, cluster)["resources"]["autoScalingGroups"][0]["name"]
    aws["autoscaling"].create_launch_configuration(LaunchConfigurationName=f"lc-{cluster}", ImageId="ami-12c6146b",
                                                   InstanceType="g4dn.xlarge")
    aws["autoscaling"].create_auto_scaling_group(
        AutoScalingGroupName=asg, LaunchConfigurationName=f"lc-{cluster}", MinSize=0, MaxSize=3, DesiredCapacity=0,
        VPCZoneIdentifier=",".join(gpu_pool["subnets"]))
    opts = {**gpu_pool, "autoscaler_tags": True}
    r = ok(run({"cluster_name": cluster, **opts}))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["UpdateNodegroupConfig", "CreateOrUpdateTags"]
    assert r["requests"][0]["params"]["labels"] == {
        "addOrUpdateLabels": {"k8s.amazonaws.com/accelerator": "nvidia-tesla-t4"}}
    assert describe(aws, cluster)["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-tesla-t4"
    assert asg_tags(aws, asg)[P + "label/k8s.amazonaws.com/accelerator"] == ("nvidia-tesla-t4", False)
    assert asg_tags(aws, asg)[P + "resources/nvidia.com/gpu"] == ("1", False)
    assert not ok(run({"cluster_name": cluster, **opts}))["changed"]


def test_unknown_region_named_with_the_fix(run, cluster, gpu_pool):
    """A well-formed region botocore has no EKS endpoint for: the region and the fix, before any request (it was
    the endpoint's raw connection error)."""
    from conftest import CREDS  # pylint: disable=import-outside-toplevel

    r = run({"cluster_name": cluster, **gpu_pool, "region": "eu-west-9", **CREDS}, connection=False)
    assert r.get("failed") and "region 'eu-west-9'" in r["msg"] and "EKS" in r["msg"]
    assert "aws ec2 describe-regions" in r["msg"] and "pip install -U boto3 botocore" in r["msg"]
    assert "endpoint_url" in r["msg"] and "eu-west-1" in r["msg"]


# ---- launch_template (issue 34 item 7: the template whose user data isolates GPUs) ----
def gpu_template(aws, name: str) -> tuple[str, str]:
    """A launch template with the collection's isolating user data, as playbooks/eks.yml makes it: (id, text)."""
    text = gpu_user_data("AL2023_x86_64_NVIDIA")
    lt = aws["ec2"].create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
        "UserData": base64.b64encode(text.encode()).decode()})["LaunchTemplate"]
    return lt["LaunchTemplateId"], text


def test_launch_template_reaches_create_nodegroup_and_a_second_run_sends_nothing(run, aws, cluster, gpu_pool):
    lt_id, _text = gpu_template(aws, f"{cluster}-gpu")
    pool = {**gpu_pool, "launch_template": {"name": f"{cluster}-gpu", "version": "1"}}
    r = ok(run({"cluster_name": cluster, **pool}))
    create = r["requests"][0]
    assert create["operation"] == "CreateNodegroup"
    assert create["params"]["launchTemplate"] == {"name": f"{cluster}-gpu", "version": "1"}
    assert "diskSize" not in create["params"]
    live = describe(aws, cluster)["launchTemplate"]
    assert live["name"] == f"{cluster}-gpu" and live["id"] == lt_id and str(live["version"]) == "1"
    again = ok(run({"cluster_name": cluster, **pool}))
    assert not again["changed"] and again["requests"] == []
    # By ID: the same template.
    same = ok(run({"cluster_name": cluster, **gpu_pool, "launch_template": {"id": lt_id, "version": "1"}}))
    assert not same["changed"]


def test_launch_template_version_is_an_update_and_another_template_fails(run, aws, cluster, gpu_pool):
    gpu_template(aws, f"{cluster}-gpu")
    ok(run({"cluster_name": cluster, **gpu_pool, "launch_template": {"name": f"{cluster}-gpu", "version": "1"}}))
    before = describe(aws, cluster)
    # moto 5.2.5 has no UpdateNodegroupVersion: check mode shows the request without sending it.
    r = ok(run({"cluster_name": cluster, **gpu_pool, "launch_template": {"name": f"{cluster}-gpu", "version": "2"}},
               check=True, diff=True))
    assert r["requests"] == [{"operation": "UpdateNodegroupVersion", "params": {
        "clusterName": cluster, "nodegroupName": "gpu-t4", "launchTemplate": {"name": f"{cluster}-gpu", "version": "2"},
        "force": False}}]
    assert r["diff"]["after"]["launchTemplate"]["version"] == "2"
    r = run({"cluster_name": cluster, **gpu_pool, "launch_template": {"name": "another", "version": "1"}})
    assert r.get("failed") and r["requests"] == []
    assert "launch_template (EKS field launchTemplate) is {" in r["msg"] and "'name': 'another'" in r["msg"]
    assert describe(aws, cluster) == before


def test_disk_size_with_a_launch_template_is_refused_before_any_request(run, aws, cluster, gpu_pool):
    r = run({"cluster_name": cluster, **gpu_pool, "disk_size": 100,
             "launch_template": {"name": "x", "version": "1"}})
    assert r.get("failed") and "disk_size cannot be given with launch_template" in r["msg"]
    assert not exists(aws, cluster)
