"""The container_toolkit role on a host as a site has it (issue 10, defects 1, 2 and 9).

One node container of the lab's Debian 12 image (systemd, on the lab's network, removed at the end) with Debian's
docker.io running its own dockerd, the lab's NVIDIA container toolkit repository copied onto its disk (a file://
mirror, as the README recommends for air-gapped sites), and a registry mirror on the node's loopback that only
records requests: Docker asks it first for any Docker Hub image, so a pull attempt shows there.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_output import recap
from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.k8sgpu.nvidia.plugins.filter.openpgp_fingerprints import openpgp_fingerprints  # noqa: E402

NODE = f"{LAB_NAME}-toolkit-site"
IMAGE = "k8sgpu-lab/debian:bookworm"
CACHE = Path(os.environ.get("K8SGPU_CACHE", Path.home() / ".cache/k8sgpu-lab"))
MIRROR = "file:///srv/mirror/libnvidia-container"
REGISTRY_LOG = "/var/log/k8sgpu-registry-requests.log"
DAEMON_JSON = {"storage-driver": "vfs", "registry-mirrors": ["http://127.0.0.1:5999"]}


def sh(cmd: str, check: bool = True, timeout: int = 600) -> str:
    return node_sh(NODE, cmd, check, timeout).strip()


def role(**extra) -> subprocess.CompletedProcess:
    """The role on NODE only, through Docker, with the lab's file:// mirror and a real proxy setting."""
    extra = {
        "ansible_python_interpreter": "/usr/bin/python3",
        "container_toolkit_repo_url": MIRROR,
        # A proxy URL, as k8sgpu_apt_proxy gives it; a file:// mirror needs none.
        "container_toolkit_repo_proxy": (LAB_STATE / "apt-proxy-url").read_text().strip(),
        # The lab's own key, pinned as inventories/lab does (the role's default pin is NVIDIA's key, issue 34).
        "container_toolkit_repo_key_fingerprint": lab_key_fingerprint(),
        **extra,
    }
    return run(["ansible-playbook", "-i", f"{NODE},", "-c", "community.docker.docker",
                "tests/lab/playbooks/container_toolkit.yml", "-e", json.dumps(extra)])


def lab_repo() -> Path:
    """The lab's toolkit repository in its cache (lab/build-toolkit-repo.sh builds it)."""
    mirror_url = (LAB_STATE / "toolkit-mirror-url").read_text().strip()
    return CACHE / "mirror" / mirror_url.split("/k8sgpu-mirror/", 1)[1]


def lab_key_fingerprint() -> str:
    (fingerprint,) = openpgp_fingerprints((lab_repo() / "gpgkey").read_text())
    return fingerprint


def docker_state() -> dict:
    """dockerd's process and start, and the running containers with their start times."""
    pid = sh("systemctl show -p MainPID --value docker")
    started = sh("systemctl show -p ExecMainStartTimestampMonotonic --value docker")
    running = sh("docker ps -q --no-trunc | xargs -r docker inspect -f '{{.Id}} {{.State.StartedAt}}'")
    return {"pid": pid, "started": started, "containers": running}


@pytest.fixture(scope="module")
def node():
    repo = lab_repo()
    assert (repo / "gpgkey").is_file(), f"{repo}: the lab's toolkit repository is missing (make lab builds it)"
    subprocess.run(["docker", "rm", "-f", NODE], capture_output=True, check=False)
    subprocess.run(
        ["docker", "run", "-d", "--name", NODE, "--hostname", NODE, "--network", LAB_NAME,
         "--label", f"k8sgpu.lab={LAB_NAME}", "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN",
         "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
         "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
         "-e", "container=docker", IMAGE, "/lib/systemd/systemd"], capture_output=True, check=True)
    try:
        for _attempt in range(60):
            if sh("systemctl is-system-running || true") in ("running", "degraded"):
                break
            time.sleep(1)
        proxy = (LAB_STATE / "apt-proxy-url").read_text().strip()
        sh(f"echo 'Acquire::http::Proxy \"{proxy}\";' > /etc/apt/apt.conf.d/90lab-proxy")
        sh(f"mkdir -p /etc/docker /srv/mirror && echo '{json.dumps(DAEMON_JSON)}' > /etc/docker/daemon.json")
        sh("apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
           "-o Dpkg::Options::=--force-confold docker.io busybox-static")
        sh('set -e; d=$(mktemp -d); mkdir "$d/bin"; cp /bin/busybox "$d/bin/"; ln -s busybox "$d/bin/sh"; '
           'tar -C "$d" -c . | docker import - local/busybox:lab; rm -rf "$d"')
        subprocess.run(["docker", "cp", str(repo), f"{NODE}:/srv/mirror/libnvidia-container"], check=True)
        # Records every request Docker makes to its registry mirror (a pull of a Docker Hub image).
        sh(f"systemd-run --unit k8sgpu-registry-log sh -c 'exec python3 -u -m http.server 5999 --bind 127.0.0.1 "
           f"--directory /var/empty >>{REGISTRY_LOG} 2>&1'")
        yield NODE
    finally:
        subprocess.run(["docker", "rm", "-f", NODE], capture_output=True, check=False)


@pytest.fixture(scope="module")
def converged(node):
    """The first run: the toolkit from the file:// mirror while a proxy is set (defect 2)."""
    cp = role()
    return cp


