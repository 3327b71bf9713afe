"""prometheus_stack against the lab's real API server: kube-prometheus-stack 88.5.3 (../shared/charts) installed by
kubernetes.core.helm with Helm built from the Go module proxy (lab/build-binaries.sh helm). Check mode installs
nothing; the release is deployed and reported by Helm and its objects (Prometheus, Alertmanager, their CRDs) accepted
by the API server; a second run and check/diff mode change nothing; the monitoring playbook's switch installs the
stack first and its Prometheus selects the GPU ServiceMonitor and PrometheusRule (the Prometheus CR's selectors
against their labels and namespaces), its Grafana sidecar the dashboard ConfigMap, its Alertmanager routes the GPU
alerts to the site's receiver and the adapter asks its Prometheus Service; absent uninstalls the release and leaves
the CRDs. The lab's CRDs and everything not the test's are left as they were (the CRDs Helm added are removed at the
end). kwok runs no container: the stack's pods are Running without running. The GPU alerts reach the site's receiver
(a local webhook) through a real Alertmanager (built from the Go module proxy) running the configuration the chart
rendered from the role's values; that the stack's Prometheus sends to that Alertmanager is the Prometheus CR's
alerting section (test_install), and the rules' evaluation is test_gpu_alerts.py's (promtool)."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, HELM_DIR, KUBECTL, LAB_CACHE, ROOT, build_for, run
from k8sgpu_testlib.monitoring_lab import LabProcess, free_port, http, wait_for
from k8sgpu_testlib.k8s_api import ignore_404

NS = "k8sgpu-stack"
RELEASE = "kube-prometheus-stack"
FULLNAME = "kube-prometheus-stack"
EXPORTER_NS = "k8sgpu-stack-dcgm"
ALERTS_NS = "k8sgpu-stack-alerts"
CHART_VERSION = "88.5.3"
SHARED_CHART = ROOT.parent / "shared" / "charts" / "kube-prometheus-stack"
# The lab's own monitoring.coreos.com CRDs (other tests apply them): present before the install, so that the test
# proves Helm leaves CRDs it did not create as they are.
LAB_CRDS = ROOT.parent / "shared" / "crds" / "monitoring.coreos.com"
# The same chart with its dependencies in charts/, where ../shared's copy lacks them.
CACHED_CHART = LAB_CACHE / "charts" / f"kube-prometheus-stack-{CHART_VERSION}"
SUBCHARTS = ("crds", "kube-state-metrics", "prometheus-node-exporter", "grafana", "prometheus-windows-exporter")
ALERTMANAGER_BIN = LAB_CACHE / "bin" / f"alertmanager-{os.environ.get('ALERTMANAGER_VERSION', 'v0.31.1')}" / "alertmanager"
VERSION = "operator.prometheus.io/version"
# The site's receiver: a webhook on loopback (the real Alertmanager's test sends there).
WEBHOOK_PORT = free_port()
RECEIVER = {"name": "gpu-oncall", "webhook_configs": [{"url": f"http://127.0.0.1:{WEBHOOK_PORT}/gpu"}]}


def chart_dir() -> Path | None:
    for path in (SHARED_CHART, CACHED_CHART):
        if all((path / "charts" / sub / "Chart.yaml").is_file() for sub in SUBCHARTS):
            return path
    return None


def reduced_chart(dest: Path) -> Path:
    """../shared's chart without the dependencies its charts/ lacks (Helm refuses a chart with one missing, enabled
    or not): Prometheus, Alertmanager, the operator and the CRDs, no Grafana, kube-state-metrics or node-exporter."""
    chart = dest / "kube-prometheus-stack"
    shutil.copytree(SHARED_CHART, chart, copy_function=shutil.copyfile)
    for folder, _dirs, _files in os.walk(chart):
        os.chmod(folder, 0o755)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["dependencies"] = [d for d in meta["dependencies"] if (chart / "charts" / d["name"] / "Chart.yaml").is_file()]
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([str(HELM_DIR / "helm"), "--kubeconfig", KUBECTL[-1], *args], capture_output=True,
                         text=True, timeout=300, check=False)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def monitoring_crds(ext: client.ApiextensionsV1Api) -> set[str]:
    return {c.metadata.name for c in ext.list_custom_resource_definition().items
            if c.metadata.name.endswith(".monitoring.coreos.com")}


def delete_namespaces(core: client.CoreV1Api, names: list[str]) -> None:
    for name in names:
        ignore_404(core.delete_namespace, name)
    for _attempt in range(600):
        left = [n for n in names if n in {ns.metadata.name for ns in core.list_namespace().items}]
        if not left:
            return
        time.sleep(0.2)
    raise AssertionError(f"namespaces {left} not deleted after 120 s")


def selects(selector: dict | None, labels: dict) -> bool:
    """A Kubernetes label selector (None selects nothing, {} everything) against labels."""
    if selector is None:
        return False
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass


class Stack:
    """The module's lab: the chart, the environment of its playbooks, and its reads."""

    def __init__(self, core: client.CoreV1Api, chart: Path, full: bool, repo_url: str, tmp: Path):
        self.core, self.chart, self.full, self.tmp = core, chart, full, tmp
        self.crds: dict[str, tuple] = {}
        self.custom = client.CustomObjectsApi(core.api_client)
        self.apps = client.AppsV1Api(core.api_client)
        self.env = {"PATH": f"{HELM_DIR}:{os.environ['PATH']}"}
        # What the lab cannot or must not run: the admission webhooks (their certificate Jobs, and a webhook the API
        # server would call for every PrometheusRule of the shared lab) and the operator's TLS (from their Secret).
        # The chart from a site's mirror (a chart repository on loopback), at the role's pinned version.
        self.vars = {"prometheus_stack_namespace": NS, "prometheus_stack_chart_repo_url": repo_url,
                     "prometheus_stack_gpu_alert_receiver": RECEIVER,
                     "prometheus_stack_values": {"prometheusOperator": {"admissionWebhooks": {"enabled": False},
                                                                        "tls": {"enabled": False}},
                                                 # the site's own setting, merged into the role's route
                                                 "alertmanager": {"config": {"route": {"group_wait": "1s"}}}}}
        if not full:
            self.vars["prometheus_stack_grafana"] = False
            self.vars["prometheus_stack_values"].update({"kubeStateMetrics": {"enabled": False},
                                                         "nodeExporter": {"enabled": False}})

    def playbook(self, path: str, extra: dict, *args: str) -> subprocess.CompletedProcess:
        return run(["ansible-playbook", "-i", "inventories/lab", "--limit", "localhost", path,
                    "-e", json.dumps({**self.vars, **extra}), *args], env_extra=self.env)

    def role(self, *args: str, **extra) -> subprocess.CompletedProcess:
        return self.playbook("tests/lab/playbooks/role.yml", {"role": "prometheus_stack", **extra}, *args)

    def release(self) -> dict | None:
        out = json.loads(helm("list", "-n", NS, "--all", "-o", "json").stdout or "[]")
        return next((r for r in out if r["name"] == RELEASE), None)

    def prometheus(self) -> dict:
        return self.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheuses",
                                                        f"{FULLNAME}-prometheus")

    def namespace_labels(self, name: str) -> dict:
        return self.core.read_namespace(name).metadata.labels or {}


