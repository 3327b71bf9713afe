"""playbooks/eks.yml end to end against moto (the AWS half) and the lab's API server (the Kubernetes half), and the
fake cluster autoscaler (tests/support/k8sgpu_testlib/scale_from_zero.py) that gives the lab a GPU node pool scaling from zero.

The fake autoscaler's own tests come first: everything else here relies on it adding a node only for the pods a
pool of that shape would take, only after the scheduler found them unschedulable, and removing it again.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import uuid

import pytest
import yaml
from kubernetes import client

from ansible_output import recap
from conftest import LAB_STATE, ROOT
from k8sgpu_testlib.scale_from_zero import FakeAutoscaler

# tests/cloud's moto fixtures (a ThreadedMotoServer on 127.0.0.1, boto3 clients, a VPC and node role), reused.
_spec = importlib.util.spec_from_file_location("cloud_conftest", ROOT / "tests" / "cloud" / "conftest.py")
cloud = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cloud)
endpoint, aws, network, cluster = cloud.endpoint, cloud.aws, cloud.network, cloud.cluster
# The Pod Identity stand-in for moto (added before moto answers its first EKS request: here, at import).
_spec = importlib.util.spec_from_file_location("cloud_pod_identity", ROOT / "tests" / "cloud" / "test_eks_pod_identity.py")
cloud_pi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cloud_pi)
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template/"

TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def namespace(core):
    name = f"k8sgpu-eks-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def gpu_pod(name: str, selector: dict | None, tolerate: bool = True, gpus: int = 1) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "registry.invalid/none:1",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if selector:
        spec["nodeSelector"] = selector
    if tolerate:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"name": name}, "spec": spec}


def pod_state(core, ns: str, name: str) -> tuple[str, str | None]:
    p = core.read_namespaced_pod(name, ns)
    return p.status.phase, p.spec.node_name


def wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.3)
    return bool(pred())


def test_fake_autoscaler_adds_a_node_only_for_a_matching_pending_pod_and_scales_back_to_zero(core, namespace):
    selector = {"role": "train-gpu", "k8sgpu-test/pool": namespace}
    prefix = f"k8sgpu-sfz-{namespace[-6:]}"
    with FakeAutoscaler(core, node_prefix=prefix, labels=selector, taints=[TAINT], gpus=1, delay=1.0,
                        namespaces=[namespace], max_nodes=2, scale_down_after=2.0) as pool:
        # Not tolerating the pool's taint, or not selecting the pool: no node, ever.
        core.create_namespaced_pod(namespace, gpu_pod("intolerant", selector, tolerate=False))
        core.create_namespaced_pod(namespace, gpu_pod("unselective", {"k8sgpu-test/other-pool": namespace}))
        core.create_namespaced_pod(namespace, gpu_pod("too-big", selector, gpus=2))
        assert wait(lambda: all(core.read_namespaced_pod(n, namespace).status.conditions
                                for n in ("intolerant", "unselective", "too-big")), 30)
        time.sleep(3)
        assert pool.nodes == [] and pool.scale_ups == []

        core.create_namespaced_pod(namespace, gpu_pod("train", selector))
        assert pool.wait_for(lambda s: s.scale_ups and s.scale_ups[0].pod_running, 60), pool.errors
        ev = pool.scale_ups[0]
        assert ev.pod == f"{namespace}/train" and "didn't match Pod's node affinity/selector" in ev.reason, ev
        assert ev.pending_to_node_s >= 1.0                     # the node came after the pod was pending + delay
        assert ev.pod_node == ev.node == pool.nodes[0] and ev.node.startswith(prefix)
        node = core.read_node(ev.node)
        assert node.metadata.labels["role"] == "train-gpu" and node.status.allocatable["nvidia.com/gpu"] == "1"
        assert [(t.key, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
        assert pod_state(core, namespace, "train") == ("Running", ev.node)
        # The others still have no node: one node, filled by the first pod; the rest never matched.
        for n in ("intolerant", "unselective", "too-big"):
            assert pod_state(core, namespace, n) == ("Pending", None)
        assert len(pool.nodes) == 1

        core.delete_namespaced_pod("train", namespace, grace_period_seconds=0)
        assert pool.wait_scaled_to_zero(60), (pool.removed, pool.errors)
        assert list(pool.removed) == pool.nodes
    with pytest.raises(client.ApiException) as gone:
        core.read_node(pool.nodes[0])
    assert gone.value.status == 404


def test_fake_autoscaler_deletes_its_nodes_on_exit(core, namespace):
    selector = {"k8sgpu-test/pool": namespace}
    with FakeAutoscaler(core, node_prefix=f"k8sgpu-sfz-{namespace[-6:]}", labels=selector, gpus=2,
                        namespaces=[namespace]) as pool:
        core.create_namespaced_pod(namespace, gpu_pod("a", selector, gpus=2))
        assert pool.wait_for(lambda s: s.scale_ups and s.scale_ups[0].pod_running, 60), pool.errors
        assert pool.removed == {}
    assert pool.nodes and set(pool.removed) == set(pool.nodes)
    assert not [n for n in core.list_node().items if n.metadata.name in pool.nodes]


# --------------------------------------------------------------------------------------------------------------
# playbooks/eks.yml: moto for AWS, the lab's API server for Kubernetes, the fake autoscaler for the node
# --------------------------------------------------------------------------------------------------------------
@pytest.fixture
def asg_with_nodegroup(monkeypatch, aws):
    """moto names a nodegroup's Auto Scaling group but does not create it: create it (through moto's own
    Auto Scaling API) when the nodegroup is created, and delete it with the nodegroup, as EKS does."""
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


def node_template(tags: dict) -> tuple[dict, list, int]:
    """What the cluster-autoscaler reads from an Auto Scaling group's tags: labels, taints, GPUs of a new node."""
    labels, taints, gpus = {}, [], 0
    for key, value in tags.items():
        if key.startswith(NODE_TEMPLATE + "label/"):
            labels[key[len(NODE_TEMPLATE + "label/"):]] = value
        elif key.startswith(NODE_TEMPLATE + "taint/"):
            taint_value, effect = value.rsplit(":", 1)
            taints.append({"key": key[len(NODE_TEMPLATE + "taint/"):], "value": taint_value, "effect": effect})
        elif key == NODE_TEMPLATE + "resources/nvidia.com/gpu":
            gpus = int(value)
    return labels, taints, gpus


