"""GPU custom metrics and the GPU-driven HPA, end to end on the lab's real control plane.

stand-in DCGM exporter -> Prometheus (the ServiceMonitor's labels, honor_labels false) -> prometheus-adapter (the
gpu_metrics_adapter role's rules, a real aggregated API server) -> kube-apiserver's aggregator -> the real HPA
controller in kube-controller-manager, which scales a Deployment of GPU pods that kwok runs on the GPU Nodes.
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from ansible_output import recap
from monitoring_lab import COUNTERS_CSV, DASHBOARD_12239, ROOT, Chain, run_role, wait_for

NS = "k8sgpu-mon-b"
ADAPTER = "prometheus-adapter-mon-b"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
AVG = "DCGM_FI_DEV_GPU_UTIL_AVG"

pytestmark = pytest.mark.skipif(not COUNTERS_CSV.exists(),
                                reason=f"{COUNTERS_CSV} absent: the stand-in exporter serves the exporter's counters "
                                       "from ../shared (not part of the project)")


def changed(res: subprocess.CompletedProcess) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def raw(path: str) -> dict:
    """kubectl get --raw through the API server (and its aggregator)."""
    out = subprocess.run(["kubectl", "get", "--raw", path], capture_output=True, text=True, timeout=30, check=False)
    if out.returncode:
        raise ValueError(out.stderr.strip())
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def api(kubeconfig):
    return config.new_client_from_config(config_file=kubeconfig)


@pytest.fixture(scope="module")
def namespace(api):
    core = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": NS}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    yield NS
    core.delete_namespace(NS)


@pytest.fixture(scope="module")
def chain(kubeconfig, namespace, tmp_path_factory):
    chain = Chain(kubeconfig, tmp_path_factory.mktemp("monitoring"), namespace, adapter_name=ADAPTER)
    try:
        yield chain.start()
    finally:
        chain.stop()


def gpu_deployment(name: str, replicas: int = 1) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {"type": "kwok"}, "containers": [{
                "name": "inference", "image": "registry.example/inference:1.0",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}]}}},
    }


@pytest.fixture
def deployment(api):
    apps = client.AppsV1Api(api)
    made = []

    def make(name: str, replicas: int = 1) -> str:
        apps.create_namespaced_deployment(NS, gpu_deployment(name, replicas))
        made.append(name)
        return name

    yield make
    for name in made:
        apps.delete_namespaced_deployment(name, NS, propagation_policy="Foreground")


def running_pods(api, app: str) -> list[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"app={app}").items
    return sorted(p.metadata.name for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp)


# --- the metrics ----------------------------------------------------------------------------------------------

def test_standin_serves_the_exporters_labels_for_gpu_pods(chain, deployment, api):
    app = deployment("labels", replicas=2)
    pods = wait_for("2 running GPU pods", lambda: (p := running_pods(api, app)) and len(p) == 2 and p, 60)
    chain.standin.set(UTIL, 42, namespace=NS, pod=pods[0])

    def series():
        found = chain.prometheus.query(f'{UTIL}{{exported_namespace="{NS}"}}')
        return found if {s["metric"]["exported_pod"] for s in found} == set(pods) else None

    found = wait_for("Prometheus to have both pods' GPUs", series, 30)
    metric = next(s["metric"] for s in found if s["metric"]["exported_pod"] == pods[0])
    # The exporter's own labels, the ServiceMonitor's target labels, and the pod's labels renamed (honor_labels false).
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} <= set(metric)
    assert metric["namespace"] == "gpu-monitoring" and metric["service"] == "dcgm-exporter"
    assert metric["job"] == "dcgm-exporter" and metric["endpoint"] == "metrics"
    assert metric["pod"].startswith("dcgm-exporter-") and metric["exported_container"] == "inference"
    assert metric["node"] == metric["Hostname"]
    values = {s["metric"]["exported_pod"]: float(s["value"][1]) for s in found}
    wait_for("42 % on the first pod", lambda: float(chain.prometheus.query(
        f'{UTIL}{{exported_pod="{pods[0]}"}}')[0]["value"][1]) == 42, 20)
    assert values.get(pods[1]) == 0


def test_custom_metrics_api_serves_gpu_util_per_pod_and_the_avg_object_metric(chain, deployment, api):
    app = deployment("metrics", replicas=2)
    pods = wait_for("2 running GPU pods", lambda: (p := running_pods(api, app)) and len(p) == 2 and p, 60)
    chain.standin.set(UTIL, 30, namespace=NS, pod=pods[0])
    chain.standin.set(UTIL, 70, namespace=NS, pod=pods[1])

    def per_pod():
        items = raw(f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{NS}/pods/*/{UTIL}")["items"]
        got = {i["describedObject"]["name"]: i["value"] for i in items}
        return got if got.get(pods[0]) == "30" and got.get(pods[1]) == "70" else None

    got = wait_for("per-pod GPU utilisation through the aggregator", per_pod, 90)
    assert got[pods[0]] == "30"

    def average():
        # v1beta2 answers a list even for one object; v1beta1 the same through the HPA's client.
        answer = raw(f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/services/dcgm-exporter/{AVG}")
        item = (answer.get("items") or [answer])[0]
        return item if item.get("value") == "50" else None

    item = wait_for("the object metric on Service/dcgm-exporter", average, 60)
    assert item["describedObject"]["kind"] == "Service" and item["metric"]["name"] == AVG
    discovery = raw("/apis/custom.metrics.k8s.io/v1beta1")
    names = {r["name"] for r in discovery["resources"]}
    assert f"pods/{UTIL}" in names and f"services/{AVG}" in names
