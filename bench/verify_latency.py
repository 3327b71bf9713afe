"""Benchmark: in-cluster verify latency on the lab, beyond what kwok and the controllers take anyway.

For each GPU node of the lab, RUNS times:
  (raw)    create a bare cuda-vector-add Job with the kubernetes client, poll every 0.1 s until it is
           Complete, delete it: the time kwok's pod stages and the Job controller need;
  (module) k8sgpu.nvidia.k8s_gpu_verify with per_node on that node, require_logs=false: its own
           elapsed_s (create, wait, read status and logs, clean up), and the wall time of the module process.
The overhead is module elapsed_s minus the raw time, per run; goal <= 3 s.
Run against the lab (make lab): .venv/bin/python bench/verify_latency.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gpu_verify import job_manifest  # noqa: E402


def raw_job(batch, node: str) -> float:
    run_id = uuid.uuid4().hex[:6]
    name = f"bench-raw-{run_id}"
    job = job_manifest(name, "default", run_id, "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", 1, node, {},
                       [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], 60, None, [], None)
    start = time.perf_counter()
    batch.create_namespaced_job("default", job)
    while True:
        status = batch.read_namespaced_job_status(name, "default").status
        if status.succeeded:
            break
        time.sleep(0.1)
    elapsed = time.perf_counter() - start
    batch.delete_namespaced_job(name, "default", propagation_policy="Background")
    return elapsed


def module_run(kubeconfig: str, node: str) -> tuple[float, float]:
    args = {"ANSIBLE_MODULE_ARGS": {"kubeconfig": kubeconfig, "per_node": True, "nodes": [node],
                                    "require_logs": False, "timeout": 60}}
    path = Path("/tmp/k8sgpu-bench-verify-args.json")
    path.write_text(json.dumps(args))
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "ansible_collections.k8sgpu.nvidia.plugins.modules.k8s_gpu_verify", str(path)],
                         cwd=ROOT / "collections", capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    out = json.loads(res.stdout)
    if out.get("failed"):
        raise SystemExit(out["msg"])
    return out["elapsed_s"], wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=str(ROOT / ".lab" / "kubeconfig"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--node", default="k8sgpu-lab-gpu-1")
    p.add_argument("--json", default=str(ROOT / "bench" / "output" / "verify_latency.json"))
    a = p.parse_args()
    batch = client.BatchV1Api(config.new_client_from_config(config_file=a.kubeconfig))
    raw, mod, wall = [], [], []
    for _run in range(a.runs):
        raw.append(raw_job(batch, a.node))
        m, w = module_run(a.kubeconfig, a.node)
        mod.append(m)
        wall.append(w)
        time.sleep(1)
    overhead = [m - r for m, r in zip(mod, raw)]
    result = {
        "runs": a.runs, "node": a.node, "machine": f"{os.uname().nodename} {os.cpu_count()} CPUs, lab control plane on the same machine",
        "raw_job_s": [round(x, 2) for x in raw], "module_elapsed_s": mod, "module_process_wall_s": [round(x, 2) for x in wall],
        "overhead_s": [round(x, 2) for x in overhead],
        "median": {"raw_job_s": round(statistics.median(raw), 2), "module_elapsed_s": round(statistics.median(mod), 2),
                   "module_process_wall_s": round(statistics.median(wall), 2), "overhead_s": round(statistics.median(overhead), 2)},
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
