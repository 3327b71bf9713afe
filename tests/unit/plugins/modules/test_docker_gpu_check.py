"""docker_gpu_check: which image the Docker GPU check runs, and that it never pulls unless asked (issue 10, defect 9).

The real Docker path (no local image: a clear failure and no pull) is in tests/lab/test_container_toolkit_site.py.
"""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.modules.docker_gpu_check import choose_image, command, gpu_lines

SITE = "registry.site.example/cuda-base:12.4"
GUIDE = "ubuntu:24.04"


def local_images(*names: str):
    return lambda name: name in names


@pytest.mark.parametrize(("image", "pull", "local", "expected"), [
    # The site's image: run when local, or when pulls are allowed; never the guide's instead.
    (SITE, False, (SITE,), (SITE, True, "")),
    (SITE, False, (GUIDE,), ("", False, "image_not_local")),
    (SITE, True, (), (SITE, False, "")),
    # No image set: the guide's, only when it is already local (or pulls are allowed).
    ("", False, (GUIDE,), (GUIDE, True, "")),
    ("", False, (), ("", False, "no_image")),
    ("", False, (SITE,), ("", False, "no_image")),
    ("", True, (), (GUIDE, False, "")),
])
def test_choose_image(image, pull, local, expected):
    assert choose_image(image, GUIDE, pull, local_images(*local)) == expected


def test_command_pulls_only_when_asked():
    expected = ["docker", "run", "--rm", "--pull", "never", "--gpus", "all", SITE, "nvidia-smi", "-L"]
    assert command("docker", SITE, False) == expected
    assert command("/usr/bin/docker", SITE, True)[3:5] == ["--pull", "missing"]


def test_gpu_lines():
    out = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1a)\n  GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-77e0)\n"
           "No devices were found\nMIG 1g.10gb Device 0: (UUID: MIG-1)\n")
    assert gpu_lines(out) == ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1a)", "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-77e0)"]
    assert gpu_lines("No devices were found\n") == []
