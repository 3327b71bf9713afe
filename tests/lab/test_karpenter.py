"""Role karpenter_gpu against the lab's real API server, and Karpenter's scale from zero for real.

TestEc2NodeClass: the role's NodePool and EC2NodeClass are applied with Karpenter's own AWS CRDs installed
(../shared/crds/karpenter, v1.14.1), so the API server's OpenAPI schema and CEL rules check every field we
render; idempotence, check mode, diff, removal of a dropped setting, a clear preflight failure, and deletion.
What this does not prove: that AWS launches the instances (no EC2 here).

TestKarpenterKwok: Karpenter v1.14.1's own controller with its kwok cloud provider
(~/.cache/k8sgpu-lab/bin/karpenter-kwok-v1.14.1/kwok, CRDs from ../shared/crds/karpenter-kwok) runs against the
lab with GPU instance types that carry nvidia.com/gpu; the role's NodePool (node class: a KWOKNodeClass) makes
it launch a GPU node for a pending pod, stop at the NodePool's nvidia.com/gpu limit, never place a pod without
the toleration there, and remove the node once empty. The NodePool carries an extra taint only our pods
tolerate, so Karpenter never launches nodes for other tests' pending pods in the shared lab.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ansible_output import recap
from conftest import LAB_STATE, run

SHARED_CRDS = Path(__file__).resolve().parents[3] / "shared" / "crds"
AWS_CRDS = SHARED_CRDS / "karpenter"
KWOK_CRDS = SHARED_CRDS / "karpenter-kwok"
KARPENTER_VERSION = "v1.14.1"
KARPENTER_BIN = Path.home() / ".cache" / "k8sgpu-lab" / "bin" / f"karpenter-kwok-{KARPENTER_VERSION}" / "kwok"
TEST_TAINT = {"key": "k8sgpu.nvidia/karpenter-test", "value": "true", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}

# Instance types of the kwok provider: names in AWS's family.size form, so the provider's
# karpenter.kwok.sh/instance-family label is g5, g6, m5 ... as the role's family requirement expects.
INSTANCE_TYPES = [
    {"name": name, "architecture": "amd64", "operatingSystems": ["linux"],
     "resources": {"cpu": cpu, "memory": mem, "pods": "58", "ephemeral-storage": "200Gi", **extra},
     "offerings": [{"Price": price * factor, "Available": True, "requirements": [
         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ctype]},
         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}
         for ctype, factor in (("spot", 0.4), ("on-demand", 1.0))]}
    for name, cpu, mem, extra, price in (
        ("g5.xlarge", "4", "16Gi", {"nvidia.com/gpu": "1"}, 1.006),
        ("g6.xlarge", "4", "16Gi", {"nvidia.com/gpu": "1"}, 0.805),
        ("g5.12xlarge", "48", "192Gi", {"nvidia.com/gpu": "4"}, 5.672),
        ("m5.large", "2", "8Gi", {}, 0.096),
    )
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = run(["kubectl", "--kubeconfig", str(LAB_STATE / "kubeconfig"), *args])
    if check and res.returncode:
        raise AssertionError(f"kubectl {' '.join(args)}: {res.stderr}")
    return res


def install_crds(folder: Path) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(folder))
    kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", str(folder))


def remove_crds(folder: Path) -> None:
    kubectl("delete", "--ignore-not-found", "--wait", "--timeout", "120s", "-f", str(folder))


def role(extra: dict, *args: str) -> subprocess.CompletedProcess:
    """The role through tests/lab/playbooks/role.yml on localhost (the GPU containers' play is limited away)."""
    return run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "--limit", "localhost",
                "-e", "role=karpenter_gpu", "-e", json.dumps(extra), *args])


def changed(res: subprocess.CompletedProcess) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return res


def custom(api: client.ApiClient):
    return client.CustomObjectsApi(api)


