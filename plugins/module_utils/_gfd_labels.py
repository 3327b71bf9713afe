# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters gfd_labels and node_labels_by_node of the node_labels role).

Node labels in GPU Feature Discovery's names, from the gpu_facts module's facts."""
from __future__ import annotations

import re


class GfdLabelsError(ValueError):
    """Facts that are not a host's facts."""


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
        raise GfdLabelsError(f"gfd_labels expects a host's ansible_facts (a dict), got {type(facts).__name__}")
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