def changed(res: subprocess.CompletedProcess) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def out(res: subprocess.CompletedProcess) -> str:
    return res.stdout[-6000:] + res.stderr[-3000:]


@pytest.fixture(scope="module")
def stack(request, core, tmp_path_factory):
    chart, full = chart_dir(), True
    if chart is None:
        if not (SHARED_CHART / "Chart.yaml").is_file():
            pytest.skip(f"{SHARED_CHART} is absent: the chart comes from ../shared (not in the repo)")
        # Without its dependencies (Grafana, kube-state-metrics, node-exporter): what needs Grafana is not checked.
        chart, full = reduced_chart(tmp_path_factory.mktemp("chart")), False
    build_for(request.config, ["lab/build-binaries.sh", "helm"])
    ext = client.ApiextensionsV1Api(core.api_client)
    crds_before = monitoring_crds(ext)
    if LAB_CRDS.is_dir():
        res = subprocess.run([*KUBECTL, "apply", "--server-side", "-f", str(LAB_CRDS)], capture_output=True, text=True,
                             check=False)
        assert res.returncode == 0, res.stderr
    # A site's mirror: the chart packaged into a chart repository served on loopback.
    repo = tmp_path_factory.mktemp("chart-repo")
    helm("package", str(chart), "--destination", str(repo))
    helm("repo", "index", str(repo))
    mirror = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietFiles, directory=str(repo)))
    threading.Thread(target=mirror.serve_forever, daemon=True).start()
    s = Stack(core, chart, full, f"http://127.0.0.1:{mirror.server_address[1]}",
              tmp_path_factory.mktemp("prometheus-stack"))
    # CRD name -> (generation, operator version) of those there before the install: a change of spec raises the first.
    s.crds = {c.metadata.name: (c.metadata.generation, (c.metadata.annotations or {}).get(VERSION))
              for c in ext.list_custom_resource_definition().items if c.metadata.name.endswith(".monitoring.coreos.com")}

    def clean():
        if s.release():
            helm("uninstall", RELEASE, "-n", NS, "--wait")
        delete_namespaces(core, [NS, EXPORTER_NS, ALERTS_NS])

    clean()
    yield s
    clean()
    mirror.shutdown()
    mirror.server_close()
    # The CRDs Helm created and those the fixture applied (missing before the module): the lab's own stay.
    added = monitoring_crds(ext) - crds_before
    for name in added:
        ignore_404(ext.delete_custom_resource_definition, name)
    for _attempt in range(300):
        if not monitoring_crds(ext) & added:
            return
        time.sleep(0.2)
    raise AssertionError(f"CRDs {sorted(monitoring_crds(ext) & added)} not deleted after 60 s")


