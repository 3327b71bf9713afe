# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the collection: the cluster-autoscaler's IAM policy as data, for the filter
cluster_autoscaler_iam_policy. roles/cluster_autoscaler/files/iam-policy.json is the same document for users who
make the role themselves (tests/unit/plugins/filter/test_iam_policies.py keeps the two equal)."""
from __future__ import annotations

import copy
from typing import Any

PLACEHOLDER = "CLUSTER_NAME"

# The cluster-autoscaler's reads on *, and its two writes only on the Auto Scaling groups tagged for the cluster.
CLUSTER_AUTOSCALER_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations",
                "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags",
                "ec2:DescribeImages",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions",
                "ec2:GetInstanceTypesFromInstanceRequirements",
                "eks:DescribeNodegroup",
            ],
            "Resource": ["*"],
        },
        {
            "Effect": "Allow",
            "Action": [
                "autoscaling:SetDesiredCapacity",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
            ],
            "Resource": ["*"],
            "Condition": {
                "StringEquals": {
                    "aws:ResourceTag/k8s.io/cluster-autoscaler/enabled": "true",
                    "aws:ResourceTag/k8s.io/cluster-autoscaler/CLUSTER_NAME": "owned",
                },
            },
        },
    ],
}


def _replace(value: Any, cluster: str) -> Any:
    if isinstance(value, dict):
        return {_replace(k, cluster): _replace(v, cluster) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, cluster) for v in value]
    if isinstance(value, str):
        return value.replace(PLACEHOLDER, cluster)
    return value


def cluster_autoscaler_policy(cluster: str) -> dict:
    """The policy for one cluster: the placeholder replaced in the parsed document's keys and values, so the name
    cannot change its structure; a new document each call."""
    return _replace(copy.deepcopy(CLUSTER_AUTOSCALER_POLICY), cluster)
