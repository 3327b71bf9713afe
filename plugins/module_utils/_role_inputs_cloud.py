# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the collection: the declared syntax of the cloud GPU pool roles' inputs (eks_gpu_pool, gke_gpu_pool),
for module_utils/_role_inputs.py to merge into its tables (SYNTAX_BY_NAME, FREE_TEXT). Data only: no import of
_role_inputs, so it can import this module."""
from __future__ import annotations

# By the full name: an IAM role name, as the shared k8sgpu_eks_pod_identity_role is declared.
SYNTAX_BY_NAME = {
    "eks_gpu_pool_pod_identity_role": "iam_name",
}

# Mappings handed as they are to one of the collection's modules, whose argument spec checks them (types, choices,
# unknown keys) before any call to AWS or Google; the roles' preflight checks what goes together.
FREE_TEXT = {
    "eks_gpu_pool_cluster": "options of the module eks_cluster, checked by its argument spec before any AWS call",
    "eks_gpu_pool_nodegroup": "options of the module eks_nodegroup, checked by its argument spec before any AWS call",
    "gke_gpu_pool_cluster": "options of the module gke_cluster, checked by its argument spec before any API call",
    "gke_gpu_pool_node_pool": "options of the module gke_node_pool, checked by its argument spec before any API call",
}
