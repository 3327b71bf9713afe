"""Benchmark: Karpenter's scale from zero and back, on the lab, with the karpenter_gpu role's NodePool.

Karpenter v1.14.1's own controller runs with its kwok cloud provider (tests/lab/test_karpenter.py's KarpenterKwok:
the lab's CRDs, a KWOKNodeClass, GPU instance types carrying nvidia.com/gpu); the role applies a NodePool on it
(nvidia.com/gpu limit 1, WhenEmpty after --consolidate-after). Then, RUNS times, from an empty pool:
  pending-to-running   create a pod that requests nvidia.com/gpu (selector and tolerations of the pool) and time
                       until it is Running on a new node; also until the NodeClaim exists and the Node exists;
  empty-to-removed     delete the pod and time until the Node is gone, then until the NodeClaim is gone
                       (consolidateAfter + Karpenter's disruption loop + the node's termination).
kwok "boots" a node at once, so these are Karpenter's own latencies (batching window: idle 1 s, max 10 s;
disruption polling), not an EC2 instance's launch and boot (about 1 to 3 minutes on AWS for a GPU instance,
more with a large AMI).
Run against the lab (make lab): PYTHONPATH=tests/support .venv/bin/python bench/karpenter_scale.py [--runs 5] [--consolidate-after 5s]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))  # KarpenterKwok and its helpers are test_karpenter's, not yet k8sgpu_testlib's
from test_karpenter import KarpenterKwok, kwok_pool_vars, ok, pod, pool_nodes, role  # noqa: E402

from k8sgpu_testlib import LAB_STATE  # noqa: E402


def wait(pred, timeout: float, step: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise TimeoutError(f"not within {timeout} s")


def one_run(core: client.CoreV1Api, karpenter: KarpenterKwok, ns: str, pool: str, i: int) -> dict:
    name = f"bench-{i}"
    t0 = time.monotonic()
    core.create_namespaced_pod(ns, pod(name, pool))
    wait(lambda: karpenter.claims(pool), 120)
    t_claim = time.monotonic() - t0
    wait(lambda: pool_nodes(core, pool), 120)
    t_node = time.monotonic() - t0
    wait(lambda: core.read_namespaced_pod(name, ns).status.phase == "Running", 120)
    t_running = time.monotonic() - t0
    core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait(lambda: not any(p.metadata.name == name for p in core.list_namespaced_pod(ns).items), 60)
    t1 = time.monotonic()
    wait(lambda: not pool_nodes(core, pool), 300, step=0.25)
    t_node_gone = time.monotonic() - t1
    wait(lambda: not karpenter.claims(pool), 300, step=0.25)
    return {"nodeclaim_s": round(t_claim, 2), "node_s": round(t_node, 2), "pending_to_running_s": round(t_running, 2),
            "empty_to_node_removed_s": round(t_node_gone, 2), "empty_to_claim_removed_s": round(time.monotonic() - t1, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--consolidate-after", default="5s")
    a = p.parse_args()
    api = config.new_client_from_config(config_file=str(LAB_STATE / "kubeconfig"))
    core = client.CoreV1Api(api)
    ns = f"k8sgpu-bench-karpenter-{uuid.uuid4().hex[:6]}"
    pool = f"k8sgpu-bench-{ns[-6:]}"
    core.create_namespace({"metadata": {"name": ns}})
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp, KarpenterKwok(api, Path(tmp)) as karpenter:
            ok(role({**kwok_pool_vars(pool, karpenter.node_class), "karpenter_gpu_consolidate_after": a.consolidate_after}))
            for i in range(a.runs):
                r = one_run(core, karpenter, ns, pool, i)
                runs.append(r)
                print(json.dumps({"run": i, **r}), flush=True)
    finally:
        core.delete_namespace(ns, propagation_policy="Background", grace_period_seconds=0)
    summary = {k: {"median": statistics.median(r[k] for r in runs), "min": min(r[k] for r in runs),
                   "max": max(r[k] for r in runs)} for k in runs[0]}
    print(json.dumps({"runs": len(runs), "consolidate_after": a.consolidate_after, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
