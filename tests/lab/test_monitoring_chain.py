"""GPU custom metrics and the GPU-driven HPA, end to end on the lab's real control plane.

stand-in DCGM exporter -> Prometheus (the ServiceMonitor's labels, honor_labels false) -> prometheus-adapter (the
gpu_metrics_adapter role's rules, a real aggregated API server) -> kube-apiserver's aggregator -> the real HPA
controller in kube-controller-manager, which scales a Deployment of GPU pods that kwok runs on the GPU Nodes.
"""
from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import pytest
from kubernetes import client, config

from ansible_output import recap
from conftest import KUBECTL
from k8sgpu_testlib.monitoring_lab import (
    COUNTERS_CSV,
    DASHBOARD_12239,
    EXPORTER_NAMESPACE,
    ROOT,
    Adapter,
    Chain,
    run_role,
    wait_for,
)

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
    out = subprocess.run([*KUBECTL, "get", "--raw", path], capture_output=True, text=True, timeout=30, check=False)
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


# --- no adapter registered yet -------------------------------------------------------------------------------

def test_hpa_without_custom_metrics_api_is_refused(namespace, deployment, api, tmp_path):
    """Runs before the chain fixture registers the adapter: the APIService is absent."""
    reg = client.ApiregistrationV1Api(api)
    if any(s.metadata.name == "v1beta1.custom.metrics.k8s.io" for s in reg.list_api_service().items):
        pytest.skip("another custom metrics adapter is registered in this cluster")
    name = deployment("no-api", replicas=1)
    res = run_role("gpu_autoscaling", hpa_vars(name, gpu_autoscaling_metrics_api_wait=0), tmp_path)
    assert res.returncode != 0
    assert "APIService v1beta1.custom.metrics.k8s.io does not exist" in res.stdout, res.stdout[-3000:]
    assert "gpu_metrics_adapter" in res.stdout
    hpas = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(NS).items
    assert not hpas


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
    assert metric["namespace"] == EXPORTER_NAMESPACE and metric["service"] == "dcgm-exporter"
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


# --- the aggregator verifies the adapter by the role's CA (issue 19) --------------------------------------------

def api_service(api, version: str = "v1beta2") -> client.V1APIService:
    return client.ApiregistrationV1Api(api).read_api_service(f"{version}.custom.metrics.k8s.io")


def available(api, version: str = "v1beta2") -> tuple[str, str, str]:
    cond = next((c for c in api_service(api, version).status.conditions or [] if c.type == "Available"), None)
    return (cond.status, cond.reason or "", cond.message or "") if cond else ("Unknown", "", "")


def test_aggregator_reaches_the_adapter_verified_by_the_roles_ca(chain, api):
    secret = client.CoreV1Api(api).read_namespaced_secret(f"{ADAPTER}-serving-cert", NS)
    assert secret.type == "kubernetes.io/tls" and set(secret.data) == {"ca.crt", "tls.crt", "tls.key"}
    ca_pem = base64.b64decode(secret.data["ca.crt"]).decode()
    for version in ("v1beta1", "v1beta2"):
        spec = api_service(api, version).spec
        assert not spec.insecure_skip_tls_verify
        assert base64.b64decode(spec.ca_bundle).decode() == ca_pem
        assert (spec.service.name, spec.service.namespace) == (ADAPTER, NS)
        assert available(api, version)[0] == "True", available(api, version)
    # The files the adapter serves are the Secret's (external mode writes them; the key 0600).
    out = chain.workdir / "adapter"
    assert (out / "tls.crt").read_text() == base64.b64decode(secret.data["tls.crt"]).decode()
    assert (out / "tls.key").stat().st_mode & 0o777 == 0o600
    assert raw("/apis/custom.metrics.k8s.io/v1beta2")["groupVersion"] == "custom.metrics.k8s.io/v1beta2"


