# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter gfd_labels of the node_labels role; the logic is in module_utils/_gfd_labels.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: gfd_labels
version_added: 1.0.0
short_description: Node labels in GPU Feature Discovery's names from a host's GPU facts
description:
  - Turns the facts of M(k8sgpu.nvidia.gpu_facts) (C(nvidia_gpus), C(nvidia_driver_version),
    C(nvidia_cuda_driver_version)) into the labels GPU Feature Discovery would set, without running it.
  - C(nvidia.com/gpu.count), C(nvidia.com/gpu.product) (spaces become C(-)), C(nvidia.com/gpu.memory) (MiB),
    C(nvidia.com/gpu.compute.major/minor), C(nvidia.com/cuda.driver-version.full/major/minor/revision)
    and C(nvidia.com/cuda.runtime-version.full/major/minor). Product, memory and compute capability are the first GPU's.
  - A host without GPUs gives an empty dict.
positional: _input
options:
  _input:
    description: A host's C(ansible_facts).
    type: dict
    required: true
"""

EXAMPLES = r"""
labels: "{{ hostvars['gpu-01'].ansible_facts | k8sgpu.nvidia.gfd_labels }}"
# {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559", ...}
"""

RETURN = r"""
_value:
  description: Label keys to string values.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gfd_labels


def gfd_labels(facts):
    """module_utils/_gfd_labels.py's gfd_labels, its errors as the filter's."""
    try:
        return _gfd_labels.gfd_labels(facts)
    except _gfd_labels.GfdLabelsError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"gfd_labels": gfd_labels}