def test_check_mode_installs_nothing(stack):
    res = stack.role("--check")
    assert res.returncode == 0, out(res)
    assert changed(res) >= 2, out(res)  # the namespace and the release
    assert stack.release() is None
    assert NS not in {n.metadata.name for n in stack.core.list_namespace().items}


def test_install(stack):
    res = stack.role()
    assert res.returncode == 0, out(res)
    assert changed(res) >= 2, out(res)
    rel = stack.release()
    assert rel and rel["status"] == "deployed" and rel["chart"] == f"kube-prometheus-stack-{CHART_VERSION}", rel
    # The guide's setting: every ServiceMonitor, PodMonitor, Probe, ScrapeConfig and PrometheusRule of every namespace.
    spec = stack.prometheus()["spec"]
    for kind in ("serviceMonitor", "podMonitor", "probe", "scrapeConfig", "rule"):
        assert spec[f"{kind}Selector"] == {} and spec[f"{kind}NamespaceSelector"] == {}, (kind, spec)
    # Prometheus sends alerts to the release's Alertmanager, which the API server accepted too.
    am = stack.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "alertmanagers",
                                                   f"{FULLNAME}-alertmanager")
    assert am["metadata"]["name"] in json.dumps(spec["alerting"]), spec.get("alerting")
    ext = client.ApiextensionsV1Api(stack.core.api_client)
    crds = {c.metadata.name: (c.metadata.generation, (c.metadata.annotations or {}).get(VERSION))
            for c in ext.list_custom_resource_definition().items if c.metadata.name.endswith(".monitoring.coreos.com")}
    assert {"prometheuses.monitoring.coreos.com", "alertmanagers.monitoring.coreos.com",
            "servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"} <= set(crds)
    # Those already there (the lab's, 0.93.0) are left as they were; Helm created the chart's (0.93.1) missing ones.
    assert {name: crds[name] for name in stack.crds} == stack.crds
    assert all(version == "0.93.1" for name, (_generation, version) in crds.items() if name not in stack.crds), crds
    ns = stack.core.read_namespace(NS).metadata
    assert ns.labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert ns.annotations["k8sgpu.nvidia/created-by"] == "prometheus_stack"
    for name in [f"{FULLNAME}-operator"] + ([f"{RELEASE}-grafana", f"{RELEASE}-kube-state-metrics"] if stack.full else []):
        assert stack.apps.read_namespaced_deployment(name, NS).status.ready_replicas == 1, name  # helm --wait


