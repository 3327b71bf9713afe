"""Benchmark: time from a GPU utilisation step to the HPA's new replica count, against the floor the intervals set.

Chain (k8sgpu_testlib.monitoring_lab, tests/support/): stand-in DCGM exporter -> Prometheus (scrape interval S) -> prometheus-adapter
(relist R, which only matters for metric names it has not seen) -> aggregator -> the real HPA controller in
kube-controller-manager (sync period H: 15 s by default, 5 s in the lab (lab/lab.sh, K8SGPU_LAB_HPA_SYNC_PERIOD), read
from the running controller manager) -> Deployment of GPU pods on kwok nodes.

Per step, RUNS times, after a random 1-H s pause (so the step falls at a random phase of the scrape and sync
clocks), with the HPA at its target 50 %:
  up:   utilisation 0 -> 90 % for every GPU pod of the namespace; time until the Deployment's spec.replicas > 1;
  down: utilisation 90 -> 0 %; time until spec.replicas == 1 (scale-down stabilization window W, 0 s here).
Floor (worst case of the intervals, no processing time): S + H (+ W for down); the expected mean of a
uniformly random phase is half of S + H. Reported: measured per run, median, floor, and median/floor.
Run against the lab (make lab): PYTHONPATH=tests/support .venv/bin/python bench/hpa_latency.py [--runs 3]
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

from k8sgpu_testlib.monitoring_lab import LAB_STATE, Chain, hpa_sync_period_s, run_role, wait_for

NS = "k8sgpu-bench-hpa"


def deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {"type": "kwok"}, "containers": [{
                    "name": "inference", "image": "registry.example/inference:1.0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scrape-interval", default="5s")
    args = parser.parse_args()
    sync_s = hpa_sync_period_s()  # the lab's kube-controller-manager --horizontal-pod-autoscaler-sync-period
    kubeconfig = str(LAB_STATE / "kubeconfig")
    api = config.new_client_from_config(config_file=kubeconfig)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespace({"metadata": {"name": NS}})
    work = Path(tempfile.mkdtemp(prefix="hpa-bench-"))
    chain = Chain(kubeconfig, work, NS, adapter_name="prometheus-adapter-bench", scrape_interval=args.scrape_interval)
    try:
        chain.start()
        apps.create_namespaced_deployment(NS, deployment("bench"))
        chain.standin.set("DCGM_FI_DEV_GPU_UTIL", 0, namespace=NS)
        res = run_role("gpu_autoscaling", {
            "gpu_autoscaling_target_name": "bench", "gpu_autoscaling_namespace": NS, "gpu_autoscaling_max_replicas": 2,
            "gpu_autoscaling_target_value": 50,
            "gpu_autoscaling_scale_down": {"stabilizationWindowSeconds": 0, "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15}]}}, work)
        if res.returncode:
            raise SystemExit(res.stdout[-3000:])

        def spec_replicas() -> int:
            return apps.read_namespaced_deployment("bench", NS).spec.replicas

        def active() -> bool:
            hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("bench", NS)
            return any(c.type == "ScalingActive" and c.reason == "ValidMetricFound" for c in hpa.status.conditions or [])

        wait_for("the HPA to read the metric", active, 120)
        scrape_s = float(args.scrape_interval.rstrip("s"))
        results: dict[str, list[float]] = {"up": [], "down": []}
        for _run in range(args.runs):
            for step, value, done in (("up", 90, lambda: spec_replicas() > 1), ("down", 0, lambda: spec_replicas() == 1)):
                time.sleep(random.uniform(1, sync_s))  # a random phase against the HPA's and Prometheus' clocks
                start = time.monotonic()
                chain.standin.set("DCGM_FI_DEV_GPU_UTIL", value, namespace=NS)
                wait_for(f"scale {step}", done, 180, interval=0.2)
                results[step].append(round(time.monotonic() - start, 1))
        floor = scrape_s + sync_s
        report = {
            "scrape_interval_s": scrape_s, "hpa_sync_period_s": sync_s, "floor_s": floor,
            "expected_mean_s": floor / 2,
            **{f"{step}_s": times for step, times in results.items()},
            **{f"{step}_median_s": statistics.median(times) for step, times in results.items()},
            **{f"{step}_median_over_floor": round(statistics.median(times) / floor, 2) for step, times in results.items()},
        }
        report["max_s"] = max(results["up"] + results["down"])
        print(json.dumps(report, indent=2))
    finally:
        chain.stop()
        core.delete_namespace(NS)


if __name__ == "__main__":
    main()
