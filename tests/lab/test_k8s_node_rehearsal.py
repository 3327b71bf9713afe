"""The non-GPU half of the H100 Kubernetes node (issue 15), rehearsed on the lab host.

tests/gpu/k8s-node.sh rehearse starts, under a scratch prefix in the lab's state
directory, the same one-node cluster the GPU machine runs: etcd, kube-apiserver,
controller-manager, scheduler and kubelet v1.37 (one multi-call binary),
Debian's containerd and runc, the CNI bridge; it assembles and imports the
images (pause, the device plugin, cuda-vector-add) as the GPU run does, makes
nvidia-container-runtime containerd's default with the collection's
container_runtime_config module, restarts containerd, and runs a pod and the
cuda-vector-add Job on the real kubelet. No GPU here: the Job must fail, and its
own log must say it found no libcuda.so.1. With the toolkit's config.toml set for GPU
isolation (issue 19), the runtime's own debug log shows that a pod setting
NVIDIA_VISIBLE_DEVICES=all gets nothing and a pod with the device plugin's mount asks
for exactly the mounted GPU. The script stops and removes all of
it (the fixture checks nothing of it is left).

The bundle comes from lab/pack-k8s-node.sh (cached by version: seconds when
built, about 10 minutes cold on 2 cores).
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import LAB_STATE, ROOT

PREFIX = LAB_STATE / "k8s-node"


def _leftovers() -> list[str]:
    found = []
    mounts = Path("/proc/mounts").read_text(encoding="utf-8")
    found += [line.split()[1] for line in mounts.splitlines() if str(PREFIX) in line]
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    found += [line.strip() for line in ps.splitlines() if str(PREFIX) in line]
    found += [str(p) for p in Path("/sys/fs/cgroup").glob("*/k8sgpu-node")] + [str(p) for p in Path("/sys/fs/cgroup").glob("k8sgpu-node")]
    return found


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the rehearsal runs a kubelet and containerd: run the lab tests as root")
    pack = subprocess.run([str(ROOT / "lab/pack-k8s-node.sh"), "all"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, check=False)
    assert pack.returncode == 0, f"lab/pack-k8s-node.sh failed:\n{pack.stderr[-3000:]}"
    out = tmp_path_factory.mktemp("k8s-node")
    env = {**os.environ, "OUT": str(out), "K8SGPU_LAB_STATE": str(LAB_STATE), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run([str(ROOT / "tests/gpu/k8s-node.sh"), "rehearse"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=420, check=False)
    finally:
        # The script stops everything on exit; on a timeout it was killed first.
        if _leftovers():
            subprocess.run([str(ROOT / "tests/gpu/k8s-node.sh"), "down"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    yield proc, out


def test_cluster_runs_a_pod_through_the_nvidia_runtime(rehearsal):
    proc, out = rehearsal
    assert proc.returncode == 0, f"rehearsal failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    report = (out / "rehearsal.txt").read_text(encoding="utf-8")
    # A real kubelet registered a Ready Node running containerd 1.6 and v1.37.2.
    assert re.search(r"\sReady\s+\S+\s+\S+\s+v1\.37\.2\s.*containerd://1\.6\.", report), report
    # The pause pod is Running with an address from the CNI bridge's range.
    assert re.search(r"rehearsal-pause\s+1/1\s+Running\s+0\s+\S+\s+10\.244\.0\.\d+", report), report
    # containerd's default runtime is the one the collection's module wrote: nvidia-container-runtime.
    assert re.search(r"io\.containerd\.runc\.v2 runs \S+/nvidia-container-runtime$", report, re.M), report


def test_cuda_vector_add_fails_without_a_gpu_saying_why(rehearsal):
    proc, out = rehearsal
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = (out / "rehearsal.txt").read_text(encoding="utf-8")
    assert "[Vector addition of 50000 elements]" in report
    assert "Failed to load libcuda.so.1" in report and "nvidia.com/gpu: 1" in report
    assert "log says Test PASSED: False" in report


def test_gpu_isolation_decision_of_the_real_runtime(rehearsal):
    """Issue 19: nvidia-container-runtime, configured by the collection's container_toolkit_config module as the
    container_toolkit role does, ignores NVIDIA_VISIBLE_DEVICES=all in an unprivileged pod (it runs with nothing
    injected) and takes the /dev/null mount under /var/run/nvidia-container-devices/ as a request for that GPU."""
    proc, out = rehearsal
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = (out / "rehearsal.txt").read_text(encoding="utf-8")
    section = report[report.index("== isolation:"):]
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in section
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in section
    # The mode the runtime chose by itself (auto), the same on the H100 (jit-cdi in toolkit 1.20).
    assert "Auto-detected mode as 'jit-cdi'" in section, section
    assert re.search(r"Ignoring devices requested by environment variable\(s\) in unprivileged container: "
                     r"\[NVIDIA_VISIBLE_DEVICES\]", section), section
    assert "No devices requested; no modification required." in section, section
    # The envvar pod ran; the mounted request named exactly the mounted id.
    assert re.search(r"^isolation-envvar\s+1/1\s+Running", section, re.M), section
    assert re.search(r"automatic CDI \S+ for devices \[runtime\.nvidia\.com/gpu=GPU-rehearsal\]", section), section
    assert "runtime.nvidia.com/gpu=all" not in section


def test_nothing_is_left_behind(rehearsal):
    assert not _leftovers(), _leftovers()
    assert not PREFIX.exists()
