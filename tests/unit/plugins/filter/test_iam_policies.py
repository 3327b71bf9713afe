"""The filters karpenter_iam_policy and cluster_autoscaler_iam_policy give the policy documents playbooks/eks.yml gave
before they existed (issue 35 item 4): tests/unit/fixtures/iam_policies/before_issue_35.json holds what the removed
template roles/karpenter/templates/iam-policy.json.j2 and roles/cluster_autoscaler/files/iam-policy.json with
CLUSTER_NAME replaced gave, for the default partition and inputs and for aws-cn and aws-us-gov with other names, a
queue and none. Equal as parsed JSON and, for Karpenter, as the text the template wrote (json.dumps, key order)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter import cluster_autoscaler_iam_policy as ca_filter
from ansible_collections.k8sgpu.nvidia.plugins.filter.cluster_autoscaler_iam_policy import cluster_autoscaler_iam_policy
from ansible_collections.k8sgpu.nvidia.plugins.filter.karpenter_iam_policy import karpenter_iam_policy
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._iam_policies import CLUSTER_AUTOSCALER_POLICY

ROOT = Path(__file__).resolve().parents[4]
FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "iam_policies" / "before_issue_35.json").read_text())


def karpenter(inputs: dict) -> dict:
    """The filter called as playbooks/eks.yml calls it, with the template's variables."""
    return karpenter_iam_policy(inputs["cluster"], account_id=inputs["account_id"], region=inputs["region"],
                                node_role=inputs["node_role"], partition=inputs["partition"], queue=inputs["queue"])


def test_the_frozen_cases_cover_the_partitions_and_the_queue():
    cases = [c["inputs"] for c in FROZEN["karpenter"]]
    assert {c["partition"] for c in cases} == {"aws", "aws-cn", "aws-us-gov"}
    assert any(c["queue"] for c in cases) and any(not c["queue"] for c in cases)
    assert any(c["region"] == "" for c in cases)  # eks.yml's value when k8sgpu_aws_region is unset
    assert len(FROZEN["cluster_autoscaler"]) >= 3


@pytest.mark.parametrize("case", FROZEN["karpenter"], ids=lambda c: f"{c['inputs']['partition']}-{c['inputs']['cluster']}")
def test_karpenter_policy_is_the_templates(case):
    got = karpenter(case["inputs"])
    assert got == case["policy"]
    assert json.dumps(got) == json.dumps(case["policy"])  # the same text, key order included


@pytest.mark.parametrize("case", FROZEN["cluster_autoscaler"], ids=lambda c: c["inputs"]["cluster"])
def test_cluster_autoscaler_policy_is_the_roles_file(case):
    got = cluster_autoscaler_iam_policy(case["inputs"]["cluster"])
    assert got == case["policy"]
    assert json.dumps(got) == json.dumps(case["policy"])


def test_cluster_autoscaler_policy_is_the_document_of_the_roles_file():
    """The filter reads no file (issue 48 item 5): its document is module_utils/_iam_policies.py's, the same as the
    role's files/iam-policy.json, which users read."""
    path = ROOT / "roles" / "cluster_autoscaler" / "files" / "iam-policy.json"
    assert json.loads(path.read_text()) == CLUSTER_AUTOSCALER_POLICY
    assert "CLUSTER_NAME" in path.read_text()
    assert "CLUSTER_NAME" not in json.dumps(cluster_autoscaler_iam_policy("train"))
    assert not hasattr(ca_filter, "POLICY_FILE") and "open(" not in Path(ca_filter.__file__).read_text()
    cluster_autoscaler_iam_policy("a")["Statement"][1]["Condition"]["StringEquals"]["x"] = "y"
    assert "x" not in cluster_autoscaler_iam_policy("a")["Statement"][1]["Condition"]["StringEquals"]


def test_karpenter_queue_statement_only_with_a_queue():
    base = {"account_id": "123456789012", "region": "us-east-1", "node_role": "nodes"}
    without = karpenter_iam_policy("train", **base)
    with_queue = karpenter_iam_policy("train", queue="train-q", **base)
    assert [s["Sid"] for s in with_queue["Statement"]] == [s["Sid"] for s in without["Statement"]] + [
        "AllowInterruptionQueueActions"]
    assert with_queue["Statement"][-1]["Resource"] == "arn:aws:sqs:us-east-1:123456789012:train-q"
    assert without == karpenter_iam_policy("train", partition="aws", queue="", **base)  # the defaults


def test_statements_share_no_objects():
    """Each call and each statement its own dicts: a caller changing one changes nothing else."""
    a = karpenter_iam_policy("train", account_id="1", region="r", node_role="n")
    a["Statement"][1]["Condition"]["StringLike"]["x"] = "y"
    a["Statement"][2]["Condition"]["StringEquals"]["x"] = "y"
    b = karpenter_iam_policy("train", account_id="1", region="r", node_role="n")
    assert "x" not in b["Statement"][1]["Condition"]["StringLike"]
    assert all("x" not in s.get("Condition", {}).get(k, {}) for s in a["Statement"][3:] for k in ("StringLike", "StringEquals"))


@pytest.mark.parametrize("hostile", ['x", "Effect": "Deny', "x\n---\nevil: 1", "'\"}, {\"evil\": 1}: [{"])
def test_names_cannot_change_the_documents_structure(hostile):
    def shape(value):
        if isinstance(value, dict):
            return {k.replace(hostile, "N"): shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__

    assert shape(cluster_autoscaler_iam_policy(hostile)) == shape(cluster_autoscaler_iam_policy("N"))
    args = {"account_id": "1", "region": "r", "node_role": "n"}
    assert shape(karpenter_iam_policy(hostile, **args)) == shape(karpenter_iam_policy("N", **args))


@pytest.mark.parametrize("bad", ["", None, 3, ["train"]])
def test_cluster_autoscaler_needs_a_name(bad):
    with pytest.raises(AnsibleFilterError, match="expects the cluster's name"):
        cluster_autoscaler_iam_policy(bad)


def test_karpenter_names_the_missing_inputs():
    with pytest.raises(AnsibleFilterError, match="account_id, node_role required"):
        karpenter_iam_policy("train", region="us-east-1")
