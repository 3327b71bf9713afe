"""playbooks/eks.yml's Pod Identity steps (k8sgpu_eks_pod_identity: true) against moto, for either controller: the
controller's IAM role trusted by pods.eks.amazonaws.com, its inline policy, the association with its ServiceAccount;
check mode makes nothing, a second run changes nothing, the teardown removes the association and that role and no
other role.

The inline policy IAM holds is compared with tests/unit/fixtures/iam_policies/before_issue_35.json: what the playbook
gave amazon.aws.iam_policy before the policies became the filters karpenter_iam_policy and
cluster_autoscaler_iam_policy (issue 35), for this test's clusters.

Only the tagged steps run (--tags eks_pod_identity; the teardown from its Pod Identity association on): the
controllers' Kubernetes objects need an API server, which moto's cluster has not (the lab's tests run the whole
playbook). What this does not prove: that IAM accepts the policy (moto checks little of it).
"""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from test_eks_playbook_cluster import play, roles
from test_eks_pod_identity import pod_identity_associations

FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "iam_policies" / "before_issue_35.json").read_text())
TEARDOWN_FROM = "Teardown - the controller's Pod Identity association"


def frozen(kind: str, cluster: str) -> dict:
    [case] = [c for c in FROZEN[kind] if c["inputs"]["cluster"] == cluster]
    return case["policy"]


CONTROLLERS = {
    "cluster_autoscaler": {
        "cluster": "pi-ca", "policy_name": "ClusterAutoscalerPolicy", "sa": ("kube-system", "cluster-autoscaler"),
        "extra": {"k8sgpu_eks_provisioner": "nodegroup", "k8sgpu_eks_nodegroup": {"name": "gpu"},
                  "k8sgpu_eks_cluster_autoscaler": True}},
    "karpenter": {
        "cluster": "pi-karpenter", "policy_name": "KarpenterControllerPolicy", "sa": ("kube-system", "karpenter"),
        "extra": {"k8sgpu_eks_provisioner": "karpenter", "k8sgpu_eks_karpenter_install": True}},
}


@pytest.mark.parametrize("kind", sorted(CONTROLLERS))
def test_eks_playbook_pod_identity_role_policy_association_and_back(endpoint, aws, network, kind):
    c = CONTROLLERS[kind]
    name, role = c["cluster"], f"{c['cluster']}-{kind.replace('_', '-')}"
    aws["eks"].create_cluster(name=name, roleArn=network["role"], resourcesVpcConfig={"subnetIds": network["subnets"]})
    extra = {"k8sgpu_eks_cluster_name": name, "k8sgpu_eks_pod_identity": True, **c["extra"]}
    before = roles(aws)

    # Check mode: the role and the association are planned (the policy needs the role's ARN), nothing is made.
    rc, out, stats = play(endpoint, extra, "--check", "--tags", "eks_pod_identity")
    assert rc == 0 and stats["changed"] == 2, out[-5000:]
    assert roles(aws) == before and pod_identity_associations(aws, name) == []

    rc, out, stats = play(endpoint, extra, "--tags", "eks_pod_identity")
    assert rc == 0 and stats["changed"] == 3, out[-5000:]
    assert roles(aws) == before | {role}
    got = aws["iam"].get_role(RoleName=role)["Role"]
    assert got["AssumeRolePolicyDocument"] == {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
         "Action": ["sts:AssumeRole", "sts:TagSession"]}]}
    assert aws["iam"].list_role_policies(RoleName=role)["PolicyNames"] == [c["policy_name"]]
    policy = aws["iam"].get_role_policy(RoleName=role, PolicyName=c["policy_name"])["PolicyDocument"]
    assert policy == frozen(kind, name)
    assert aws["iam"].list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []
    [assoc] = pod_identity_associations(aws, name)
    assert (assoc["namespace"], assoc["serviceAccount"], assoc["roleArn"]) == (*c["sa"], got["Arn"])

    rc, out, stats = play(endpoint, extra, "--tags", "eks_pod_identity")
    assert rc == 0 and stats["changed"] == 0, out[-5000:]
    rc, out, stats = play(endpoint, extra, "--check", "--tags", "eks_pod_identity")
    assert rc == 0 and stats["changed"] == 0, out[-5000:]

    # The teardown's Pod Identity steps: in check mode planned only, then the association and the controller's
    # role (its inline policy with it), and no other role; the cluster (not the playbook's) stays.
    absent = ("-e", "k8sgpu_eks_state=absent", "--start-at-task", TEARDOWN_FROM)
    rc, out, stats = play(endpoint, extra, "--check", *absent)
    assert rc == 0 and stats["changed"] == 2, out[-5000:]
    assert role in roles(aws) and len(pod_identity_associations(aws, name)) == 1
    rc, out, stats = play(endpoint, extra, *absent)
    assert rc == 0 and stats["changed"] == 2, out[-5000:]
    assert out.index(TEARDOWN_FROM) < out.index("Teardown - the controller's IAM role")
    assert roles(aws) == before and pod_identity_associations(aws, name) == []
    assert name in aws["eks"].list_clusters()["clusters"]
    rc, out, stats = play(endpoint, extra, *absent)
    assert rc == 0 and stats["changed"] == 0, out[-5000:]
