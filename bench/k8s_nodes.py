"""Benchmark: label + untaint + taint N kwok GPU nodes, three ways, side by side in one run.

  (ours)  one k8sgpu.nvidia.k8s_nodes task (one LIST, concurrent PATCHes of the nodes that differ)
  (a)     the guides' way: a per-node `kubectl label` and `kubectl taint` loop
  (b)     one kubernetes.core.k8s task per node (a loop over the nodes)

Run against the lab (make lab): .venv/bin/python bench/k8s_nodes.py --nodes 1000
Every method starts from the same state: each node tainted
node-role.kubernetes.io/control-plane:NoSchedule and without the GPU labels.
Each method must end with every node labelled gpu=true, nvidia.com/gpu.present=true,
role=train-gpu, tainted nvidia.com/gpu=present:NoSchedule and without the
control-plane taint; the script checks that after each method.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
LABELS = {"gpu": "true", "nvidia.com/gpu.present": "true", "role": "train-gpu"}
CP = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def env() -> dict:
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def make_nodes(core, names: list[str]) -> None:
    cap = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}

    def create(name):
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"type": "kwok", "bench": "k8s-nodes"},
                             "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "spec": {"taints": [CP]}, "status": {"capacity": cap, "allocatable": cap}}
        try:
            core.create_node(body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(create, names))


def settle(core, names: list[str], timeout: float = 300) -> None:
    """Wait until kwok has initialised every node (Ready), then let the control plane go quiet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = sum(1 for n in core.list_node(label_selector="bench=k8s-nodes").items
                    if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []))
        if ready >= len(names):
            break
        time.sleep(2)
    time.sleep(5)


def reset(core, names: list[str]) -> None:
    body = {"metadata": {"labels": {k: None for k in LABELS}}, "spec": {"taints": [CP]}}
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda n: core.patch_node(n, body), names))


def verify(core, names: list[str]) -> None:
    nodes = {n.metadata.name: n for n in core.list_node(label_selector="bench=k8s-nodes").items}
    bad = []
    for name in names:
        n = nodes[name]
        labels = n.metadata.labels or {}
        taints = sorted((t.key, t.value, t.effect) for t in n.spec.taints or [])
        if any(labels.get(k) != v for k, v in LABELS.items()) or taints != [(GPU["key"], GPU["value"], GPU["effect"])]:
            bad.append(name)
    if bad:
        raise SystemExit(f"{len(bad)} node(s) not in the wanted state after the method, e.g. {bad[:3]}")


