"""Fixtures for tests against the running lab (make lab)."""
from __future__ import annotations

import os
import queue
import resource
import subprocess
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
LAB_STATE = Path(os.environ.get("K8SGPU_LAB_STATE", ROOT / ".lab"))
LAB_NAME = os.environ.get("K8SGPU_LAB_NAME", "k8sgpu-lab")
GPU_NODES = [f"{LAB_NAME}-gpu-1", f"{LAB_NAME}-gpu-2"]
# Where lab/lib.sh keeps the lab's builds, images and packages (K8SGPU_CACHE), and the Helm it builds there.
LAB_CACHE = Path(os.environ.get("K8SGPU_CACHE",
                                Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "k8sgpu-lab"))
HELM_DIR = LAB_CACHE / "bin" / f"helm-{os.environ.get('HELM_VERSION', 'v3.22.0')}"


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


def run(cmd: list[str], env_extra: dict | None = None, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", **(env_extra or {})}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def node_sh(host: str, cmd: str, check: bool = True, timeout: int = 600) -> str:
    """`sh -c CMD` in the node container HOST (docker exec): its standard output; asserts exit 0 unless check=False."""
    cp = subprocess.run(["docker", "exec", host, "sh", "-c", cmd], capture_output=True, text=True, timeout=timeout,
                        check=False)
    if check:
        assert cp.returncode == 0, f"{host}: {cmd}: {cp.stdout[-2000:]}{cp.stderr[-2000:]}"
    return cp.stdout


@pytest.fixture(scope="session")
def playbook():
    def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return run(["ansible-playbook", "-i", "inventories/lab", *args], timeout=timeout)
    return _run


# Lab tests that use programs the lab itself does not need: `lab/build-binaries.sh extras` (CRI-O's config loader,
# Prometheus and promtool, prometheus-adapter, Karpenter's kwok provider) and the GPU-node bundle of
# lab/pack-k8s-node.sh. `make lab` does not build them; `make test`'s prebuild builds them in the background, in this
# order, while molecule and the other lab tests run. These files run last, in this order, and each first waits for
# its build (the scripts lock per target: a build already running is waited for, a cached one is a no-op), or runs it.
LATE_BUILDS: dict[str, list[str]] = {
    "test_container_runtime_config.py": ["lab/build-binaries.sh", "crio-config"],
    "test_dcgm_exporter.py": ["lab/build-binaries.sh", "prometheus"],
    "test_gpu_alerts.py": ["lab/build-binaries.sh", "prometheus"],
    "test_gpu_health_eda.py": ["lab/build-binaries.sh", "alertmanager", "prometheus"],
    "test_monitoring_chain.py": ["lab/build-binaries.sh", "prometheus", "adapter"],
    "test_karpenter.py": ["lab/build-binaries.sh", "karpenter"],
    "test_k8s_node_rehearsal.py": ["lab/pack-k8s-node.sh", "all"],
}
_LATE_ORDER = {name: i for i, name in enumerate(LATE_BUILDS)}
# A build that has not finished after this long is reported on the terminal as it goes.
_QUIET_SECONDS = 2.0


def pytest_collection_modifyitems(session, config, items):
    """The files of LATE_BUILDS after every other lab test, in LATE_BUILDS's order (each file's own order kept)."""
    items.sort(key=lambda item: _LATE_ORDER.get(Path(str(item.fspath)).name, -1))


def _next_line(lines: queue.Queue) -> str | None:
    """The next line, "" when none came for half a second, None at the end."""
    try:
        return lines.get(timeout=0.5)
    except queue.Empty:
        return ""


def build_for(config, cmd: list[str]) -> None:
    """Run a lab build script (cached: a no-op in about a second) and fail with its error if it fails. Its log lines
    go to the terminal once it has run for _QUIET_SECONDS, so a test waiting for a build says so."""
    writer = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def say(text: str) -> None:
        # Past pytest's output capture, so it shows while the build runs.
        if capture:
            with capture.global_and_fixture_disabled():
                writer.write_line(text)
        else:
            writer.write_line(text)

    seen: list[str] = []
    with subprocess.Popen([str(ROOT / cmd[0]), *cmd[1:]], cwd=ROOT, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        lines: queue.Queue[str | None] = queue.Queue()

        def _read() -> None:
            for line in proc.stderr:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=_read, daemon=True).start()
        start, shown, loud = time.monotonic(), 0, False
        while (line := _next_line(lines)) is not None:
            if line:
                seen.append(line)
            if writer and time.monotonic() - start > _QUIET_SECONDS:
                if not loud:
                    loud = True
                    say(f"\n[lab tests] waiting for `{' '.join(cmd)}` (see LATE_BUILDS in tests/lab/conftest.py)")
                for pending in seen[shown:]:
                    say(f"  {pending}")
                shown = len(seen)
        rc = proc.wait()
    if rc != 0:
        pytest.fail(f"`{' '.join(cmd)}` failed (rc {rc}); these tests need what it builds:\n" + "\n".join(seen[-40:]),
                    pytrace=False)


@pytest.fixture(autouse=True)
def _timing(request):
    """With K8SGPU_LAB_TIMINGS=FILE: one line per test appended to FILE, its wall time and the CPU time of the
    processes it ran and waited for (ansible-playbook and its modules, kubectl; not the lab's containers), in seconds.
    Where the two differ most, a test waits on the cluster rather than on the CPU (docs/development.md)."""
    path = os.environ.get("K8SGPU_LAB_TIMINGS")
    if not path:
        yield
        return
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    yield
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - start
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{wall:8.1f} {cpu:8.1f} {request.node.nodeid}\n")


@pytest.fixture(scope="module", autouse=True)
def late_build(request):
    """What a file of LATE_BUILDS needs, built (or waited for) before its first test."""
    cmd = LATE_BUILDS.get(Path(str(request.fspath)).name)
    if cmd:
        build_for(request.config, cmd)
