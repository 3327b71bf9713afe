"""GPU isolation of the EKS nodes playbooks/eks.yml makes (issue 34 item 7), on a lab node with the real toolkit.

EKS's AL2023 NVIDIA AMIs come with the NVIDIA Container Toolkit at NVIDIA's defaults, which the collection does not
manage; their isolation comes only from the user data eks.yml gives the nodes (the launch template of the managed
nodegroup, the EC2NodeClass's spec.userData: filter eks_gpu_user_data). Here, on one node container of the lab's
recipe with the toolkit 1.20.1 built from NVIDIA's sources (the fixtures of test_gpu_isolation_toolkit.py: the node,
its kwok Node, the container_toolkit role without its isolation tasks, all removed at the end):

1. config.toml is replaced by the toolkit's own default (`nvidia-ctk config default`), what the AMI ships; the
   real nvidia-container-runtime, asked to create a container as containerd asks it (`create --bundle`, its debug
   log on --log), takes an unprivileged container's NVIDIA_VISIBLE_DEVICES=all as a request for every GPU, and
   ignores the device plugin's volume mount: the hole, and the plugin's strategy not working.
2. The shell script of the nodegroup's user data (the MIME part, as cloud-init runs it before nodeadm starts the
   kubelet) runs on the node; then the same runtime ignores the variable ("Ignoring devices requested by
   environment variable(s) in unprivileged container", "No devices requested; no modification required." - the
   rehearsal's check, tests/lab/test_k8s_node_rehearsal.py) and takes the mount as a request for exactly the
   mounted GPU. A second run of the script changes nothing.
3. Without nvidia-ctk the script masks the kubelet (the node would never join).

The low-level runtime is a stand-in (runc on PATH that records its call), so no container really starts: what is
read is the runtime's decision and the OCI spec it hands to runc. What this does not prove: that EKS and Karpenter
boot a node with this user data, that cloud-init runs it before nodeadm starts the kubelet on the real AMI, or that
nothing on the AMI rewrites config.toml later (no AWS run).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from kubernetes import client

from conftest import ROOT

sys.path.insert(0, str(ROOT / "collections"))
# The node, its inventory and the toolkit installed by the role without its isolation tasks: reused, not copied.
from test_gpu_isolation_toolkit import CONFIG, ENVVAR_OFF, HOST, MOUNTS_ON, inv, old_site, sh  # noqa: E402,F401  # pylint: disable=wrong-import-position,unused-import
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._eks_user_data import (  # noqa: E402  # pylint: disable=wrong-import-position
    gpu_user_data,
    script_of,
)

PROBE = "/root/k8sgpu-eks-probe"  # not /tmp: noexec in the node container
USER_DATA = "/var/lib/cloud/instance/scripts/part-001"  # where cloud-init puts a text/x-shellscript part
# The rehearsal's check (tests/lab/test_k8s_node_rehearsal.py): the runtime's own words for its decision.
IGNORED = re.compile(r"Ignoring devices requested by environment variable\(s\) in unprivileged container: "
                     r"\[NVIDIA_VISIBLE_DEVICES\]")
NOTHING = "No devices requested; no modification required."


def requested(device: str) -> re.Pattern:
    """The runtime's request for a CDI device (as the rehearsal reads it)."""
    return re.compile(r"automatic CDI \S+ for devices \[runtime\.nvidia\.com/gpu=" + re.escape(device) + r"\]")


FAKE_RUNC = """#!/bin/sh
# Stand-in for runc: records how nvidia-container-runtime called it, starts nothing.
echo "$@" > "$(dirname "$0")/../runc-called"
"""


def node(cmd: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-i", HOST, "sh", "-c", cmd], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)


def spec(env: list[str], mount: str | None = None) -> dict:
    """An unprivileged OCI spec as the kubelet has containerd make it (no CAP_SYS_ADMIN)."""
    caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
            "CAP_NET_BIND_SERVICE"]
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"}]
    if mount:
        mounts.append({"destination": f"/var/run/nvidia-container-devices/{mount}", "type": "bind",
                       "source": "/dev/null", "options": ["rbind", "ro"]})
    return {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "mounts": mounts, "linux": {"namespaces": []},
            "process": {"args": ["/pause"], "cwd": "/", "env": ["PATH=/usr/bin:/bin", *env],
                        "capabilities": {k: caps for k in ("bounding", "effective", "permitted")}}}


def probe(name: str, oci: dict) -> tuple[str, dict, bool]:
    """nvidia-container-runtime create on a bundle: (its debug log, the spec it handed on, whether it ran runc)."""
    d = f"{PROBE}/{name}"
    cp = node(f"rm -rf {d} && mkdir -p {d}/rootfs {d}/bin && cat > {d}/config.json", json.dumps(oci))
    assert cp.returncode == 0, cp.stderr
    cp = node(f"cat > {d}/bin/runc && chmod 755 {d}/bin/runc", FAKE_RUNC)
    assert cp.returncode == 0, cp.stderr
    node(f"cd {d} && PATH={d}/bin:/usr/bin:/bin /usr/bin/nvidia-container-runtime --debug --log {d}/runtime.log "
         f"create --bundle {d} k8sgpu-eks-{name}")
    log = sh(f"cat {d}/runtime.log 2>/dev/null || true")
    handed = json.loads(sh(f"cat {d}/config.json"))
    ran = node(f"test -f {d}/runc-called").returncode == 0
    return log, handed, ran


