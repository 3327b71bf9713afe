"""Benchmark: a GPU fault to its Node tainted and to drained, through the alert chain, against the floor the intervals
set (issue 39 item 4).

Chain (k8sgpu_testlib.gpu_health_lab.AlertChain, tests/support/): the stand-in DCGM exporter -> Prometheus (scrape and
evaluation every S s) with the gpu_alerts role's rules (GPUXidError, `for` F) -> Alertmanager (the receiver the rulebook
documents, group_wait G) -> ansible-rulebook with ansible.eda's alertmanager source and the rulebook
k8sgpu.nvidia.gpu_health -> ansible-playbook k8sgpu.nvidia.health (policy quarantine) on the lab's GPU host and Node.

Per run, RUNS times, after a random 0-2 s pause (so the fault falls at a random phase of the scrape and evaluation
clocks): Xid 79 on one GPU of k8sgpu-lab-gpu-1 (the exporter's series and the host's kernel log); the time until its
Node carries the taint nvidia.com/gpu-health (tainted) and until it is cordoned with the record `quarantined`
(drained: node_maintenance's drain, no pod to evict); then the fault cleared and the Node back in service before the
next run (not timed). Floor: F + 2 S + G (the series scraped, the rule evaluated, the group's first notification),
with no processing time; the rest is ansible-rulebook's start of ansible-playbook and the playbook's own tasks up to
the taint (the health read of the host) and to the drain.

Run against the lab (make lab), nothing else using it: PYTHONPATH=tests/support .venv/bin/python bench/gpu_health_alert.py [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from k8sgpu_testlib.gpu_health_lab import (EVALUATION_S, FLOOR_S, FOR_S, GROUP_WAIT_S, SCRAPE_S, AlertChain,
                                           install_standins, missing, remove_standins)
from k8sgpu_testlib.monitoring_lab import GPU_NODES, LAB_STATE, wait_for

TAINT = "nvidia.com/gpu-health"
RECORD = "k8sgpu.nvidia/gpu-health"
MAINTENANCE = ["k8sgpu.nvidia/cordoned-for-maintenance", "k8sgpu.nvidia/gpus-before-maintenance",
               "k8sgpu.nvidia/host-gpus-before-maintenance"]


def node_state(core: client.CoreV1Api, name: str) -> tuple[bool, set, dict | None]:
    node = core.read_node(name)
    text = (node.metadata.annotations or {}).get(RECORD)
    return bool(node.spec.unschedulable), {t.key for t in node.spec.taints or []}, json.loads(text) if text else None


def is_state(core: client.CoreV1Api, name: str, record_state: str, cordoned: bool) -> bool:
    unschedulable, _taints, record = node_state(core, name)
    return unschedulable == cordoned and record is not None and record["state"] == record_state


def until(probe, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return time.time()
        time.sleep(0.1)
    raise TimeoutError("not within the time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if missing():
        raise SystemExit(missing())
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(LAB_STATE / "kubeconfig")))
    node = GPU_NODES[0]
    before = core.read_node(node)
    work = Path(tempfile.mkdtemp(prefix="k8sgpu-bench-gpu-health-"))
    site = {**json.loads(install_standins(work).read_text()), "gpu_health_policy": "quarantine",
            "k8sgpu_max_unavailable": 1}
    chain = AlertChain(work / "chain", site, core)
    rows = []
    try:
        chain.start()
        for i in range(args.runs):
            time.sleep(random.uniform(0, 2))
            injected = chain.inject(node)
            tainted = until(lambda: TAINT in node_state(core, node)[1])
            drained = until(lambda: is_state(core, node, "quarantined", cordoned=True))
            wait_for("the run to end", chain.idle, 300)
            chain.clear(node)
            until(lambda: is_state(core, node, "returned", cordoned=False) and TAINT not in node_state(core, node)[1])
            wait_for("the run to end", chain.idle, 300)
            rows.append({"run": i + 1, "tainted_s": round(tainted - injected, 1), "drained_s": round(drained - injected, 1)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        chain.stop()
        # The Node as it was: the role's taint and annotations gone, the cordon as before.
        node_now = core.read_node(node)
        taints = [t.to_dict() for t in node_now.spec.taints or [] if t.key != TAINT]
        core.patch_node(node, {"spec": {"unschedulable": before.spec.unschedulable or None,
                                        "taints": [{k: v for k, v in t.items() if v is not None} for t in taints]},
                               "metadata": {"annotations": {k: None for k in [RECORD, *MAINTENANCE]
                                                            if k not in (before.metadata.annotations or {})}}})
        remove_standins()
    runs = chain.runs()
    tainted = [r["tainted_s"] for r in rows]
    drained = [r["drained_s"] for r in rows]
    print(json.dumps({"runs": rows, "floor_s": FLOOR_S, "for_s": FOR_S, "scrape_s": SCRAPE_S,
                      "evaluation_s": EVALUATION_S, "group_wait_s": GROUP_WAIT_S,
                      "median_tainted_s": statistics.median(tainted), "median_drained_s": statistics.median(drained),
                      "playbook_runs": len(runs), "playbook_run_s": [round(e - s, 1) for s, e, _rc in runs if e]}))


if __name__ == "__main__":
    main()
