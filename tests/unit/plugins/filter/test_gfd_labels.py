from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.gfd_labels import gfd_labels

# Values as captured on the real H100 (../shared/fixtures/h100/query-gpu.csv, nvidia-smi-q.xml).
H100 = {
    "nvidia_gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "compute_capability": "9.0"}],
    "nvidia_driver_version": "580.159.04",
    "nvidia_cuda_driver_version": "13.0",
}


def test_h100_labels():
    assert gfd_labels(H100) == {
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.full": "580.159.04",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "159",
        "nvidia.com/cuda.driver-version.revision": "04",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
    }


def test_count_and_first_gpu():
    facts = {"nvidia_gpus": [{"name": "NVIDIA A100-SXM4-80GB (MIG)"}] * 8}
    assert gfd_labels(facts) == {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG"}


def test_no_gpus():
    assert gfd_labels({"nvidia_gpus": []}) == {}
    assert gfd_labels({}) == {}


def test_not_facts():
    with pytest.raises(AnsibleFilterError, match="ansible_facts"):
        gfd_labels(["x"])
