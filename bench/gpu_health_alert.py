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

from k8sgpu_testlib.gpu_health_lab import (EVALUATION_S, FLOOR_S, FOR_S, GROUP_WAIT_S, SCRAPE_S, TAINT, AlertChain,
                                           install_standins, is_state, missing, remove_standins, restore, snapshot,
                                           state)
from k8sgpu_testlib.monitoring_lab import GPU_NODES, LAB_STATE, wait_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if missing():
        raise SystemExit(missing())
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(LAB_STATE / "kubeconfig")))
    node = GPU_NODES[0]
    before = snapshot(core, node)
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
            wait_for("the Node tainted", lambda: TAINT in state(core, node)[1], 300, interval=0.1)
            tainted = time.time()
            wait_for("the Node drained", lambda: is_state(core, node, "quarantined"), 300, interval=0.1)
            drained = time.time()
            wait_for("the run to end", chain.idle, 300)
            chain.clear(node)
            wait_for("the Node back", lambda: is_state(core, node, "returned", cordoned=False, tainted=False), 300)
            wait_for("the run to end", chain.idle, 300)
            rows.append({"run": i + 1, "tainted_s": round(tainted - injected, 1), "drained_s": round(drained - injected, 1)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        chain.stop()
        restore(core, node, before)
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
