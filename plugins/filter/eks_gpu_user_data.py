# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter eks_gpu_user_data: the user data that isolates GPUs on the EKS nodes of playbooks/eks.yml (the managed
nodegroup's launch template, the Karpenter EC2NodeClass); the logic is in module_utils/_eks_user_data.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: eks_gpu_user_data
version_added: 1.1.0
short_description: User data that isolates GPUs on EKS GPU nodes (NVIDIA Container Toolkit settings)
description:
  - The user data of the nodes C(playbooks/eks.yml) makes (the managed nodegroup's launch template, the Karpenter
    C(EC2NodeClass) C(spec.userData)), so that an unprivileged container gets GPUs only through the NVIDIA device
    plugin's C(volume-mounts) list strategy, as the M(k8sgpu.nvidia.container_toolkit) role does on bare-metal
    hosts with C(container_toolkit_isolate_gpus).
  - AL2023 (an C(AL2023_*_NVIDIA) AMI type or a C(al2023@...) Karpenter alias) - a MIME multi-part document with
    one C(text/x-shellscript) part that runs
    C(nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
    --set=accept-nvidia-visible-devices-as-volume-mounts=true
    --set=accept-nvidia-visible-devices-envvar-when-unprivileged=false) before nodeadm starts the kubelet, checks
    both lines in the file, and otherwise masks C(kubelet.service) (the node never joins). EKS and Karpenter merge
    their own C(NodeConfig) part into it.
  - Bottlerocket (C(BOTTLEROCKET_*_NVIDIA), C(bottlerocket@...)) - TOML settings
    C(settings.nvidia-container-runtime.visible-devices-as-volume-mounts = true) and
    C(visible-devices-envvar-when-unprivileged = false) (Bottlerocket's defaults, made explicit).
  - Any other AMI type or alias fails naming it. The text is the same on every call (a fixed MIME boundary).
positional: _input
options:
  _input:
    description: An EKS AMI type (C(AL2023_x86_64_NVIDIA)) or a Karpenter C(amiSelectorTerms) alias (C(al2023@latest)).
    type: str
    required: true
"""

EXAMPLES = r"""
user_data: "{{ 'AL2023_x86_64_NVIDIA' | k8sgpu.nvidia.eks_gpu_user_data | b64encode }}"
"""

RETURN = r"""
_value:
  description: The user data as text (launch templates take it base64-encoded; an EC2NodeClass as text).
  type: str
"""

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
