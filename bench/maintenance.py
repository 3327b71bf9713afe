"""Benchmark: the time the maintenance window adds per node over the bare steps, side by side in one run.

  (bare)    playbooks/host.yml: the container_toolkit role applies a runtime change (containerd's default runtime,
            container_toolkit_set_as_default flipped) and restarts containerd; no plan, no drain.
  (window)  playbooks/upgrade.yml with the same kind of change: plan (the roles in check mode), the limit check,
            cordon, drain (a Deployment pod under a PodDisruptionBudget evicted), the change, the wait for the Node
            and its GPUs, the host check (GPU facts, vectorAdd), uncordon.

Each round flips the setting twice (bare, then window, then bare, then window, alternating which goes first), so
both sides do real work every time. One node container of the lab's recipe (lab/lab.sh node, Debian 12, Debian's
containerd, the toolkit from the lab's repository: set up first, not timed) maps to a kwok Node of its own name.
Without GPUs and with the driver role off (k8sgpu_install_driver=false), the bare step is seconds; the absolute
seconds the window adds are what a driver upgrade pays on top of its apt, DKMS and reboot time, so the ratio is
also given against the bare driver-upgrade time passed with --bare-driver-s (e.g. make upgrade-test's per-node time).

Run against the lab (make lab), holding the lab lock:
  PYTHONPATH=tests/support flock /tmp/k8sgpu/lab.lock .venv/bin/python bench/maintenance.py --rounds 2 --bare-driver-s 240
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from k8sgpu_testlib import LAB_STATE, ROOT, lab_module
from k8sgpu_testlib.lab_node import node_inventory

kwok_node = lab_module("topology").node
LAB_NAME = os.environ.get("K8SGPU_LAB_NAME", "k8sgpu-lab")
HOST = f"{LAB_NAME}-bench-mnt"
NS = "k8sgpu-bench-maintenance"
KUBECTL = None


def kubectl(*args: str, check: bool = True, stdin: str | None = None) -> str:
    cp = subprocess.run([*KUBECTL, *args], capture_output=True, text=True, input=stdin, check=False)
    if check and cp.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {cp.stderr}")
    return cp.stdout


def sh(cmd: str) -> None:
    cp = subprocess.run(["docker", "exec", HOST, "sh", "-c", cmd], capture_output=True, text=True, check=False)
    if cp.returncode != 0:
        raise SystemExit(f"{HOST}: {cmd}: {cp.stderr[-2000:]}")


def playbook(inv: Path, path: str, *extra: str) -> tuple[float, str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "K8SGPU_LAB_STATE": str(LAB_STATE)}
    start = time.monotonic()
    cp = subprocess.run(["ansible-playbook", "-i", str(inv), path, "-e", "k8sgpu_install_driver=false", *extra],
                        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if cp.returncode != 0:
        raise SystemExit(f"{path} failed:\n{cp.stdout[-4000:]}")
    return took, cp.stdout


def setup(work: Path) -> Path:
    cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", HOST, "bookworm"], capture_output=True, text=True, check=False)
    if cp.returncode != 0:
        raise SystemExit(cp.stderr)
    proxy = (LAB_STATE / "apt-proxy-url").read_text().strip()
    sh(f"apt-get -q -o Acquire::http::Proxy={proxy} update >/dev/null && DEBIAN_FRONTEND=noninteractive "
       f"apt-get -q -o Acquire::http::Proxy={proxy} install -y --no-install-recommends containerd >/dev/null")
    kubectl("delete", "node", HOST, "--ignore-not-found")
    kubectl("apply", "-f", "-", stdin=json.dumps(kwok_node(HOST, {"nvidia.com/gpu.present": "true"}, [],
                                                           {"nvidia.com/gpu": "8"})))
    kubectl("create", "namespace", NS, check=False)
    kubectl("-n", NS, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"}, "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": "app"}}, "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}],
                         "terminationGracePeriodSeconds": 0}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "app"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "app"}}}}]}))
    inv = node_inventory(work, HOST)
    playbook(inv, "playbooks/host.yml")  # the baseline: toolkit installed, nvidia the default runtime
    return inv


def pin_app_to_node() -> None:
    """The Deployment's pod on the bench Node, so every window evicts one pod under the budget."""
    kubectl("-n", NS, "patch", "deployment", "app", "--type", "merge", "-p",
            json.dumps({"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": HOST}}}}}))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = kubectl("-n", NS, "get", "pods", "-l", "app=app", "-o",
                       "jsonpath={range .items[*]}{.spec.nodeName} {.status.phase}{'\\n'}{end}").split("\n")
        if f"{HOST} Running" in pods:
            return
        time.sleep(0.5)
    raise SystemExit("the bench Deployment's pod did not run on the bench Node")


def main() -> None:
    global KUBECTL  # pylint: disable=global-statement
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (bare, window) pairs, 2 changes each")
    ap.add_argument("--bare-driver-s", type=float, default=0.0,
                    help="bare per-node time of a driver upgrade (apt, DKMS, reboot), for the ratio against it")
    ap.add_argument("--json", default=str(ROOT / "bench" / "output" / "maintenance.json"))
    args = ap.parse_args()
    KUBECTL = ["kubectl", "--kubeconfig", str(LAB_STATE / "kubeconfig")]
    env_file = LAB_STATE / "env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith('export PATH="'):
                candidate = Path(line.split('"')[1].split(":")[0]) / "kubectl"
                if candidate.exists():
                    KUBECTL[0] = str(candidate)

    bare: list[float] = []
    window: list[float] = []
    steps: list[str] = []
    with tempfile.TemporaryDirectory(prefix="k8sgpu-bench-mnt-") as tmp:
        try:
            inv = setup(Path(tmp))
            value = False
            for rnd in range(args.rounds):
                order = ("bare", "window") if rnd % 2 == 0 else ("window", "bare")
                for side in order:
                    change = ["-e", f"container_toolkit_set_as_default={str(value).lower()}"]
                    value = not value
                    if side == "bare":
                        took, _out = playbook(inv, "playbooks/host.yml", *change)
                        bare.append(took)
                    else:
                        pin_app_to_node()
                        took, out = playbook(inv, "playbooks/upgrade.yml", *change)
                        window.append(took)
                        steps += re.findall(r"upgraded in (.*? s)(?= [A-Z]|$)", " ".join(out.split()))
                    print(f"round {rnd + 1} {side}: {took:.1f} s", flush=True)
        finally:
            subprocess.run(["docker", "rm", "-f", HOST], capture_output=True, check=False)
            kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)
            kubectl("delete", "node", HOST, "--ignore-not-found", check=False)

    b, w = statistics.median(bare), statistics.median(window)
    result = {
        "machine": f"{platform.node()} {os.cpu_count()} CPUs",
        "bare_s": [round(x, 1) for x in bare], "window_s": [round(x, 1) for x in window],
        "bare_median_s": round(b, 1), "window_median_s": round(w, 1),
        "added_per_node_s": round(w - b, 1),
        "ratio_toolkit_change": round(w / b, 2),
        "window_steps": steps,
    }
    if args.bare_driver_s:
        result["bare_driver_s"] = args.bare_driver_s
        result["ratio_driver_upgrade"] = round((args.bare_driver_s + w - b) / args.bare_driver_s, 2)
    out_dir = Path(args.json).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
