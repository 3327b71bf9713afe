"""Measurements of a tests/gpu/k8s-node.sh run, from its times file (the
script's own marks), watch.py's timeline (API state polled every 0.2 s, so
each time below is good to about 0.2 s) and the Jobs' pod logs.

    measure.py TIMES TIMELINE.jsonl PODLOG_DIR NODE_NAME
"""
from __future__ import annotations

import json
import os
import re
import sys


def main(argv: list[str]) -> int:
    times_path, timeline_path, podlogs, node = argv[1:5]
    marks: dict[str, float] = {}
    if os.path.exists(times_path):
        for line in open(times_path, encoding="utf-8"):
            k, v = line.split()
            marks.setdefault(k, float(v))
    events = [json.loads(line) for line in open(timeline_path, encoding="utf-8")] if os.path.exists(timeline_path) else []
    events = [e for e in events if "key" in e]

    def first(pred) -> float | None:
        return next((e["t"] for e in events if pred(e)), None)

    def span(a: float | None, b: float | None) -> str:
        return f"{b - a:7.1f} s" if a is not None and b is not None else "    n/a"

    print("== cluster start (script marks)")
    for k in ("apiserver_ready", "containerd_ready", "images_imported", "kubelet_start", "node_registered", "node_ready"):
        if k in marks:
            print(f"  {k:18s} +{marks[k] - marks['start']:6.1f} s")
    nk = f"node/{node}"
    gpu1 = first(lambda e: e["key"] == nk and e.get("gpu") not in (None, "0"))
    gpu4 = first(lambda e: e["key"] == nk and e.get("gpu") == "4")

    def dp(e: dict) -> bool:
        return e["key"].startswith("pod/kube-system/nvidia-device-plugin")

    dp_seen = first(dp)
    dp_running = first(lambda e: dp(e) and e.get("container") == "running")
    print("== the Node advertising nvidia.com/gpu")
    print(f"  kubelet start -> Node advertises nvidia.com/gpu      {span(marks.get('kubelet_start'), gpu1)}"
          "  (includes preflight, host and kubernetes playbooks)")
    print(f"  device plugin pod created -> container running       {span(dp_seen, dp_running)}")
    print(f"  device plugin container running -> nvidia.com/gpu   {span(dp_running, gpu1)}")
    print(f"  time-slicing playbook start -> nvidia.com/gpu: 4     {span(marks.get('play_slicing_start'), gpu4)}")

    print("== cuda-vector-add Jobs (created -> Complete; overhead = that minus the process's own run time)")
    jobs = sorted({e["key"] for e in events if e["key"].startswith("job/")}, key=lambda k: first(lambda e: e["key"] == k))
    for jk in jobs:
        ns, name = jk.split("/")[1:]
        created = first(lambda e: e["key"] == jk)
        complete = first(lambda e: e["key"] == jk and e.get("complete") == "True")

        def pk(e: dict, prefix: str = f"pod/{ns}/{name}-") -> bool:
            return e["key"].startswith(prefix)

        pod_seen = first(pk)
        running = first(lambda e: pk(e) and e.get("container") == "running")
        ended = first(lambda e: pk(e) and str(e.get("container")).startswith("terminated"))
        pod_keys = {e["key"] for e in events if pk(e)}
        log, process_s, passed = "", None, False
        for key in pod_keys:
            path = os.path.join(podlogs, f"{ns}_{key.split('/')[2]}.log")
            if os.path.exists(path):
                log = open(path, encoding="utf-8").read()
                m = re.search(r"vectorAdd: ([0-9.]+) s in the process", log)
                process_s = float(m.group(1)) if m else None
                passed = "Test PASSED" in log
        print(f"  {name}: log says Test PASSED: {passed}")
        print(f"    Job created -> pod created         {span(created, pod_seen)}")
        print(f"    pod created -> container running   {span(pod_seen, running)}")
        print(f"    container running -> terminated    {span(running, ended)}")
        print(f"    terminated -> Job Complete         {span(ended, complete)}")
        print(f"    Job created -> Complete (Test PASSED) {span(created, complete)}")
        if process_s is not None and created is not None and complete is not None:
            print(f"    process's own run time {process_s:.3f} s; overhead beyond it {complete - created - process_s:.1f} s")

    print("== playbooks (wall time)")
    for k in sorted(k for k in marks if k.startswith("play_") and k.endswith("_start")):
        name = k[len("play_"):-len("_start")]
        print(f"  {name:12s} {span(marks[k], marks.get(f'play_{name}_end'))}")
    print(f"  site.yml's steps, first run (with the containerd restart) {span(marks.get('site_first_start'), marks.get('site_first_end'))}")
    print(f"  site.yml, whole, second run                               {span(marks.get('site_start'), marks.get('site_end'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
