"""playbooks/eks.yml from an empty moto account: with k8sgpu_eks_cluster_state present it makes the two IAM roles
(amazon.aws.iam_role), the cluster (eks_cluster), the launch template whose user data isolates GPUs (issue 34 item 7)
and the GPU nodegroup started from it, with its Auto Scaling group's node-template tags; a second run changes
nothing; the teardown removes the nodegroup and its launch template, then the cluster, then the roles, and without
k8sgpu_eks_cluster_state only the nodegroup and its launch template.

The Kubernetes half (device plugin, scale-from-zero check) is off here: moto's cluster has no API server; the lab
test (tests/lab/test_eks_playbook.py) runs it against the lab's. What this does not prove: that EKS and IAM accept
these requests (moto checks little), EKS's waits, nor that nodes with this role join a real cluster.
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from conftest import REGION, ROOT

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._eks_user_data import gpu_user_data  # noqa: E402  # pylint: disable=wrong-import-position

P = "k8s.io/cluster-autoscaler/node-template/"
POLICY = "arn:aws:iam::aws:policy/"


@pytest.fixture
def asg_with_nodegroup(monkeypatch, aws):
    """moto names a nodegroup's Auto Scaling group but creates none: create it with the nodegroup and delete it
    with the nodegroup, as EKS does (moto's server runs in this process)."""
    from moto.eks.models import EKSBackend  # pylint: disable=import-outside-toplevel

    create, delete = EKSBackend.create_nodegroup, EKSBackend.delete_nodegroup

    def create_nodegroup(self, *args, **kwargs):
        ng = create(self, *args, **kwargs)
        name = ng.resources["autoScalingGroups"][0]["name"]
        aws["autoscaling"].create_launch_configuration(LaunchConfigurationName=name, ImageId="ami-12c6146b",
                                                       InstanceType=(ng.instance_types or ["g5.xlarge"])[0])
        aws["autoscaling"].create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchConfigurationName=name, MinSize=ng.scaling_config["minSize"],
            MaxSize=ng.scaling_config["maxSize"], DesiredCapacity=ng.scaling_config["desiredSize"],
            VPCZoneIdentifier=",".join(ng.subnets))
        return ng

    def delete_nodegroup(self, cluster_name, nodegroup_name):
        ng = delete(self, cluster_name, nodegroup_name)
        aws["autoscaling"].delete_auto_scaling_group(AutoScalingGroupName=ng.resources["autoScalingGroups"][0]["name"],
                                                     ForceDelete=True)
        return ng

    monkeypatch.setattr(EKSBackend, "create_nodegroup", create_nodegroup)
    monkeypatch.setattr(EKSBackend, "delete_nodegroup", delete_nodegroup)


def play(endpoint: str, extra: dict, *args: str) -> tuple[int, str, dict]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "default"}
    base = {"k8sgpu_aws_endpoint_url": endpoint, "k8sgpu_aws_region": REGION,
            "ansible_python_interpreter": sys.executable, "k8sgpu_eks_device_plugin": False,
            "k8sgpu_eks_verify": False}
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "playbooks/eks.yml",
                           "-e", json.dumps({**base, **extra}), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    m = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    stats = {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[3])} if m else {}
    return proc.returncode, out, stats


def templates(aws, name: str) -> list[dict]:
    return aws["ec2"].describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [name]}])[
        "LaunchTemplates"]


def roles(aws) -> set[str]:
    return {r["RoleName"] for r in aws["iam"].list_roles()["Roles"]}


def attached(aws, role: str) -> set[str]:
    return {p["PolicyArn"] for p in aws["iam"].list_attached_role_policies(RoleName=role)["AttachedPolicies"]}


