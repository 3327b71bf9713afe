# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter cluster_autoscaler_iam_policy: the cluster_autoscaler role's IAM policy (module_utils/_iam_policies.py, the
document of the role's files/iam-policy.json) for one cluster; the role eks_gpu_pool gives it to the
cluster-autoscaler's Pod Identity role."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: cluster_autoscaler_iam_policy
short_description: The IAM policy of the cluster-autoscaler, scoped to one EKS cluster
version_added: 1.1.0
description:
  - The policy document of the cluster-autoscaler the C(k8sgpu.nvidia.cluster_autoscaler) role installs (the same
    as the role's C(files/iam-policy.json)) with the placeholder C(CLUSTER_NAME) replaced by the cluster's name - the
    Auto Scaling, EC2 and EKS reads it needs on C(*), and C(autoscaling:SetDesiredCapacity) and
    C(autoscaling:TerminateInstanceInAutoScalingGroup) only on the Auto Scaling groups tagged
    C(k8s.io/cluster-autoscaler/enabled) V(true) and C(k8s.io/cluster-autoscaler/<cluster>) V(owned) (those of the
    cluster's nodegroups).
  - The role C(k8sgpu.nvidia.eks_gpu_pool) (C(playbooks/eks.yml)) puts it inline in the cluster-autoscaler's EKS Pod Identity role
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

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._iam_policies import cluster_autoscaler_policy


def cluster_autoscaler_iam_policy(cluster: Any) -> dict:
    if not isinstance(cluster, str) or not cluster:
        raise AnsibleFilterError(f"cluster_autoscaler_iam_policy: expects the cluster's name, got {cluster!r}")
    return cluster_autoscaler_policy(cluster)


class FilterModule:
    def filters(self) -> dict:
        return {"cluster_autoscaler_iam_policy": cluster_autoscaler_iam_policy}
