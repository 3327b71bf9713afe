# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter karpenter_iam_policy: the IAM policy of the karpenter role's controller (Karpenter v1's
KarpenterControllerPolicy), scoped to one cluster; playbooks/eks.yml gives it to the controller's Pod Identity role."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: karpenter_iam_policy
short_description: The IAM policy of Karpenter's controller, scoped to one EKS cluster
version_added: 1.1.0
description:
  - The policy document of the controller the C(k8sgpu.nvidia.karpenter) role installs - Karpenter v1's
    C(KarpenterControllerPolicy) (its getting-started CloudFormation template). C(playbooks/eks.yml) puts it inline
    in the controller's EKS Pod Identity role (C(k8sgpu_eks_pod_identity)); give it to an IRSA role
    (C(karpenter_irsa_role_arn)) yourself.
  - Instances, fleets, launch templates and instance profiles only with the cluster's tags
    (C(kubernetes.io/cluster/<cluster>) V(owned), C(eks:eks-cluster-name)) and a NodePool or EC2NodeClass tag; the
    EC2 reads only in O(region); C(iam:PassRole) of O(node_role) only, to EC2; C(eks:DescribeCluster) of the cluster
    only; with O(queue), the interruption queue's C(sqs:DeleteMessage), C(sqs:GetQueueUrl), C(sqs:ReceiveMessage).
  - Every value is put into the ARNs and conditions as text, unchecked.
positional: _input
options:
  _input:
    description: The EKS cluster's name.
    type: str
    required: true
  account_id:
    description: The AWS account of the cluster, the node role and the queue (12 digits).
    type: str
    required: true
  region:
    description: The cluster's region (C(us-east-1)); the ARNs' region and the C(aws:RequestedRegion) condition.
    type: str
    required: true
  node_role:
    description: The name (not the ARN) of the nodes' IAM role, the only role the controller may pass to EC2.
    type: str
    required: true
  partition:
    description: The AWS partition of the ARNs (V(aws), V(aws-cn), V(aws-us-gov)).
    type: str
    default: aws
  queue:
    description: The SQS queue of interruption events (C(karpenter_interruption_queue)); empty, no queue statement.
    type: str
    default: ""
"""

EXAMPLES = r"""
policy_json: >-
  {{ 'train' | k8sgpu.nvidia.karpenter_iam_policy(account_id='123456789012', region='us-east-1',
                                                  node_role='KarpenterNodeRole-train',
                                                  queue=karpenter_interruption_queue) }}
"""

RETURN = r"""
_value:
  description: The policy document (C(Version) and C(Statement)), as amazon.aws.iam_policy's C(policy_json) takes it.
  type: dict