def asg_tags(aws, cluster_name: str, nodegroup: str) -> dict | None:
    try:
        ng = aws["eks"].describe_nodegroup(clusterName=cluster_name, nodegroupName=nodegroup)["nodegroup"]
    except aws["eks"].exceptions.ResourceNotFoundException:
        return None
    groups = aws["autoscaling"].describe_auto_scaling_groups(
        AutoScalingGroupNames=[g["name"] for g in ng["resources"]["autoScalingGroups"]])["AutoScalingGroups"]
    return {t["Key"]: t["Value"] for g in groups for t in g["Tags"]}


class EksPlaybook:
    def __init__(self, endpoint: str, extra: dict):
        self.extra = extra
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
                    "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                    "K8SGPU_LAB_STATE": str(LAB_STATE)}
        self.base = {"k8sgpu_aws_endpoint_url": endpoint, "k8sgpu_aws_region": cloud.REGION}

    def start(self, *args: str, **extra) -> subprocess.Popen:
        cmd = ["ansible-playbook", "-i", "inventories/lab", "playbooks/eks.yml",
               "-e", json.dumps({**self.base, **self.extra, **extra}), *args]
        return subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def __call__(self, *args: str, **extra) -> tuple[int, str, dict]:
        proc = self.start(*args, **extra)
        out = proc.communicate(timeout=600)[0]
        return proc.returncode, out, recap(out).get("localhost", {})