def timed(cmd: list[str], **kw) -> float:
    start = time.perf_counter()
    res = subprocess.run(cmd, env=env(), cwd=ROOT, capture_output=True, text=True, check=False, **kw)
    elapsed = time.perf_counter() - start
    if res.returncode:
        raise SystemExit(f"{cmd[:3]} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return elapsed


def playbook(tasks: list, vars_: dict) -> str:
    play = [{"name": "bench", "hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"ansible_python_interpreter": sys.executable, **vars_}, "tasks": tasks}]
    f = tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False)
    json.dump(play, f)
    f.close()
    return f.name


def apiserver_cpu_s() -> float | None:
    """CPU seconds used so far by a kube-apiserver on this machine (the lab's), else None."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split()
        except OSError:
            continue
        if fields[1] == "(kube-apiserver)":
            return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return None


def task_seconds(out: str) -> float:
    """The k8s_nodes task's own time, from the profile_tasks callback."""
    for line in out.splitlines():
        if line.startswith("label, untaint and taint") and line.rstrip().endswith("s"):
            return float(line.rsplit(" ", 1)[-1].rstrip("s"))
    raise SystemExit("no task time in the playbook output")


def ours(names, kubeconfig, workers) -> dict:
    pb = playbook([{"name": "label, untaint and taint", "k8sgpu.nvidia.k8s_nodes": {
        "kubeconfig": kubeconfig, "names": "{{ bench_nodes }}", "labels": LABELS, "workers": workers,
        "taints": [{**CP, "state": "absent"}, GPU]}}], {"bench_nodes": names})
    out: dict = {"workers": workers}
    try:
        for key in ("first", "idempotent_rerun"):
            cpu0 = apiserver_cpu_s()
            start = time.perf_counter()
            res = subprocess.run(["ansible-playbook", "-i", "localhost,", pb], cwd=ROOT, capture_output=True, text=True,
                                 env={**env(), "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"}, check=False)
            wall = time.perf_counter() - start
            if res.returncode:
                raise SystemExit(f"k8s_nodes playbook failed:\n{res.stdout[-3000:]}")
            out[f"{key}_wall_s"] = round(wall, 2)
            out[f"{key}_task_s"] = task_seconds(res.stdout)
            if cpu0 is not None:
                out[f"{key}_apiserver_cpu_s"] = round(apiserver_cpu_s() - cpu0, 2)
    finally:
        os.unlink(pb)
    out["wall_s"] = out["first_wall_s"]
    return out


def kubectl_loop(names, kubeconfig, kubectl) -> dict:
    script = "\n".join(
        f"{kubectl} label node {n} --overwrite gpu=true nvidia.com/gpu.present=true role=train-gpu >/dev/null && "
        f"{kubectl} taint node {n} node-role.kubernetes.io/control-plane:NoSchedule- "
        f"nvidia.com/gpu=present:NoSchedule >/dev/null" for n in names)
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(script + "\n")
    start = time.perf_counter()
    try:
        res = subprocess.run(["bash", "-e", f.name], env={**env(), "KUBECONFIG": kubeconfig},
                             capture_output=True, text=True, check=False)
    finally:
        os.unlink(f.name)
    if res.returncode:
        raise SystemExit(f"kubectl loop failed: {res.stderr[-2000:]}")
    return {"wall_s": time.perf_counter() - start, "processes": 2 * len(names)}


def task_per_node(names, kubeconfig) -> dict:
    pb = playbook([{"name": "one k8s task per node", "kubernetes.core.k8s": {
        "kubeconfig": kubeconfig, "state": "patched", "kind": "Node", "name": "{{ item }}",
        "definition": {"metadata": {"labels": LABELS}, "spec": {"taints": [GPU]}}},
        "loop": "{{ bench_nodes }}"}], {"bench_nodes": names})
    try:
        return {"wall_s": timed(["ansible-playbook", "-i", "localhost,", pb])}
    finally:
        os.unlink(pb)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--kubeconfig", default=str(ROOT / ".lab" / "kubeconfig"))
    p.add_argument("--kubectl", default=None, help="kubectl binary (default: the lab's)")
    p.add_argument("--skip", action="append", default=[], choices=["ours", "kubectl", "task-per-node"])
    p.add_argument("--keep", action="store_true", help="keep the bench nodes afterwards")
    p.add_argument("--workers", type=int, default=64, help="k8s_nodes workers (concurrent PATCH calls)")
    p.add_argument("--json", default=str(ROOT / "bench" / "output" / "k8s_nodes.json"))
    a = p.parse_args()
    kubectl = a.kubectl or str(next((Path.home() / ".cache" / "k8sgpu-lab" / "bin").glob("kubernetes-*/kubectl")))
    core = client.CoreV1Api(config.new_client_from_config(config_file=a.kubeconfig))
    names = [f"bench-gpu-{i:04d}" for i in range(a.nodes)]
    print(f"creating {a.nodes} kwok nodes ...", flush=True)
    make_nodes(core, names)
    results: dict = {"nodes": a.nodes, "machine": f"{platform.node()} {os.cpu_count()} CPUs, API server on the same machine",
                     "python": platform.python_version()}
    try:
        for key, fn in (("ours", lambda: ours(names, a.kubeconfig, a.workers)),
                        ("kubectl", lambda: kubectl_loop(names, a.kubeconfig, kubectl)),
                        ("task-per-node", lambda: task_per_node(names, a.kubeconfig))):
            if key in a.skip:
                continue
            reset(core, names)
            settle(core, names)
            print(f"{key} ...", flush=True)
            results[key] = fn()
            verify(core, names)
            print(f"  {results[key]}", flush=True)
    finally:
        if not a.keep:
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(core.delete_node, names))
    if "ours" in results:
        for other in ("kubectl", "task-per-node"):
            if other in results:
                results[f"speedup_vs_{other}"] = round(results[other]["wall_s"] / results["ours"]["wall_s"], 1)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
