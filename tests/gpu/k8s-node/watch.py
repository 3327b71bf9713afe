"""Timeline of the one-node cluster for tests/gpu/k8s-node.sh's measurements.

Polls the API server (kubernetes client, every --interval seconds) and writes
one JSON line per change, with this machine's clock (time.time()):
  node   NAME ready=True|False gpu=<nvidia.com/gpu allocatable or null>
  pod    NS/NAME phase=... container=waiting:REASON|running|terminated:REASON (plus startedAt/finishedAt)
  job    NS/NAME complete=True|False failed=...
With --logs DIR, a pod's log is saved to DIR/NAMESPACE_POD.log when its
container ends (a Job's pod, before the Job is deleted). Runs until killed.

    watch.py KUBECONFIG OUT.jsonl [--interval 0.2] [--logs DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from kubernetes import client, config


def _container(pod) -> dict:
    statuses = pod.status.container_statuses or []
    if not statuses:
        return {"container": None}
    st = statuses[0].state
    if st.terminated:
        t = st.terminated
        return {"container": f"terminated:{t.reason}", "exit_code": t.exit_code,
                "started_at": t.started_at.isoformat() if t.started_at else None,
                "finished_at": t.finished_at.isoformat() if t.finished_at else None}
    if st.running:
        return {"container": "running", "started_at": st.running.started_at.isoformat() if st.running.started_at else None}
    return {"container": f"waiting:{st.waiting.reason if st.waiting else '?'}"}


def snapshot(core: client.CoreV1Api, batch: client.BatchV1Api) -> dict[str, dict]:
    state: dict[str, dict] = {}
    for n in core.list_node().items:
        ready = next((c.status for c in n.status.conditions or [] if c.type == "Ready"), None)
        state[f"node/{n.metadata.name}"] = {"ready": ready, "gpu": (n.status.allocatable or {}).get("nvidia.com/gpu")}
    for p in core.list_pod_for_all_namespaces().items:
        state[f"pod/{p.metadata.namespace}/{p.metadata.name}"] = {"phase": p.status.phase, "node": p.spec.node_name, **_container(p)}
    for j in batch.list_job_for_all_namespaces().items:
        conds = {c.type: c.status for c in j.status.conditions or []}
        state[f"job/{j.metadata.namespace}/{j.metadata.name}"] = {"complete": conds.get("Complete"), "failed": conds.get("Failed")}
    return state


def _exit(signum: int, frame: object) -> None:
    sys.exit(0)


def save_log(core: client.CoreV1Api, key: str, directory: str) -> None:
    ns, name = key.split("/", 2)[1:]
    try:
        # The raw body: kubernetes 36's decoded one is str(bytes), "b'...'".
        text = core.read_namespaced_pod_log(name, ns, _preload_content=False).data.decode("utf-8", "replace")
    except Exception as e:  # deleted already: say so in the file
        text = f"(log not read: {str(e)[:200]})\n"
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{ns}_{name}.log"), "w", encoding="utf-8") as f:
        f.write(text)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kubeconfig")
    ap.add_argument("out")
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--logs")
    a = ap.parse_args(argv[1:])
    config.load_kube_config(a.kubeconfig)
    core, batch = client.CoreV1Api(), client.BatchV1Api()
    signal.signal(signal.SIGTERM, _exit)
    last: dict[str, dict] = {}
    with open(a.out, "a", encoding="utf-8", buffering=1) as out:
        while True:
            try:
                now_state = snapshot(core, batch)
            except Exception as e:  # API server restarting or not up yet: keep polling
                now_state = last
                out.write(json.dumps({"t": time.time(), "error": str(e)[:200]}) + "\n")
                time.sleep(1)
            t = time.time()
            for key, val in now_state.items():
                if last.get(key) != val:
                    out.write(json.dumps({"t": t, "key": key, **val}) + "\n")
                    if a.logs and key.startswith("pod/") and str(val.get("container")).startswith("terminated"):
                        save_log(core, key, a.logs)
            for key in last.keys() - now_state.keys():
                out.write(json.dumps({"t": t, "key": key, "deleted": True}) + "\n")
            last = now_state
            time.sleep(a.interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