def get_obj(api, group: str, plural: str, name: str) -> dict | None:
    try:
        return custom(api).get_cluster_custom_object(group, "v1", plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


# --------------------------------------------------------------------------------------------------------------
# The role with Karpenter's AWS CRDs
# --------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def aws_crds(core):
    if not AWS_CRDS.is_dir():
        pytest.skip(f"{AWS_CRDS} is absent: Karpenter's AWS CRDs come from ../shared (not committed)")
    install_crds(AWS_CRDS)
    yield core.api_client
    remove_crds(AWS_CRDS)


@pytest.fixture
def aws_pool(aws_crds):
    name = f"k8sgpu-test-{uuid.uuid4().hex[:6]}"
    extra = {"karpenter_gpu_nodepool_name": name, "karpenter_gpu_ec2nodeclass_name": name,
             "karpenter_gpu_cluster_name": "train", "karpenter_gpu_node_role": "KarpenterNodeRole-train"}
    yield extra
    for group, plural in (("karpenter.sh", "nodepools"), ("karpenter.k8s.aws", "ec2nodeclasses")):
        try:
            custom(aws_crds).delete_cluster_custom_object(group, "v1", plural, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


class TestEc2NodeClass:
    def test_objects_pass_karpenters_validation_and_a_second_run_changes_nothing(self, aws_crds, aws_pool):
        first = ok(role(aws_pool))
        assert changed(first) == 2
        pool = get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"])
        spec = pool["spec"]
        assert spec["limits"] == {"nvidia.com/gpu": "8"}
        assert spec["template"]["metadata"]["labels"] == {"role": "train-gpu"}
        assert spec["template"]["spec"]["taints"] == [GPU_TAINT]
        assert spec["template"]["spec"]["nodeClassRef"] == {
            "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": aws_pool["karpenter_gpu_ec2nodeclass_name"]}
        reqs = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
        assert reqs["karpenter.k8s.aws/instance-family"] == ["g5", "g6", "g6e", "p4d", "p5"]
        assert reqs["karpenter.sh/capacity-type"] == ["spot", "on-demand"]
        assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m",
                                      "budgets": [{"nodes": "10%"}]}
        nc = custom(aws_crds).get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses",
                                                        aws_pool["karpenter_gpu_ec2nodeclass_name"])["spec"]
        assert nc["amiSelectorTerms"] == [{"alias": "al2023@latest"}] and nc["role"] == "KarpenterNodeRole-train"
        assert nc["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "train"}}]
        assert nc["blockDeviceMappings"][0]["ebs"]["volumeSize"] == "200Gi"
        assert changed(ok(role(aws_pool))) == 0

    def test_check_mode_and_diff_then_a_dropped_setting_is_removed(self, aws_crds, aws_pool):
        ok(role(aws_pool))
        name = aws_pool["karpenter_gpu_nodepool_name"]
        more = {**aws_pool, "karpenter_gpu_gpu_limit": 16, "karpenter_gpu_termination_grace_period": "48h"}
        dry = ok(role(more, "--check", "--diff"))
        assert changed(dry) == 1
        assert '-    nvidia.com/gpu: "8"' in dry.stdout or "nvidia.com/gpu: '8'" in dry.stdout, dry.stdout[-3000:]
        assert "48h" in dry.stdout
        live = get_obj(aws_crds, "karpenter.sh", "nodepools", name)["spec"]
        assert live["limits"] == {"nvidia.com/gpu": "8"} and "terminationGracePeriod" not in live["template"]["spec"]

        assert changed(ok(role(more))) == 1
        live = get_obj(aws_crds, "karpenter.sh", "nodepools", name)["spec"]
        assert live["limits"] == {"nvidia.com/gpu": "16"} and live["template"]["spec"]["terminationGracePeriod"] == "48h"
        # Back to the defaults: server-side apply drops the field the role no longer renders.
        assert changed(ok(role(aws_pool))) == 1
        live = get_obj(aws_crds, "karpenter.sh", "nodepools", name)["spec"]
        assert live["limits"] == {"nvidia.com/gpu": "8"} and "terminationGracePeriod" not in live["template"]["spec"]

    def test_karpenters_cel_rules_reject_a_restricted_tag_with_their_message(self, aws_crds, aws_pool):
        res = role({**aws_pool, "karpenter_gpu_ec2_tags": {"kubernetes.io/cluster/train": "owned"}})
        assert res.returncode != 0
        assert "tag contains a restricted tag matching kubernetes.io/cluster/" in res.stdout, res.stdout[-3000:]
        assert get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"]) is None

    def test_preflight_names_the_settings_before_any_write(self, aws_crds, aws_pool):
        res = role({**aws_pool, "karpenter_gpu_instance_profile": "gpu-nodes", "karpenter_gpu_ami_alias": "al2023"})
        assert res.returncode != 0
        assert "exactly one of node_role='KarpenterNodeRole-train' and instance_profile='gpu-nodes'" in res.stdout
        assert "ami_alias='al2023'" in res.stdout
        res = role({**aws_pool, "karpenter_gpu_cluster_name": ""})
        assert res.returncode != 0 and "empty now: karpenter.sh/discovery, karpenter.sh/discovery" in res.stdout
        assert get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"]) is None

    def test_absent_deletes_both_and_then_changes_nothing(self, aws_crds, aws_pool):
        ok(role(aws_pool))
        gone = {**aws_pool, "karpenter_gpu_state": "absent"}
        assert changed(ok(role(gone))) == 1
        assert get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"]) is None
        assert get_obj(aws_crds, "karpenter.k8s.aws", "ec2nodeclasses", aws_pool["karpenter_gpu_ec2nodeclass_name"]) is None
        assert changed(ok(role(gone))) == 0


def test_missing_crds_fail_with_the_fix(core):
    if get_obj(core.api_client, "apiextensions.k8s.io", "customresourcedefinitions", "nodepools.karpenter.sh"):
        pytest.skip("Karpenter's CRDs are installed in the lab right now")
    res = role({"karpenter_gpu_cluster_name": "train", "karpenter_gpu_node_role": "r"})
    assert res.returncode != 0
    assert "the cluster has no CRD ec2nodeclasses.karpenter.k8s.aws, nodepools.karpenter.sh" in res.stdout
