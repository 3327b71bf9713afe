# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter eks_gpu_user_data: the user data that isolates GPUs on the EKS nodes of playbooks/eks.yml (the managed
nodegroup's launch template, the Karpenter EC2NodeClass); the logic is in module_utils/_eks_user_data.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_user_data


def eks_gpu_user_data(ami: Any) -> str:
    try:
        return _eks_user_data.gpu_user_data(ami)
    except _eks_user_data.UserDataError as exc:
        raise AnsibleFilterError(f"eks_gpu_user_data: {exc}") from None


class FilterModule:
    def filters(self) -> dict:
        return {"eks_gpu_user_data": eks_gpu_user_data}