"""

from typing import Any

from ansible.errors import AnsibleFilterError


def karpenter_iam_policy(cluster: Any, account_id: Any = None, region: Any = None, node_role: Any = None,
                         partition: Any = "aws", queue: Any = "") -> dict:
    missing = [n for n, v in (("account_id", account_id), ("region", region), ("node_role", node_role)) if v is None]
    if missing:
        raise AnsibleFilterError(f"karpenter_iam_policy: {', '.join(missing)} required")
    cluster, account_id, region, node_role = str(cluster), str(account_id), str(region), str(node_role)
    arn = f"arn:{partition}"
    ec2 = f"{arn}:ec2:{region}"
    iam = f"{arn}:iam::{account_id}"
    # The cluster's tags: on what Karpenter changes (aws:ResourceTag) and on what it creates (aws:RequestTag).
    resource_owned = f"aws:ResourceTag/kubernetes.io/cluster/{cluster}"
    request_owned = {f"aws:RequestTag/kubernetes.io/cluster/{cluster}": "owned", "aws:RequestTag/eks:eks-cluster-name": cluster}

    def nodepool() -> dict:
        return {"aws:ResourceTag/karpenter.sh/nodepool": "*"}

    nodeclass = "karpenter.k8s.aws/ec2nodeclass"
    created = ["fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request"]

    def allow(sid: str, resource: Any, action: Any, condition: dict | None = None) -> dict:
        statement = {"Sid": sid, "Effect": "Allow", "Resource": resource, "Action": action}
        if condition:
            statement["Condition"] = condition
        return statement

    statements = [
        allow("AllowScopedEC2InstanceAccessActions",
              [f"{ec2}::image/*", f"{ec2}::snapshot/*", f"{ec2}:*:security-group/*", f"{ec2}:*:subnet/*",
               f"{ec2}:*:capacity-reservation/*"],
              ["ec2:RunInstances", "ec2:CreateFleet"]),
        allow("AllowScopedEC2LaunchTemplateAccessActions", f"{ec2}:*:launch-template/*",
              ["ec2:RunInstances", "ec2:CreateFleet"],
              {"StringEquals": {resource_owned: "owned"}, "StringLike": nodepool()}),
        allow("AllowScopedEC2InstanceActionsWithTags",
              [f"{ec2}:*:{kind}/*" for kind in created] + [f"{ec2}:*:capacity-reservation/*"],
              ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
              {"StringEquals": dict(request_owned), "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}),
        allow("AllowScopedResourceCreationTagging", [f"{ec2}:*:{kind}/*" for kind in created], "ec2:CreateTags",
              {"StringEquals": {**request_owned, "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
               "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}),
        allow("AllowScopedResourceTagging", f"{ec2}:*:instance/*", "ec2:CreateTags",
              {"StringEquals": {resource_owned: "owned"}, "StringLike": nodepool(),
               "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster},
               "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]}}),
        allow("AllowScopedDeletion", [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
              ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
              {"StringEquals": {resource_owned: "owned"}, "StringLike": nodepool()}),
        allow("AllowRegionalReadActions", "*",
              ["ec2:DescribeAvailabilityZones", "ec2:DescribeCapacityReservations", "ec2:DescribeImages",
               "ec2:DescribeInstances", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
               "ec2:DescribeLaunchTemplates", "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory",
               "ec2:DescribeSubnets"],
              {"StringEquals": {"aws:RequestedRegion": region}}),
        allow("AllowSSMReadActions", f"{arn}:ssm:{region}::parameter/aws/service/*", "ssm:GetParameter"),
        allow("AllowPricingReadActions", "*", "pricing:GetProducts"),
        allow("AllowPassingInstanceRole", f"{iam}:role/{node_role}", "iam:PassRole",
              {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com"]}}),
        allow("AllowScopedInstanceProfileCreationActions", f"{iam}:instance-profile/*", ["iam:CreateInstanceProfile"],
              {"StringEquals": {**request_owned, "aws:RequestTag/topology.kubernetes.io/region": region},
               "StringLike": {f"aws:RequestTag/{nodeclass}": "*"}}),
        allow("AllowScopedInstanceProfileTagActions", f"{iam}:instance-profile/*", ["iam:TagInstanceProfile"],
              {"StringEquals": {**request_owned, resource_owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": region,
                                "aws:RequestTag/topology.kubernetes.io/region": region},
               "StringLike": {f"aws:ResourceTag/{nodeclass}": "*", f"aws:RequestTag/{nodeclass}": "*"}}),
        allow("AllowScopedInstanceProfileActions", f"{iam}:instance-profile/*",
              ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
              {"StringEquals": {resource_owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": region},
               "StringLike": {f"aws:ResourceTag/{nodeclass}": "*"}}),
        allow("AllowInstanceProfileReadActions", f"{iam}:instance-profile/*", "iam:GetInstanceProfile"),
        allow("AllowUnscopedInstanceProfileListAction", "*", "iam:ListInstanceProfiles"),
        allow("AllowAPIServerEndpointDiscovery", f"{arn}:eks:{region}:{account_id}:cluster/{cluster}",
              "eks:DescribeCluster"),
    ]
    if queue:
        statements.append(allow("AllowInterruptionQueueActions", f"{arn}:sqs:{region}:{account_id}:{queue}",
                                ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"]))
    return {"Version": "2012-10-17", "Statement": statements}


class FilterModule:
    def filters(self) -> dict:
        return {"karpenter_iam_policy": karpenter_iam_policy}
