"""Fixtures for tests against the running lab (make lab)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
LAB_STATE = Path(os.environ.get("K8SGPU_LAB_STATE", ROOT / ".lab"))
LAB_NAME = os.environ.get("K8SGPU_LAB_NAME", "k8sgpu-lab")
GPU_NODES = [f"{LAB_NAME}-gpu-1", f"{LAB_NAME}-gpu-2"]


def _lab_kubectl() -> str:
    """The lab's own kubectl (the PATH line of .lab/env), so tests do not depend on the caller's PATH."""
    env = LAB_STATE / "env"
    if env.exists():
        for line in env.read_text(encoding="utf-8").splitlines():
            if line.startswith('export PATH="'):
                candidate = Path(line.split('"')[1].split(":")[0]) / "kubectl"
                if candidate.exists():
                    return str(candidate)
    return "kubectl"


# kubectl with the lab's kubeconfig, for tests that shell out to it: make integration does not source .lab/env.
KUBECTL = [_lab_kubectl(), "--kubeconfig", str(LAB_STATE / "kubeconfig")]


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    path = LAB_STATE / "kubeconfig"
    if not path.exists():
        pytest.fail(f"{path} not found: bring the lab up first (make lab)")
    return str(path)


@pytest.fixture(scope="session")
def core(kubeconfig) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))


def run(cmd: list[str], env_extra: dict | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", **(env_extra or {})}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False, **kw)


@pytest.fixture(scope="session")
def playbook():
    def _run(*args: str) -> subprocess.CompletedProcess:
        return run(["ansible-playbook", "-i", "inventories/lab", *args])
    return _run