def test_aggregator_refuses_an_adapter_serving_another_certificate(chain, api):
    """The same adapter on the same port with its own self-signed certificate: the CA in the caBundle did not sign
    it, so the aggregator marks the APIServices unavailable (FailedDiscoveryCheck, x509) and forwards nothing."""
    port = chain.adapter.port
    chain.adapter.stop()
    other = Adapter(chain.kubeconfig, chain.adapter.config_file, chain.prometheus.url, chain.workdir / "other",
                    relist_interval=chain.relist_interval, name="prometheus-adapter-other", port=port)
    try:
        other.start()
        refused = wait_for("the aggregator to refuse the other certificate",
                           lambda: (a := available(api))[0] == "False" and "x509" in a[2] and a, 150, interval=2)
        assert refused[1] == "FailedDiscoveryCheck", refused
        assert "certificate signed by unknown authority" in refused[2] or "x509" in refused[2], refused
        with pytest.raises(ValueError):
            raw(f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/pods/*/{UTIL}")
    finally:
        other.stop()
        chain.adapter.start()
    wait_for("the aggregator to reach the adapter again", lambda: available(api)[0] == "True", 150, interval=2)


@pytest.fixture
def metrics_reader_user(api):
    """A user bound to the role's custom-metrics-reader ClusterRole alone. (The HPA controller's own service account
    is no test of it: Kubernetes' bootstrap role system:controller:horizontal-pod-autoscaler already reads every
    custom metric.)"""
    rbac = client.RbacAuthorizationV1Api(api)
    user, binding = "k8sgpu-test:metrics-reader", "k8sgpu-test:metrics-reader"
    rbac.create_cluster_role_binding({
        "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"k8sgpu:{ADAPTER}:custom-metrics-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    yield user
    rbac.delete_cluster_role_binding(binding)


def test_metrics_reader_may_read_the_rules_metrics_and_nothing_else(chain, deployment, api, metrics_reader_user):
    """The ClusterRole the HPA's service account is bound to lists <resource>/<metric> of the rules, no wildcard:
    a user bound to it alone reads the rules' metric through the aggregator and is refused any other."""
    role_obj = client.RbacAuthorizationV1Api(api).read_cluster_role(f"k8sgpu:{ADAPTER}:custom-metrics-reader")
    assert [(r.api_groups, sorted(r.resources), sorted(r.verbs)) for r in role_obj.rules] == [
        (["custom.metrics.k8s.io"], [f"pods/{UTIL}", f"services/{AVG}"], ["get", "list"])]

    def get(path: str) -> subprocess.CompletedProcess:
        return subprocess.run([*KUBECTL, "get", "--raw", path, "--as", metrics_reader_user], capture_output=True,
                              text=True, timeout=30, check=False)

    app = deployment("rbac", replicas=1)
    wait_for("a running GPU pod", lambda: len(running_pods(api, app)) == 1, 60)
    chain.standin.set(UTIL, 10, namespace=NS)
    base = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{NS}"
    wait_for("the pod's metric through the aggregator", lambda: raw(f"{base}/pods/*/{UTIL}")["items"], 90)
    allowed = get(f"{base}/pods/*/{UTIL}")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["items"]
    refused = get(f"{base}/pods/*/DCGM_FI_DEV_FB_USED")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr


# --- the guide's autoscaling test -----------------------------------------------------------------------------

def hpa_vars(target: str, **more) -> dict:
    return {"gpu_autoscaling_target_name": target, "gpu_autoscaling_namespace": NS, "gpu_autoscaling_min_replicas": 1,
            "gpu_autoscaling_max_replicas": 3, "gpu_autoscaling_target_value": 50,
            "gpu_autoscaling_scale_down": {"stabilizationWindowSeconds": 5, "selectPolicy": "Max",
                                           "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]},
            **more}


def hpa_state(api, name: str) -> tuple[int, dict]:
    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(name, NS)
    conds = {c.type: (c.status, c.reason) for c in hpa.status.conditions or []}
    return hpa.status.desired_replicas, conds


def replicas(api, name: str) -> int:
    return client.AppsV1Api(api).read_namespaced_deployment(name, NS).spec.replicas


@pytest.mark.parametrize("metric_type", ["pods", "object"])
def test_hpa_scales_gpu_pods_up_at_90_and_down_at_0(chain, deployment, api, tmp_path, metric_type):
    name = deployment(f"infer-{metric_type}", replicas=1)
    wait_for("1 running GPU pod", lambda: len(running_pods(api, name)) == 1, 60)
    chain.standin.set(UTIL, 0, namespace=NS)
    res = run_role("gpu_autoscaling", hpa_vars(name, gpu_autoscaling_metric_type=metric_type), tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    assert changed(res) == 1

    # At 0 % the HPA finds its metric and stays at one replica.
    wait_for("the HPA to read the metric", lambda: hpa_state(api, name)[1].get("ScalingActive") == ("True", "ValidMetricFound"), 90)
    assert replicas(api, name) == 1

    chain.standin.set(UTIL, 90, namespace=NS)  # every GPU pod of the namespace, including those the HPA adds
    wait_for("the HPA to scale up to 3", lambda: replicas(api, name) == 3, 150)
    desired, conds = hpa_state(api, name)
    assert desired == 3 and conds["ScalingActive"] == ("True", "ValidMetricFound")
    assert conds["ScalingLimited"][0] == "True"  # 90 % would want more than maxReplicas
    wait_for("3 running GPU pods", lambda: len(running_pods(api, name)) == 3, 60)

    chain.standin.set(UTIL, 0, namespace=NS)
    wait_for("the HPA to scale down to 1", lambda: replicas(api, name) == 1, 150)
    assert hpa_state(api, name)[1]["ScalingActive"] == ("True", "ValidMetricFound")

    res = run_role("gpu_autoscaling", hpa_vars(name, gpu_autoscaling_state="absent"), tmp_path)
    assert res.returncode == 0 and changed(res) == 1, res.stdout[-3000:]


# --- idempotence and check mode -------------------------------------------------------------------------------

def test_adapter_second_run_and_check_mode_change_nothing(chain, api, tmp_path):
    config_file = chain.workdir / "adapter" / "prometheus-adapter-config.yaml"
    cert_file = chain.workdir / "adapter" / "tls.crt"
    before = config_file.stat().st_mtime_ns, cert_file.stat().st_mtime_ns
    secret_before = client.CoreV1Api(api).read_namespaced_secret(f"{ADAPTER}-serving-cert", NS).metadata
    ca_before = api_service(api).spec.ca_bundle
    for flags in ((), ("--check", "--diff")):
        res = run_role("gpu_metrics_adapter", chain.adapter_vars(), tmp_path, *flags)
        assert res.returncode == 0, res.stdout[-3000:]
        assert changed(res) == 0, res.stdout[-3000:]
        assert "BEGIN EC PRIVATE KEY" not in res.stdout and "PRIVATE KEY" not in res.stdout
    assert (config_file.stat().st_mtime_ns, cert_file.stat().st_mtime_ns) == before
    # The certificate was not made again: same Secret, same CA in the APIServices.
    secret_after = client.CoreV1Api(api).read_namespaced_secret(f"{ADAPTER}-serving-cert", NS).metadata
    assert secret_after.resource_version == secret_before.resource_version
    assert api_service(api).spec.ca_bundle == ca_before


def test_adapter_in_cluster_check_mode_is_accepted_by_the_api_server(chain, api, tmp_path):
    """in_cluster mode against the real API server in check mode (server-side dry run): every object validates,
    the run reports changes, and nothing is created."""
    extra = chain.adapter_vars(gpu_metrics_adapter_mode="in_cluster", gpu_metrics_adapter_name="mon-b-incluster",
                               gpu_metrics_adapter_image_digest="sha256:" + "a" * 64)
    res = run_role("gpu_metrics_adapter", extra, tmp_path, "--check", "--diff")
    assert res.returncode == 0, res.stdout[-3000:]
    assert changed(res) >= 1
    assert "mon-b-incluster" in res.stdout and "prometheus-adapter:v0.12.0@sha256:" in res.stdout
    deployments = client.AppsV1Api(api).list_namespaced_deployment(NS).items
    assert "mon-b-incluster" not in {d.metadata.name for d in deployments}


def test_hpa_second_run_and_check_mode_change_nothing(chain, deployment, api, tmp_path):
    name = deployment("idem", replicas=1)
    check = run_role("gpu_autoscaling", hpa_vars(name), tmp_path, "--check", "--diff")
    assert check.returncode == 0 and changed(check) == 1, check.stdout[-3000:]
    hpas = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(NS).items
    assert name not in {h.metadata.name for h in hpas}, "check mode created the HPA"
    assert run_role("gpu_autoscaling", hpa_vars(name), tmp_path).returncode == 0
    for flags in ((), ("--check", "--diff")):
        res = run_role("gpu_autoscaling", hpa_vars(name), tmp_path, *flags)
        assert res.returncode == 0 and changed(res) == 0, res.stdout[-3000:]
    res = run_role("gpu_autoscaling", hpa_vars(name, gpu_autoscaling_state="absent"), tmp_path)
    assert res.returncode == 0 and changed(res) == 1, res.stdout[-3000:]


# --- bad input ------------------------------------------------------------------------------------------------

def test_hpa_target_missing_is_named(chain, tmp_path):
    res = run_role("gpu_autoscaling", hpa_vars("no-such-inference"), tmp_path)
    assert res.returncode != 0
    assert f"Deployment {NS}/no-such-inference does not exist" in res.stdout
    assert "gpu_autoscaling_target_name" in res.stdout


def test_prometheus_that_does_not_answer_is_named(tmp_path):
    from k8sgpu_testlib.monitoring_lab import free_port

    port = free_port()
    for url, via in ((f"http://127.0.0.1:{port}", "direct"), (f"http://nothing.{NS}.svc:9090", "service_proxy")):
        extra = {"gpu_metrics_adapter_mode": "rules_only", "gpu_metrics_adapter_output_dir": str(tmp_path / "out"),
                 "gpu_metrics_adapter_prometheus_url": url, "gpu_metrics_adapter_prometheus_check": "auto"}
        res = run_role("gpu_metrics_adapter", extra, tmp_path)
        assert res.returncode != 0, res.stdout[-2000:]
        assert f"Prometheus at {url} does not answer ({via}:" in res.stdout, res.stdout[-2000:]
        assert not (tmp_path / "out" / "prometheus-adapter-config.yaml").exists()


# --- dashboards -----------------------------------------------------------------------------------------------

def dashboards() -> list:
    found = [pytest.param(p, id=p.name) for p in sorted((ROOT / "roles" / "gpu_dashboard" / "files").glob("*.json"))]
    found.append(pytest.param(DASHBOARD_12239, id="grafana-12239",
                              marks=pytest.mark.skipif(not DASHBOARD_12239.exists(), reason="../shared absent")))
    return found


@pytest.mark.parametrize("path", dashboards())
def test_every_dashboard_query_evaluates_and_returns_series(chain, deployment, api, path: Path):
    from k8sgpu_testlib.monitoring_lab import dashboard_queries

    app = deployment("dash-" + re.sub(r"[^a-z0-9]+", "-", path.stem.lower())[:40].strip("-"), replicas=1)
    wait_for("a running GPU pod", lambda: len(running_pods(api, app)) == 1, 60)
    queries = dashboard_queries(json.loads(path.read_text()))
    assert queries, f"{path.name} has no Prometheus queries"
    empty = {}
    for where, expr in queries:
        try:
            result = wait_for(f"{where}: {expr}", lambda e=expr: chain.prometheus.query(e), 40, interval=2)
        except TimeoutError as exc:
            empty[where] = str(exc)[:300]
            continue
        assert result
    assert not empty, f"{path.name}: queries without series: {empty}"