def test_second_run_and_check_diff_change_nothing(stack):
    res = stack.role()
    assert res.returncode == 0 and changed(res) == 0, out(res)
    res = stack.role("--check", "--diff")
    assert res.returncode == 0 and changed(res) == 0, out(res)
    # The same chart as a local chart (an unpacked directory on the controller): accepted, nothing to change.
    res = stack.role("--check", prometheus_stack_chart_ref=str(stack.chart))
    assert res.returncode == 0 and changed(res) == 0, out(res)
    assert stack.release()["revision"] == "1"


def _sidecar_env(stack: Stack) -> dict:
    grafana = stack.apps.read_namespaced_deployment(f"{RELEASE}-grafana", NS)
    container = next(c for c in grafana.spec.template.spec.containers if c.name == "grafana-sc-dashboard")
    return {e.name: e.value for e in container.env or []}


def test_monitoring_switch_wires_the_gpu_parts(stack, tmp_path):
    res = stack.playbook("playbooks/monitoring.yml", {
        "prometheus_stack_install": True,
        "dcgm_exporter_namespace": EXPORTER_NS, "dcgm_exporter_wait": False, "gpu_alerts_namespace": ALERTS_NS,
        # The adapter's configuration only: nothing answers at the stack's Prometheus Service here.
        "gpu_metrics_adapter_mode": "rules_only", "gpu_metrics_adapter_prometheus_check": "none",
        "gpu_metrics_adapter_output_dir": str(tmp_path)})
    assert res.returncode == 0, out(res)
    spec = stack.prometheus()["spec"]
    # The exporter's ServiceMonitor and the GPU PrometheusRule: selected by the stack's Prometheus.
    sm = stack.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", EXPORTER_NS, "servicemonitors",
                                                   "dcgm-exporter")
    assert selects(spec["serviceMonitorSelector"], sm["metadata"]["labels"]), (spec, sm["metadata"])
    assert selects(spec["serviceMonitorNamespaceSelector"], stack.namespace_labels(EXPORTER_NS))
    assert sm["metadata"]["labels"]["release"] == RELEASE
    rule = stack.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", ALERTS_NS, "prometheusrules",
                                                     "gpu-alerts")
    assert selects(spec["ruleSelector"], rule["metadata"]["labels"]), (spec, rule["metadata"])
    assert selects(spec["ruleNamespaceSelector"], stack.namespace_labels(ALERTS_NS))
    # The dashboard ConfigMap: in Grafana's namespace, with the label its sidecar loads.
    cm = stack.core.read_namespaced_config_map("k8sgpu-gpu-dashboard", NS)
    if stack.full:
        env = _sidecar_env(stack)
        assert (cm.metadata.labels or {}).get(env["LABEL"]) == env["LABEL_VALUE"], (env, cm.metadata.labels)
        assert "NAMESPACE" not in env or env["NAMESPACE"] in ("ALL", NS), env
    # The adapter asks the stack's Prometheus Service.
    values = yaml.safe_load((tmp_path / "prometheus-adapter-values.yaml").read_text())
    url = f"http://{FULLNAME}-prometheus.{NS}.svc:9090"
    assert values["prometheus"]["url"] + ":" + str(values["prometheus"]["port"]) == url, values["prometheus"]
    svc = stack.core.read_namespaced_service(f"{FULLNAME}-prometheus", NS)
    assert 9090 in [p.port for p in svc.spec.ports]
    # Alertmanager routes every GPU alert of the rule to the site's receiver.
    secret = stack.core.read_namespaced_secret(f"alertmanager-{FULLNAME}-alertmanager", NS)
    config = yaml.safe_load(base64.b64decode(secret.data["alertmanager.yaml"]))
    assert RECEIVER in config["receivers"], config["receivers"]
    route = next(r for r in config["route"]["routes"] if r["receiver"] == RECEIVER["name"])
    pattern = re.fullmatch(r'alertname=~"(.*)"', route["matchers"][0]).group(1)
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and all(re.fullmatch(pattern, a) for a in alerts), (pattern, alerts)
    assert not re.fullmatch(pattern, "Watchdog")
    assert config["route"]["group_wait"] == "1s"  # the site's value beside the role's routes
    assert stack.release()["revision"] == "1"  # the stack as installed: the playbook's run changed nothing there


