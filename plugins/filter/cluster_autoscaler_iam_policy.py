# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter cluster_autoscaler_iam_policy: the cluster_autoscaler role's IAM policy (its files/iam-policy.json) for one
cluster; playbooks/eks.yml gives it to the cluster-autoscaler's Pod Identity role."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: cluster_autoscaler_iam_policy
short_description: The IAM policy of the cluster-autoscaler, scoped to one EKS cluster
version_added: 1.1.0
description:
  - The policy document of the cluster-autoscaler the C(k8sgpu.nvidia.cluster_autoscaler) role installs, the
    role's C(files/iam-policy.json) with the placeholder C(CLUSTER_NAME) replaced by the cluster's name - the
    Auto Scaling, EC2 and EKS reads it needs on C(*), and C(autoscaling:SetDesiredCapacity) and
    C(autoscaling:TerminateInstanceInAutoScalingGroup) only on the Auto Scaling groups tagged
    C(k8s.io/cluster-autoscaler/enabled) V(true) and C(k8s.io/cluster-autoscaler/<cluster>) V(owned) (those of the
    cluster's nodegroups).
  - C(playbooks/eks.yml) puts it inline in the cluster-autoscaler's EKS Pod Identity role
    (C(k8sgpu_eks_pod_identity)); give it to an IRSA role (C(cluster_autoscaler_irsa_role_arn)) yourself.
  - The name replaces the placeholder in the parsed document's keys and values, so it cannot change the document's
    structure.
positional: _input
options:
  _input:
    description: The EKS cluster's name.
    type: str
    required: true
"""

EXAMPLES = r"""
policy_json: "{{ 'train' | k8sgpu.nvidia.cluster_autoscaler_iam_policy }}"
"""

RETURN = r"""
_value:
  description: The policy document (C(Version) and C(Statement)), as amazon.aws.iam_policy's C(policy_json) takes it.
  type: dict
"""

import json
import os
from typing import Any

from ansible.errors import AnsibleFilterError

# The role's own file (the collection's roles/ beside plugins/), which the role's README points to as well.
POLICY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "roles",
                           "cluster_autoscaler", "files", "iam-policy.json")
PLACEHOLDER = "CLUSTER_NAME"


def _replace(value: Any, cluster: str) -> Any:
    if isinstance(value, dict):
        return {_replace(k, cluster): _replace(v, cluster) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, cluster) for v in value]
    if isinstance(value, str):
        return value.replace(PLACEHOLDER, cluster)
    return value


def cluster_autoscaler_iam_policy(cluster: Any) -> dict:
    if not isinstance(cluster, str) or not cluster:
        raise AnsibleFilterError(f"cluster_autoscaler_iam_policy: expects the cluster's name, got {cluster!r}")
    try:
        with open(POLICY_FILE, encoding="utf-8") as f:
            policy = json.load(f)
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"cluster_autoscaler_iam_policy: cannot read {os.path.normpath(POLICY_FILE)}: {exc}") from None
    return _replace(policy, cluster)


class FilterModule:
    def filters(self) -> dict:
        return {"cluster_autoscaler_iam_policy": cluster_autoscaler_iam_policy}