def test_eks_playbook_from_no_cluster_and_back(endpoint, aws, network, asg_with_nodegroup):  # noqa: ARG001
    # pylint: disable=unused-argument
    name = f"made-{uuid.uuid4().hex[:6]}"
    extra = {"k8sgpu_eks_cluster_name": name, "k8sgpu_eks_cluster_state": "present",
             "k8sgpu_eks_cluster": {"subnets": network["subnets"], "version": "1.33", "logging": ["api", "audit"],
                                    "tags": {"team": "ml"}},
             "k8sgpu_eks_nodegroup": {"name": "gpu", "instance_types": ["g5.xlarge"], "disk_size": 120,
                                      "scaling": {"min_size": 0, "max_size": 2}}}
    cluster_role, node_role = f"{name}-eks-cluster", f"{name}-eks-nodes"

    template = f"{name}-gpu-gpu-isolation"

    # Check mode: the roles, the cluster, the launch template and the nodegroup are planned, nothing is made.
    rc, out, stats = play(endpoint, extra, "--check")
    assert rc == 0 and stats["changed"] == 5, out[-5000:]
    assert name not in aws["eks"].list_clusters()["clusters"] and not {cluster_role, node_role} & roles(aws)
    assert not templates(aws, template)

    rc, out, stats = play(endpoint, extra)
    assert rc == 0 and stats["changed"] == 5, out[-5000:]
    assert attached(aws, cluster_role) == {POLICY + "AmazonEKSClusterPolicy"}
    node_policies = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")
    assert attached(aws, node_role) == {POLICY + p for p in node_policies}
    trust = aws["iam"].get_role(RoleName=cluster_role)["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "eks.amazonaws.com"}
    cluster = aws["eks"].describe_cluster(name=name)["cluster"]
    assert cluster["roleArn"] == aws["iam"].get_role(RoleName=cluster_role)["Role"]["Arn"]
    assert cluster["version"] == "1.33" and cluster["tags"] == {"team": "ml"}
    assert sorted(cluster["resourcesVpcConfig"]["subnetIds"]) == sorted(network["subnets"])
    ng = aws["eks"].describe_nodegroup(clusterName=name, nodegroupName="gpu")["nodegroup"]
    assert ng["nodeRole"] == aws["iam"].get_role(RoleName=node_role)["Role"]["Arn"]
    assert sorted(ng["subnets"]) == sorted(network["subnets"]) and ng["amiType"] == "AL2023_x86_64_NVIDIA"
    asg = ng["resources"]["autoScalingGroups"][0]["name"]
    tags = {t["Key"]: t["Value"] for t in aws["autoscaling"].describe_auto_scaling_groups(
        AutoScalingGroupNames=[asg])["AutoScalingGroups"][0]["Tags"]}
    assert tags[P + "resources/nvidia.com/gpu"] == "1"
    assert tags[P + "label/k8s.amazonaws.com/accelerator"] == "nvidia-a10g"  # derived from g5.xlarge's A10G
    # GPU isolation: the nodes start from the launch template whose user data sets the toolkit (the filter's text);
    # the nodegroup's disk_size is the template's root volume (EKS refuses diskSize with a launch template).
    lt = templates(aws, template)
    assert len(lt) == 1 and ng["launchTemplate"]["id"] == lt[0]["LaunchTemplateId"]
    assert ng["launchTemplate"]["name"] == template and str(ng["launchTemplate"]["version"]) == "1"
    data = aws["ec2"].describe_launch_template_versions(LaunchTemplateName=template)["LaunchTemplateVersions"]
    assert len(data) == 1
    user_data = base64.b64decode(data[0]["LaunchTemplateData"]["UserData"]).decode()
    assert user_data == gpu_user_data("AL2023_x86_64_NVIDIA")
    assert "--set=accept-nvidia-visible-devices-envvar-when-unprivileged=false" in user_data
    assert data[0]["LaunchTemplateData"]["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 120, "VolumeType": "gp3"}}]
    assert "diskSize" not in ng or ng["diskSize"] != 120  # not sent to EKS (moto fills in its default)

    rc, out, stats = play(endpoint, extra)
    assert rc == 0 and stats["changed"] == 0, out[-5000:]
    assert len(aws["ec2"].describe_launch_template_versions(LaunchTemplateName=template)["LaunchTemplateVersions"]) == 1

    # Teardown without k8sgpu_eks_cluster_state: the pool (nodegroup, then its template) only; cluster and roles stay.
    rc, out, stats = play(endpoint, {**extra, "k8sgpu_eks_cluster_state": ""}, "-e", "k8sgpu_eks_state=absent")
    assert rc == 0 and stats["changed"] == 2, out[-5000:]
    assert aws["eks"].list_nodegroups(clusterName=name)["nodegroups"] == [] and not templates(aws, template)
    assert name in aws["eks"].list_clusters()["clusters"] and {cluster_role, node_role} <= roles(aws)

    # The documented undo: the same inventory with k8sgpu_eks_state=absent - the cluster, then the roles.
    rc, out, stats = play(endpoint, extra, "-e", "k8sgpu_eks_state=absent")
    assert rc == 0 and stats["changed"] == 2, out[-5000:]
    assert out.index("Teardown - the control plane") < out.index("Teardown - the nodes' and then the cluster's")
    assert name not in aws["eks"].list_clusters()["clusters"] and not {cluster_role, node_role} & roles(aws)
    rc, out, stats = play(endpoint, extra, "--tags", "eks_teardown")
    assert rc == 0 and stats["changed"] == 0, out[-5000:]


def test_eks_playbook_cluster_needs_subnets(endpoint):
    rc, out, stats = play(endpoint, {"k8sgpu_eks_cluster_name": "x", "k8sgpu_eks_cluster_state": "present",
                                     "k8sgpu_eks_nodegroup": {"name": "gpu"}})
    assert rc != 0 and stats["failed"] == 1 and stats["changed"] == 0
    assert "k8sgpu_eks_cluster.subnets is required" in " ".join(out.split())


@pytest.mark.parametrize("extra,words", [
    ({"k8sgpu_eks_nodegroup": {"name": "gpu", "ami_type": "AL2023_x86_64_STANDARD"}},
     "AMI type 'AL2023_x86_64_STANDARD': a GPU pool needs one of"),
    ({"k8sgpu_eks_nodegroup": {"name": "gpu"}, "device_plugin_device_list_strategy": ["envvar"]},
     "device_plugin_device_list_strategy=['envvar'] (only [volume-mounts]"),
    ({"k8sgpu_eks_nodegroup": {"name": "gpu", "launch_template": {"name": "mine"}}},
     "nor is launch_template: the playbook makes the one that isolates GPUs"),
])
def test_eks_playbook_refuses_nodes_without_isolation_before_any_change(endpoint, aws, extra, words):
    name = f"refused-{uuid.uuid4().hex[:6]}"
    rc, out, stats = play(endpoint, {"k8sgpu_eks_cluster_name": name, **extra})
    assert rc != 0 and stats["failed"] == 1 and stats["changed"] == 0, out[-3000:]
    assert words in " ".join(out.split()), out[-3000:]
    assert not templates(aws, f"{name}-gpu-gpu-isolation")