def drop_gpu_parts(stack: Stack) -> None:
    ignore_404(stack.core.delete_namespaced_config_map, "k8sgpu-gpu-dashboard", NS)
    delete_namespaces(stack.core, [EXPORTER_NS, ALERTS_NS])


class _Webhook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received.append(json.loads(body or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


def test_gpu_alerts_reach_the_sites_receiver(stack, request, tmp_path):
    """Each alert of the PrometheusRule (its name and labels, as Prometheus sends it) posted to Alertmanager running
    the chart's configuration arrives at the site's receiver; an alert of the chart's own does not."""
    build_for(request.config, ["lab/build-binaries.sh", "alertmanager"])
    secret = stack.core.read_namespaced_secret(f"alertmanager-{FULLNAME}-alertmanager", NS)
    (tmp_path / "alertmanager.yml").write_bytes(base64.b64decode(secret.data["alertmanager.yaml"]))
    rule = stack.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", ALERTS_NS, "prometheusrules",
                                                     "gpu-alerts")
    gpu_alerts = {r["alert"]: r.get("labels") or {} for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    _Webhook.received = []
    server = ThreadingHTTPServer(("127.0.0.1", WEBHOOK_PORT), _Webhook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    alertmanager = LabProcess("alertmanager-stack", [
        str(ALERTMANAGER_BIN), f"--config.file={tmp_path / 'alertmanager.yml'}", f"--storage.path={tmp_path / 'am'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"], tmp_path)
    try:
        alertmanager.start()
        url = f"http://127.0.0.1:{port}"
        wait_for("Alertmanager", lambda: "OK" in http(f"{url}/-/ready"), 30, log=alertmanager.log)
        sent = [{"labels": {"alertname": name, **labels, "node": GPU_NODES[0], "gpu": "0"}}
                for name, labels in gpu_alerts.items()]
        sent.append({"labels": {"alertname": "KubePodCrashLooping", "severity": "warning", "namespace": NS}})
        req = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps(sent).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (loopback only)
            assert resp.status == 200

        def arrived():
            got = {(n["receiver"], a["labels"]["alertname"]) for n in _Webhook.received for a in n["alerts"]}
            return got if {name for _r, name in got} >= set(gpu_alerts) else None
        got = wait_for("the GPU alerts at the site's receiver", arrived, 60, log=alertmanager.log)
        assert got == {(RECEIVER["name"], name) for name in gpu_alerts}, got
        assert len(gpu_alerts) == 8
    finally:
        alertmanager.stop()
        server.shutdown()
        server.server_close()
        drop_gpu_parts(stack)


def test_absent_uninstalls_the_release_and_leaves_the_crds(stack):
    drop_gpu_parts(stack)  # the dashboard ConfigMap would keep the namespace
    ext = client.ApiextensionsV1Api(stack.core.api_client)
    crds = monitoring_crds(ext)
    res = stack.role(prometheus_stack_state="absent")
    assert res.returncode == 0 and changed(res) >= 2, out(res)
    assert stack.release() is None
    assert NS not in {n.metadata.name for n in stack.core.list_namespace().items}
    assert monitoring_crds(ext) == crds
    res = stack.role(prometheus_stack_state="absent")
    assert res.returncode == 0 and changed(res) == 0, out(res)
