"""lab/lab.sh scale, which bench/site_scale.py's extra GPU hosts come from: `scale 3 --from-hosts` adds
k8sgpu-lab-gpu-3, a copy of gpu-1 as it is then (Debian 12, a GPU host, what was written on gpu-1 kept), with a
Ready kwok Node of 8 GPUs; `scale 2` removes the container, its volume, the Node and the copied image again.
"""
from __future__ import annotations

import subprocess

import pytest
from kubernetes import client

from conftest import GPU_NODES, LAB_NAME, ROOT, node_sh, run

EXTRA = f"{LAB_NAME}-gpu-3"
MARKER = "/etc/k8sgpu-lab-scale-test"
COPY_TAG = "k8sgpu-lab/gpu-host-copy"


def lab(*args: str) -> None:
    cp = run([str(ROOT / "lab/lab.sh"), *args])
    assert cp.returncode == 0, f"lab.sh {' '.join(args)}: {cp.stdout[-2000:]}{cp.stderr[-2000:]}"


def copies() -> list[str]:
    return subprocess.run(["docker", "image", "ls", "-q", COPY_TAG], capture_output=True, text=True,
                          check=True).stdout.split()


def volumes() -> set[str]:
    return set(subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True,
                              check=True).stdout.split())


def test_scale_from_hosts_copies_gpu_1_and_scale_2_removes_everything(core: client.CoreV1Api):
    before = volumes()
    node_sh(GPU_NODES[0], f"echo written-on-gpu-1 > {MARKER}")
    try:
        lab("scale", "3", "--from-hosts")
        # The copy: gpu-1's files, Debian 12, a GPU host as gpu-1 is (eight H100s in sysfs, Docker running).
        assert node_sh(EXTRA, f"cat {MARKER}").strip() == "written-on-gpu-1"
        assert node_sh(EXTRA, "hostname").strip() == EXTRA
        assert node_sh(EXTRA, ". /etc/os-release; echo $VERSION_ID").strip() == "12"
        assert node_sh(EXTRA, "cat /sys/bus/pci/devices/*/device").split().count("0x2330") == 8
        # Docker starts on the copy (its /var/lib/docker in an anonymous volume: dockerd renames directories there).
        assert node_sh(EXTRA, "systemctl is-active docker containerd").split() == ["active", "active"]
        assert len(volumes() - before) == 1
        node = core.read_node(EXTRA)
        assert node.metadata.labels.get("k8sgpu.lab/scale-extra") == "true", node.metadata.labels
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        # Only gpu-3's suite was copied (gpu-2, Debian 13, would serve gpu-4).
        assert len(copies()) == 1
    finally:
        node_sh(GPU_NODES[0], f"rm -f {MARKER}", check=False)
        lab("scale", "2")
    assert subprocess.run(["docker", "inspect", EXTRA], capture_output=True, check=False).returncode != 0
    with pytest.raises(client.ApiException) as gone:
        core.read_node(EXTRA)
    assert gone.value.status == 404
    assert not copies()
    assert volumes() == before  # the copy's volume went with it
