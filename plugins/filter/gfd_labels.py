# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node labels in GPU Feature Discovery's names, from the gpu_facts module's facts."""
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

import re

from ansible.errors import AnsibleFilterError

_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")


def _label_value(text: str) -> str:
    # GFD replaces spaces with '-'; also drop anything else a label value cannot hold.
    return _INVALID.sub("-", str(text).strip()).strip("-_.")[:63].rstrip("-_.")


def gfd_labels(facts: dict) -> dict:
    """Return GFD-style labels (nvidia.com/gpu.product, ...) for one host's facts.

    ``facts`` is the host's ansible_facts after k8sgpu.nvidia.gpu_facts: the list
    ``nvidia_gpus`` (name, memory_total_mib, compute_capability per GPU),
    ``nvidia_driver_version`` and ``nvidia_cuda_driver_version``. Hosts without
    GPUs give no labels. Product, memory and compute capability come from the
    first GPU, as in GPU Feature Discovery.
    """
    if not isinstance(facts, dict):
        raise AnsibleFilterError(f"gfd_labels expects a host's ansible_facts (a dict), got {type(facts).__name__}")
    gpus = facts.get("nvidia_gpus") or []
    if not gpus:
        return {}
    first = gpus[0]
    labels = {"nvidia.com/gpu.count": str(len(gpus))}
    if first.get("name"):
        labels["nvidia.com/gpu.product"] = _label_value(first["name"])
    if first.get("memory_total_mib") is not None:
        labels["nvidia.com/gpu.memory"] = str(int(first["memory_total_mib"]))
    cc = str(first.get("compute_capability") or "")
    if re.fullmatch(r"\d+\.\d+", cc):
        labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"] = cc.split(".")
    driver = str(facts.get("nvidia_driver_version") or "")
    parts = driver.split(".")
    if len(parts) >= 2 and all(p.isdigit() for p in parts):
        labels["nvidia.com/cuda.driver-version.full"] = driver
        labels["nvidia.com/cuda.driver-version.major"] = parts[0]
        labels["nvidia.com/cuda.driver-version.minor"] = parts[1]
        if len(parts) > 2:
            labels["nvidia.com/cuda.driver-version.revision"] = parts[2]
    cuda = str(facts.get("nvidia_cuda_driver_version") or "")
    if re.fullmatch(r"\d+\.\d+", cuda):
        labels["nvidia.com/cuda.runtime-version.full"] = cuda
        labels["nvidia.com/cuda.runtime-version.major"], labels["nvidia.com/cuda.runtime-version.minor"] = cuda.split(".")
    return labels


class FilterModule:
    def filters(self) -> dict:
        return {"gfd_labels": gfd_labels}