class NoCluster:
    """No API server is needed here: the kwok Node that the isolation fixture makes serves its maintenance plan."""

    def create_node(self, body):
        return body

    def delete_node(self, name):
        raise client.ApiException(status=404, reason=f"{name}: no API server used by test_eks_isolation")


@pytest.fixture(scope="module")
def core():
    return NoCluster()


ENVVAR_POD = spec(["NVIDIA_VISIBLE_DEVICES=all"])
MOUNT_POD = spec([], mount="GPU-eks-probe")


@pytest.fixture(scope="module")
def ami_default(old_site):  # pylint: disable=redefined-outer-name
    """config.toml as the toolkit ships it (what an EKS AMI has when the collection has not touched it)."""
    sh(f"nvidia-ctk config default > {CONFIG}.default && cp {CONFIG}.default {CONFIG}")
    text = sh(f"cat {CONFIG}")
    assert ENVVAR_OFF not in text and MOUNTS_ON not in text, text
    yield text
    sh(f"rm -rf {PROBE} {CONFIG}.default /var/lib/cloud; systemctl unmask --runtime kubelet.service || true")


def run_user_data(path: str = "/usr/sbin:/usr/bin:/sbin:/bin") -> subprocess.CompletedProcess:
    script = script_of(gpu_user_data("AL2023_x86_64_NVIDIA"))
    cp = node(f"mkdir -p {USER_DATA.rsplit('/', 1)[0]} && cat > {USER_DATA} && chmod 700 {USER_DATA}", script)
    assert cp.returncode == 0, cp.stderr
    return node(f"PATH={path} {USER_DATA}")


def test_toolkit_default_passes_the_variable_and_ignores_the_mount(ami_default):
    """Without the user data: the hole (and the device plugin's volume-mounts strategy not working)."""
    log, _handed, ran = probe("default-envvar", ENVVAR_POD)
    assert not ran, log  # every GPU asked for: no GPU here, so the spec cannot be built and runc is never called
    assert not IGNORED.search(log), log
    assert NOTHING not in log, log
    # The variable was taken as a request for every GPU of the node (no GPU here: the spec cannot be built).
    assert requested("all").search(log), log
    log, _handed, _ran = probe("default-mount", MOUNT_POD)
    assert not requested("GPU-eks-probe").search(log) and NOTHING in log, log


def test_user_data_isolates_gpus_with_the_real_nvidia_ctk_and_runtime(ami_default):
    cp = run_user_data()
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"k8sgpu.nvidia GPU isolation: set in {CONFIG}" in cp.stdout
    text = sh(f"cat {CONFIG}")
    assert f"\n{ENVVAR_OFF}\n" in f"\n{text}" and f"\n{MOUNTS_ON}\n" in f"\n{text}", text
    # nvidia-ctk's own layout: every other line of the toolkit's default kept.
    assert [ln for ln in text.splitlines() if "accept-nvidia" not in ln] == \
        [ln for ln in ami_default.splitlines() if "accept-nvidia" not in ln]
    assert "masked" not in node("systemctl is-enabled kubelet.service 2>&1").stdout

    # The rehearsal's check: an unallocated pod's NVIDIA_VISIBLE_DEVICES=all is ignored, nothing is injected,
    # and the container goes on to runc with the spec it came with.
    log, handed, ran = probe("isolated-envvar", ENVVAR_POD)
    assert IGNORED.search(log), log
    assert NOTHING in log, log
    assert ran, log
    # The spec it handed to runc (re-serialised by the runtime): no device, mount, hook or variable added.
    assert handed["process"]["env"] == ENVVAR_POD["process"]["env"], handed
    assert handed["mounts"] == ENVVAR_POD["mounts"] and not handed.get("hooks"), handed
    assert not handed["linux"].get("devices"), handed
    # The device plugin's volume-mounts request asks for exactly the mounted GPU.
    log, _handed, _ran = probe("isolated-mount", MOUNT_POD)
    assert requested("GPU-eks-probe").search(log) and NOTHING not in log, log
    assert "runtime.nvidia.com/gpu=all" not in log

    # cloud-init runs it once per instance; run again (a reboot with per-boot scripts) it changes nothing.
    before = sh(f"sha256sum {CONFIG}")
    again = run_user_data()
    assert again.returncode == 0 and sh(f"sha256sum {CONFIG}") == before


def test_user_data_masks_the_kubelet_when_it_cannot_isolate(ami_default):
    # A PATH with systemctl and grep but no nvidia-ctk (/bin is /usr/bin on Debian 12).
    sh(f"mkdir -p {PROBE}/no-ctk && ln -sf /usr/bin/systemctl /usr/bin/grep {PROBE}/no-ctk/")
    cp = run_user_data(path=f"{PROBE}/no-ctk")
    try:
        assert cp.returncode == 1, cp.stdout + cp.stderr
        assert "nvidia-ctk not found" in cp.stderr and "the kubelet is masked" in cp.stderr
        assert node("systemctl is-enabled kubelet.service 2>&1").stdout.strip() in ("masked-runtime", "masked")
        assert sh("readlink /run/systemd/system/kubelet.service").strip() == "/dev/null"
    finally:
        node("systemctl unmask --runtime kubelet.service")