def test_eks_playbook_nodegroup_scale_from_zero_idempotent_and_teardown(
        core, namespace, endpoint, aws, network, cluster, asg_with_nodegroup):  # pylint: disable=unused-argument
    pool = namespace[-6:]
    labels = {"role": "train-gpu", "k8sgpu-test/pool": namespace}
    dp_label = f"k8sgpu-test/eks-device-plugin-{pool}"
    play = EksPlaybook(endpoint, {
        "k8sgpu_eks_cluster_name": cluster, "k8sgpu_eks_gpu_labels": labels,
        "k8sgpu_eks_nodegroup": {"name": "gpu", "node_role": network["role"], "subnets": network["subnets"],
                                 "capacity_type": "SPOT", "instance_types": ["g5.xlarge"],
                                 "scaling": {"min_size": 0, "max_size": 2}, "accelerator": "nvidia-a10g"},
        # The device plugin of this test alone (the lab's own stays as it is).
        "device_plugin_namespace": namespace, "device_plugin_name": f"k8sgpu-eks-dp-{pool}",
        "device_plugin_node_affinity_label": dp_label,
        "k8sgpu_eks_verify_namespace": namespace, "k8sgpu_eks_verify_timeout": 120,
        "k8sgpu_eks_verify_require_logs": False, "k8sgpu_eks_scale_down_poll": 1,
        # The cluster-autoscaler's objects (its pod cannot reach AWS here: the fake autoscaler plays its part).
        "k8sgpu_eks_cluster_autoscaler": True, "cluster_autoscaler_name": f"k8sgpu-ca-{pool}",
        "cluster_autoscaler_namespace": namespace, "cluster_autoscaler_kubernetes_version": "1.33",
        # Its IAM role through EKS Pod Identity, in moto.
        "k8sgpu_eks_pod_identity": True, "k8sgpu_eks_pod_identity_role": f"k8sgpu-ca-{pool}"})

    # Check mode: nothing is created in AWS, nothing in the cluster.
    rc, out, stats = play("--check")
    assert rc == 0, out[-4000:]
    assert stats["changed"] >= 1 and aws["eks"].list_nodegroups(clusterName=cluster)["nodegroups"] == []

    # The real run, with the cluster-autoscaler's part played from the Auto Scaling group's tags: once the
    # playbook wrote them, a node shaped by them (labels, taints, GPUs) is added for the pending check pod.
    proc = play.start()
    tags = None
    end = time.monotonic() + 300
    while time.monotonic() < end and proc.poll() is None:
        tags = asg_tags(aws, cluster, "gpu")
        if tags and NODE_TEMPLATE + "resources/nvidia.com/gpu" in tags:
            break
        time.sleep(0.2)
    assert tags, proc.communicate()[0][-4000:]
    t_labels, t_taints, t_gpus = node_template(tags)
    assert t_gpus == 1 and t_labels["role"] == "train-gpu" and t_labels[dp_label] == "true"
    assert t_labels["k8s.amazonaws.com/accelerator"] == "nvidia-a10g"
    assert t_taints == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    with FakeAutoscaler(core, node_prefix=f"k8sgpu-eks-{pool}", labels=t_labels, taints=t_taints, gpus=t_gpus,
                        node_selector=labels, namespaces=[namespace], delay=2.0, scale_down_after=2.0) as ca:
        out = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, out[-9000:]
        assert "nodegroup pool: PASSED - completed_no_logs on k8sgpu-eks-" in out, out[-3000:]
        # The scale-down check: the playbook waited until the pool had no node left.
        assert "nodegroup pool: back to zero nodes after the check" in out, out[-3000:]
        assert ca.removed and set(ca.removed) == set(ca.nodes)
        dep = client.AppsV1Api(core.api_client).read_namespaced_deployment(f"k8sgpu-ca-{pool}", namespace)
        assert "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/" \
            + cluster in dep.spec.template.spec.containers[0].args
        first = ca.scale_ups[0]
        assert first.pod.startswith(f"{namespace}/k8sgpu-verify-")
        assert first.pending_seen < first.node_created <= first.pod_running
        ng = aws["eks"].describe_nodegroup(clusterName=cluster, nodegroupName="gpu")["nodegroup"]
        assert ng["amiType"] == "AL2023_x86_64_NVIDIA" and ng["scalingConfig"]["minSize"] == 0
        assert ng["labels"] == {**labels, dp_label: "true", "k8s.amazonaws.com/accelerator": "nvidia-a10g"}
        # GPU isolation (issue 34 item 7): the nodes start from the launch template whose user data sets the
        # toolkit, and the device plugin passes GPUs with the one strategy those nodes accept.
        assert ng["launchTemplate"]["name"] == f"{cluster}-gpu-gpu-isolation"
        cm = core.read_namespaced_config_map(f"k8sgpu-eks-dp-{pool}-config", namespace)
        assert yaml.safe_load(cm.data["config.yaml"])["flags"]["plugin"]["deviceListStrategy"] == ["volume-mounts"]
        assert ca.wait_scaled_to_zero(60), ca.errors
        # The autoscaler's IAM role, trusted by Pod Identity with its policy, associated with its ServiceAccount.
        role = aws["iam"].get_role(RoleName=f"k8sgpu-ca-{pool}")["Role"]
        assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        policy = aws["iam"].get_role_policy(RoleName=f"k8sgpu-ca-{pool}",
                                            PolicyName="ClusterAutoscalerPolicy")["PolicyDocument"]
        assert policy["Statement"][1]["Condition"]["StringEquals"][
            f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster}"] == "owned"
        [assoc] = cloud_pi.pod_identity_associations(aws, cluster)
        assert (assoc["namespace"], assoc["serviceAccount"], assoc["roleArn"]) == \
            (namespace, f"k8sgpu-ca-{pool}", role["Arn"])

        # Second run: nothing changes (AWS, device plugin), and the check scales from zero again.
        rc, out, stats = play()
        assert rc == 0 and stats["changed"] == 0, out[-4000:]
        assert len(ca.scale_ups) == 2 and ca.scale_ups[1].pod_running
        assert ca.wait_scaled_to_zero(60), ca.errors

    # Teardown, twice: the cluster-autoscaler, the nodegroup, its launch template, the Pod Identity association,
    # its role.
    rc, out, stats = play(k8sgpu_eks_state="absent")
    assert rc == 0 and stats["changed"] == 5, out[-4000:]
    assert aws["eks"].list_nodegroups(clusterName=cluster)["nodegroups"] == []
    assert aws["ec2"].describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [
        f"{cluster}-gpu-gpu-isolation"]}])["LaunchTemplates"] == []
    assert cloud_pi.pod_identity_associations(aws, cluster) == []
    assert f"k8sgpu-ca-{pool}" not in {r["RoleName"] for r in aws["iam"].list_roles()["Roles"]}
    with pytest.raises(client.ApiException) as gone:
        client.AppsV1Api(core.api_client).read_namespaced_deployment(f"k8sgpu-ca-{pool}", namespace)
    assert gone.value.status == 404
    rc, out, stats = play("--tags", "eks_teardown")
    assert rc == 0 and stats["changed"] == 0, out[-4000:]


def test_eks_playbook_bad_settings_fail_before_any_call(endpoint):
    play = EksPlaybook(endpoint, {"k8sgpu_eks_nodegroup": {"name": "gpu", "labels": {"role": "x"}},
                                  "k8sgpu_eks_gpu_taints": [{"key": "nvidia.com/gpu", "effect": "NO_SCHEDULE"}]})
    rc, out, stats = play()
    assert rc != 0 and stats["failed"] == 1 and stats["changed"] == 0
    msg = " ".join(out.split()).replace("''", "'")   # the YAML callback folds lines and doubles quotes
    assert "k8sgpu_eks_cluster_name=' (required)" in msg, msg[-3000:]
    assert "not keys of k8sgpu_eks_nodegroup" in msg
    assert "k8sgpu_eks_gpu_taints effects ['NO_SCHEDULE'] (NoSchedule, NoExecute, PreferNoSchedule)" in msg