def test_file_mirror_with_a_proxy_setting_installs_without_a_proxy_file(converged):
    out = converged.stdout + converged.stderr
    assert converged.returncode == 0, out[-5000:]
    assert sh("nvidia-ctk --version").startswith("NVIDIA Container Toolkit CLI version")
    source = sh("cat /etc/apt/sources.list.d/k8sgpu-nvidia-container-toolkit.sources")
    assert f"URIs: {MIRROR}/stable/deb/amd64" in source, source
    keyring = sh("cat /etc/apt/keyrings/nvidia-container-toolkit.asc")
    assert keyring.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert openpgp_fingerprints(keyring) == [lab_key_fingerprint()]  # the pinned key alone (issue 34)
    # apt reads a file:// source from the disk: no proxy file for it.
    assert "k8sgpu" not in sh("ls /etc/apt/apt.conf.d/")
    # And a second run changes nothing.
    again = role()
    assert again.returncode == 0 and recap(again.stdout)[NODE]["changed"] == 0, again.stdout[-4000:]


@pytest.mark.parametrize("path", ["nvidia-container-runtime", "/usr/bin/nvidia-container-runtime"])
def test_docker_configured_by_hand_as_the_guide_says_is_not_restarted(converged, path):
    assert converged.returncode == 0
    config = {**DAEMON_JSON, "runtimes": {"nvidia": {"path": path, "runtimeArgs": []}}, "default-runtime": "nvidia"}
    text = json.dumps(config, indent=4) + "\n"
    sh(f"cat > /etc/docker/daemon.json <<'EOF'\n{text}EOF\nsystemctl reset-failed docker; systemctl restart docker")
    sh("docker run -d --network none --name site-work local/busybox:lab /bin/busybox sleep 3600")
    try:
        before = docker_state()
        assert len(before["containers"].splitlines()) == 1, before
        cp = role()
        assert cp.returncode == 0, cp.stdout[-4000:]
        assert recap(cp.stdout)[NODE]["changed"] == 0, cp.stdout[-4000:]
        assert sh("cat /etc/docker/daemon.json") + "\n" == text
        assert docker_state() == before  # same dockerd, the site's container still running since it started
        assert sh("docker info --format '{{.DefaultRuntime}}'") == "nvidia"
    finally:
        sh("docker rm -f site-work", check=False)


def registry_requests() -> str:
    return sh(f"cat {REGISTRY_LOG} 2>/dev/null || true")


def test_gpu_check_without_an_image_pulls_nothing_and_names_the_variables(converged):
    """No GPU driver is loaded here, so the role would skip the check: _container_toolkit_driver_loaded (the fact
    preflight sets from gpu_facts) is forced so that the check's own path runs against the real dockerd."""
    assert converged.returncode == 0
    assert sh("docker image inspect ubuntu:24.04 >/dev/null 2>&1; echo $?") != "0"
    sh(f": > {REGISTRY_LOG}")
    cp = role(_container_toolkit_driver_loaded=True, container_toolkit_cdi_spec="never")
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0, out[-4000:]
    assert f"{NODE}: no image for the Docker GPU check: container_toolkit_gpu_check_image is empty" in out, out[-4000:]
    assert "ubuntu:24.04 is not a local image" in out and "container_toolkit_gpu_check=false" in out
    assert "container_toolkit_gpu_check_pull=true" in out
    assert registry_requests() == "", "a pull was attempted"
    # The recorder sees a pull: this test would have caught one.
    sh("timeout 60 docker pull ubuntu:24.04", check=False, timeout=90)
    assert "GET /v2/" in registry_requests()


def test_gpu_check_runs_a_local_image_with_pull_never(converged):
    assert converged.returncode == 0
    sh(f": > {REGISTRY_LOG}")
    cp = role(_container_toolkit_driver_loaded=True, container_toolkit_cdi_spec="never",
              container_toolkit_gpu_check_image="local/busybox:lab")
    out = cp.stdout + cp.stderr
    # Debian 12's docker 20.10 takes --pull never; with no GPU here the run itself fails, naming the command. The
    # GPUs are asked for by the /dev/null mount too (GPU isolation ignores --gpus all's NVIDIA_VISIBLE_DEVICES): the
    # runtime acts on it (exit 125, it cannot create the GPU devices here), where the variable alone would give a
    # container without nvidia-smi (exit 127).
    assert cp.returncode != 0, out[-4000:]
    assert (f"{NODE}: /usr/bin/docker run --rm --pull never --gpus all --volume "
            "/dev/null:/var/run/nvidia-container-devices/all:ro local/busybox:lab nvidia-smi -L failed (exit 125)"
            in out), out[-4000:]
    assert "container_toolkit_gpu_check=false" in out
    assert "unknown flag" not in out
    assert registry_requests() == ""


def test_gpu_check_with_a_set_image_that_is_not_local(converged):
    assert converged.returncode == 0
    cp = role(_container_toolkit_driver_loaded=True, container_toolkit_cdi_spec="never",
              container_toolkit_gpu_check_image="registry.site.example/cuda-base:12.4")
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0
    assert (f"{NODE}: the Docker GPU check image registry.site.example/cuda-base:12.4 (container_toolkit_gpu_check_image)"
            " is not a local image") in out, out[-4000:]
    assert sh("docker image inspect registry.site.example/cuda-base:12.4 >/dev/null 2>&1; echo $?") != "0"
