"""The lab's control plane as processes: a component stopped, paused, and started again as a real control plane's
supervisor (the kubelet for static pods, or systemd) would start it.

lab/lab.sh runs the cluster with kwokctl's binary runtime: one process per component, its pid in
LAB_STATE/kwok/clusters/<lab>/pids/<name>.pid, its output in logs/<name>.log, its command (binary, args, workDir) in
kwok.yaml's KwokctlConfiguration. start() runs that command again and writes the new pid where kwokctl (and
`make lab-down`) look for it.

kube-controller-manager and kube-scheduler take part in leader election: an API server that does not answer them
for 10 s (their renew deadline) makes them exit ("leaderelection lost"), as on a real control plane, where their
supervisor starts them again. ensure_running() is that supervisor for the tests that stop or pause the API server.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import yaml

from k8sgpu_testlib import LAB_STATE

LAB_NAME = os.environ.get("K8SGPU_LAB_NAME", "k8sgpu-lab")
CLUSTER_DIR = LAB_STATE / "kwok" / "clusters" / LAB_NAME
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")


class Component:
    """One control-plane process of the lab."""

    def __init__(self, name: str, cluster_dir: Path = CLUSTER_DIR):
        self.name, self.dir = name, cluster_dir
        config = next(d for d in yaml.safe_load_all((cluster_dir / "kwok.yaml").read_text())
                      if d and d.get("kind") == "KwokctlConfiguration")
        spec = next(c for c in config["components"] if c["name"] == name)
        self.argv = [spec["binary"], *spec.get("args", [])]
        self.work_dir = spec.get("workDir") or str(cluster_dir)
        self.pid_file = cluster_dir / "pids" / f"{name}.pid"
        self.log_file = cluster_dir / "logs" / f"{name}.log"

    @property
    def pid(self) -> int:
        return int(self.pid_file.read_text().split()[0])

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except (OSError, ValueError):
            return False
        # A pid reused by another program is not the component.
        try:
            return Path(f"/proc/{self.pid}/exe").resolve() == Path(self.argv[0]).resolve()
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def stop(self, timeout: float = 30) -> None:
        """SIGKILL (a crash, an OOM kill, a node that lost power) and wait until it is gone."""
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + timeout
        while time.monotonic() < end and Path(f"/proc/{pid}").exists() and not _zombie(pid):
            time.sleep(0.05)

    def start(self) -> None:
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(self.argv, cwd=self.work_dir, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        # Digits alone: kwokctl (strconv.Atoi) cannot read a pid with a newline after it, and then stops nothing.
        self.pid_file.write_text(str(proc.pid))


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def ensure_running(names: tuple[str, ...] = COMPONENTS) -> list[str]:
    """Start again every component of names that is not running (in their order): the ones started."""
    started = []
    for name in names:
        component = Component(name)
        if not component.alive():
            component.start()
            started.append(name)
    return started


def wait_ready(core, timeout: float = 60) -> None:
    """Until the API server answers /readyz with ok (core: a kubernetes CoreV1Api)."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            api = core.api_client
            token = (api.configuration.api_key or {}).get("authorization")
            answer = api.rest_client.request("GET", f"{api.configuration.host}/readyz", _request_timeout=(2, 5),
                                             headers={"Authorization": token} if token else {})
            if answer.status == 200 and answer.data.decode().strip() == "ok":
                return
        except Exception as exc:  # pylint: disable=broad-exception-caught # refused or not ready yet: poll again
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"the lab's kube-apiserver is not ready after {timeout:g} s: {last}")
