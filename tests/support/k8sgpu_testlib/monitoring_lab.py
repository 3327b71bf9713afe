"""The lab's monitoring chain: the DCGM stand-in exporter, Prometheus and prometheus-adapter as host processes.

Shared by the monitoring tests and bench/ (``from k8sgpu_testlib.monitoring_lab import ...``, see the package's
docstring), and runnable by hand:

    python tests/support/k8sgpu_testlib/monitoring_lab.py up      # stand-in, Prometheus, adapter on fixed ports; .lab/monitoring/
    python tests/support/k8sgpu_testlib/monitoring_lab.py down

Every process binds 127.0.0.1, writes its pid to $K8SGPU_LAB_STATE/procs/<name>.pid (lab.sh down stops those)
and is stopped by whoever started it (the fixtures' finalisers).

Prometheus scrapes the stand-in with what the dcgm_exporter role's ServiceMonitor implies once the Prometheus
Operator has turned it into a scrape configuration: per exporter pod, the target labels namespace, pod, container,
service, endpoint and job of the exporter, node=<Node name>, and honor_labels false, so the exporter's own
namespace/pod/container labels arrive as exported_namespace/exported_pod/exported_container, as in a cluster.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]  # tests/support/k8sgpu_testlib/ -> the checkout
LAB_STATE = Path(os.environ.get("K8SGPU_LAB_STATE", ROOT / ".lab"))
CACHE = Path(os.environ.get("K8SGPU_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                            / "k8sgpu-lab"))
PROMETHEUS_VERSION = os.environ.get("PROMETHEUS_VERSION", "v0.316.0")
ADAPTER_VERSION = os.environ.get("PROMETHEUS_ADAPTER_VERSION", "v0.12.0")
PROMETHEUS_BIN = CACHE / "bin" / f"prometheus-{PROMETHEUS_VERSION}"
ADAPTER_BIN = CACHE / "bin" / f"prometheus-adapter-{ADAPTER_VERSION}" / "adapter"
SHARED = ROOT.parent / "shared"
COUNTERS_CSV = SHARED / "dcgm-exporter" / "default-counters.csv"
DASHBOARD_12239 = SHARED / "dcgm-exporter" / "grafana-dashboard-12239.json"
LAB_NAME = os.environ.get("K8SGPU_LAB_NAME", "k8sgpu-lab")
# kube-controller-manager's --horizontal-pod-autoscaler-sync-period when the flag is not given.
HPA_SYNC_DEFAULT_S = 15.0
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_s(text: str) -> float:
    """A Go duration (5s, 1m30s, 500ms) in seconds."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def hpa_sync_period_s() -> float:
    """The HPA controller's sync period of the lab's running kube-controller-manager (lab/lab.sh sets
    --horizontal-pod-autoscaler-sync-period, K8SGPU_LAB_HPA_SYNC_PERIOD), read from its command line."""
    pidfile = LAB_STATE / "kwok" / "clusters" / LAB_NAME / "pids" / "kube-controller-manager.pid"
    try:
        cmdline = Path(f"/proc/{pidfile.read_text(encoding='utf-8').strip()}/cmdline").read_bytes().decode()
    except OSError as exc:
        raise RuntimeError(f"the lab's kube-controller-manager is not running ({pidfile}: {exc}); make lab") from exc
    flag = "--horizontal-pod-autoscaler-sync-period="
    values = [arg[len(flag):] for arg in cmdline.split("\0") if arg.startswith(flag)]
    return go_duration_s(values[-1]) if values else HPA_SYNC_DEFAULT_S


GPU_NODES = [f"{LAB_NAME}-gpu-1", f"{LAB_NAME}-gpu-2"]

# What the dcgm_exporter role deploys (its defaults): the target labels the ServiceMonitor gives every series.
EXPORTER_NAMESPACE = "dcgm-exporter"
# The gpu_metrics_adapter role's default namespace (apart from the exporter's: Pod Security restricted).
ADAPTER_NAMESPACE = "gpu-monitoring"
EXPORTER_SERVICE = "dcgm-exporter"
EXPORTER_CONTAINER = "dcgm-exporter"
EXPORTER_PORT_NAME = "metrics"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(url: str, data: Any = None, timeout: float = 5.0, insecure: bool = False) -> Any:
    """GET (or POST JSON) and decode JSON when the answer is JSON, else return the text."""
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"} if body else {})
    ctx = ssl._create_unverified_context() if insecure else None  # noqa: S323 (self-signed lab adapter)
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310 (loopback only)
        text = resp.read().decode()
        return json.loads(text) if resp.headers.get_content_type() == "application/json" else text


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.5,
             log: Path | None = None) -> Any:
    """Call probe until it returns something truthy; fail naming what and the last error (and the log's tail)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
            last = result
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(interval)
    tail = ""
    if log and log.exists():
        tail = "\n--- last lines of " + str(log) + " ---\n" + "\n".join(log.read_text().splitlines()[-20:])
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s (last: {last!r}){tail}")


@dataclass
class LabProcess:
    """A host process beside the lab, with its pid file under $K8SGPU_LAB_STATE/procs/."""

    name: str
    argv: list[str]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def pidfile(self) -> Path:
        return LAB_STATE / "procs" / f"{self.name}.pid"

    def start(self) -> LabProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                         env={**os.environ, **self.env}, start_new_session=True)
        self.pidfile.write_text(f"{self.proc.pid}\n")
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.pidfile.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# The stand-in exporter
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Standin:
    kubeconfig: str
    workdir: Path
    nodes: list[str] = field(default_factory=lambda: list(GPU_NODES))
    name: str = "dcgm-standin"
    ports: dict[str, int] = field(default_factory=dict)
    control_port: int = 0
    process: LabProcess | None = None

    @property
    def control(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    def start(self) -> Standin:
        if not COUNTERS_CSV.exists():
            raise FileNotFoundError(f"{COUNTERS_CSV} not found: the stand-in needs the exporter's counters CSV")
        self.ports = self.ports or {node: free_port() for node in self.nodes}
        self.control_port = self.control_port or free_port()
        argv = [sys.executable, str(Path(__file__).with_name("dcgm_standin.py")), "--kubeconfig", self.kubeconfig,
                "--counters", str(COUNTERS_CSV), "--control-port", str(self.control_port)]
        for node, port in self.ports.items():
            argv += ["--node", f"{node}={port}"]
        self.process = LabProcess(self.name, argv, self.workdir).start()
        wait_for("the DCGM stand-in", lambda: http(f"{self.control}/health")["ok"], 30, log=self.process.log)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()

    def set(self, metric: str, value: float, **selector: Any) -> None:
        http(f"{self.control}/set", {"metric": metric, "value": value, **selector})

    def reset(self) -> None:
        http(f"{self.control}/reset", {})

    def state(self) -> dict:
        return http(f"{self.control}/state")

    def metrics(self, node: str) -> str:
        return http(f"http://127.0.0.1:{self.ports[node]}/metrics")


def exporter_pod_name(core: Any, node: str, namespace: str, service: str) -> str:
    """The exporter pod on the Node when the dcgm_exporter role's DaemonSet runs there (kwok runs its pods),
    else a name of the same form, so the target labels look as they would in a cluster."""
    try:
        pods = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
    except Exception:  # pylint: disable=broad-except  # namespace absent: the role has not run
        pods = []
    for pod in pods:
        if pod.metadata.name.startswith(service):
            return pod.metadata.name
    return f"{service}-{hashlib.sha256(node.encode()).hexdigest()[:5]}"


def scrape_config(standin: Standin, pod_names: dict[str, str], namespace: str = EXPORTER_NAMESPACE,
                  service: str = EXPORTER_SERVICE, interval: str = "5s") -> dict:
    """Prometheus configuration equivalent to the ServiceMonitor's: one target per exporter pod."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": "4s"},
        "scrape_configs": [{
            "job_name": f"serviceMonitor/{namespace}/{service}/0",
            "honor_labels": False,
            "scrape_interval": interval,
            "metrics_path": "/metrics",
            "static_configs": [{
                "targets": [f"127.0.0.1:{port}"],
                "labels": {"namespace": namespace, "service": service, "endpoint": EXPORTER_PORT_NAME,
                           "job": service, "pod": pod_names[node], "container": EXPORTER_CONTAINER, "node": node},
            } for node, port in standin.ports.items()],
        }],
    }


# ---------------------------------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Prometheus:
    config: dict
    workdir: Path
    name: str = "prometheus-monitoring"
    port: int = 0
    process: LabProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        binary = PROMETHEUS_BIN / "prometheus"
        if not binary.exists():
            raise FileNotFoundError(f"{binary} not found: build it with lab/build-binaries.sh prometheus adapter")
        self.port = self.port or free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(self.config, sort_keys=False))
        argv = [str(binary), f"--config.file={cfg}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h",
                "--log.level=warn"]
        self.process = LabProcess(self.name, argv, self.workdir).start()
        wait_for("Prometheus", lambda: "Ready" in http(f"{self.url}/-/ready"), 60, log=self.process.log)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()

    def query(self, expr: str) -> list[dict]:
        """Instant query; raises with Prometheus's own error text when the expression does not evaluate."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            answer = http(url)
        except urllib.error.HTTPError as exc:
            raise ValueError(f"{expr!r}: {exc.read().decode()}") from exc
        if answer.get("status") != "success":
            raise ValueError(f"{expr!r}: {answer}")
        return answer["data"]["result"]

    def targets_up(self) -> bool:
        active = http(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


# ---------------------------------------------------------------------------------------------------------------
# prometheus-adapter
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Adapter:
    """prometheus-adapter as a real aggregated API server on 127.0.0.1: it checks callers with the API server's
    request-header CA (extension-apiserver-authentication) and SubjectAccessReviews, as in a cluster."""

    kubeconfig: str
    config_file: Path
    prometheus_url: str
    workdir: Path
    relist_interval: str = "15s"
    name: str = "prometheus-adapter"
    port: int = 0
    # The serving certificate the gpu_metrics_adapter role wrote (tls.crt, tls.key); None: the adapter's own
    # self-signed one (in --cert-dir), which an APIService with the role's caBundle refuses.
    tls_dir: Path | None = None
    process: LabProcess | None = None

    def start(self) -> Adapter:
        if not ADAPTER_BIN.exists():
            raise FileNotFoundError(f"{ADAPTER_BIN} not found: build it with lab/build-binaries.sh prometheus adapter")
        self.port = self.port or free_port()
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        tls = ([f"--tls-cert-file={self.tls_dir / 'tls.crt'}", f"--tls-private-key-file={self.tls_dir / 'tls.key'}"]
               if self.tls_dir else [f"--cert-dir={certs}"])
        argv = [str(ADAPTER_BIN), f"--secure-port={self.port}", "--bind-address=127.0.0.1", *tls,
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                f"--lister-kubeconfig={self.kubeconfig}", f"--prometheus-url={self.prometheus_url}",
                f"--config={self.config_file}", f"--metrics-relist-interval={self.relist_interval}", "--v=1"]
        self.process = LabProcess(self.name, argv, self.workdir).start()
        # /healthz needs no credentials (the adapter's default always-allow paths).
        wait_for("prometheus-adapter", lambda: http(f"https://127.0.0.1:{self.port}/healthz", insecure=True) == "ok",
                 60, log=self.process.log)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()


# ---------------------------------------------------------------------------------------------------------------
# Grafana dashboards: every query, with the dashboard's variables set to "all"
# ---------------------------------------------------------------------------------------------------------------
_GRAFANA_INTERVALS = re.compile(r"\$(?:\{)?__(?:rate_interval|interval|range)(?:\})?")
_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(.*),\s*)?(\w+)\s*\)\s*$")


def dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable (label_values(m, l) -> group by (l) (m))."""
    out: list[tuple[str, str]] = []

    def panels(items: list) -> None:
        for panel in items or []:
            panels(panel.get("panels") or [])
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    out.append((f"panel {panel.get('title', panel.get('id'))!r}", grafana_expr(target["expr"])))

    panels(dashboard.get("panels") or [])
    for row in dashboard.get("rows") or []:
        panels(row.get("panels") or [])
    for var in (dashboard.get("templating") or {}).get("list") or []:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var.get("type") == "query" and isinstance(query, str) and (m := _LABEL_VALUES.match(query)):
            metric, label = m.group(1) or "up", m.group(2)
            out.append((f"variable {var.get('name')!r}", f"group by ({label}) ({grafana_expr(metric)})"))
    return out


def grafana_expr(expr: str) -> str:
    """A Grafana target's PromQL with interval macros as 1m and template variables as 'any value'."""
    return _GRAFANA_VARIABLE.sub(".*", _GRAFANA_INTERVALS.sub("1m", expr))


def run_role(role: str, extra: dict, workdir: Path, *flags: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """ansible-playbook -i inventories/lab with one role of the collection on the control-plane host."""
    workdir.mkdir(parents=True, exist_ok=True)
    play = workdir / f"play-{role}.yml"
    play.write_text(yaml.safe_dump([{"name": f"Run {role}", "hosts": "k8s_control_plane", "gather_facts": False,
                                     "roles": [{"role": f"k8sgpu.nvidia.{role}"}]}]))
    extra_file = workdir / f"extra-{role}.json"
    extra_file.write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run(["ansible-playbook", "-i", str(ROOT / "inventories" / "lab"), str(play),
                           "-e", f"@{extra_file}", *flags], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@dataclass
class Chain:
    """Stand-in exporter -> Prometheus -> prometheus-adapter, registered as custom.metrics.k8s.io by the
    gpu_metrics_adapter role in external mode (ExternalName Service to 127.0.0.1, as kwok registers metrics-server).

    The adapter's configuration and serving certificate are the role's own: a first external run (no wait) writes
    the configuration and the certificate (its CA in the APIServices' caBundle), the adapter starts with them, and a
    second run waits until the aggregator reaches it, verified by that CA."""

    kubeconfig: str
    workdir: Path
    namespace: str
    adapter_name: str = "prometheus-adapter"
    relist_interval: str = "15s"
    scrape_interval: str = "5s"
    standin: Standin | None = None
    prometheus: Prometheus | None = None
    adapter: Adapter | None = None

    def adapter_vars(self, **more: Any) -> dict:
        return {"gpu_metrics_adapter_mode": "external", "gpu_metrics_adapter_namespace": self.namespace,
                "gpu_metrics_adapter_name": self.adapter_name,
                "gpu_metrics_adapter_prometheus_url": self.prometheus.url if self.prometheus else "",
                "gpu_metrics_adapter_prometheus_check": "direct",
                "gpu_metrics_adapter_external_name": "127.0.0.1",
                "gpu_metrics_adapter_external_port": self.adapter.port if self.adapter else 0,
                "gpu_metrics_adapter_output_dir": str(self.workdir / "adapter"),
                "gpu_metrics_adapter_relist_interval": self.relist_interval,
                "gpu_metrics_adapter_wait_timeout": 60, **more}

    def start(self) -> Chain:
        from kubernetes import client, config

        core = client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig))
        self.standin = Standin(self.kubeconfig, self.workdir).start()
        pods = {n: exporter_pod_name(core, n, EXPORTER_NAMESPACE, EXPORTER_SERVICE) for n in self.standin.nodes}
        self.prometheus = Prometheus(scrape_config(self.standin, pods, interval=self.scrape_interval),
                                     self.workdir).start()
        wait_for("Prometheus scraping the stand-in", self.prometheus.targets_up, 30)
        self.adapter = Adapter(self.kubeconfig, self.workdir / "adapter" / "prometheus-adapter-config.yaml",
                               self.prometheus.url, self.workdir, relist_interval=self.relist_interval,
                               port=free_port(), tls_dir=self.workdir / "adapter")
        res = run_role("gpu_metrics_adapter", self.adapter_vars(gpu_metrics_adapter_wait=False), self.workdir)
        if res.returncode:
            raise RuntimeError(f"gpu_metrics_adapter external (no wait) failed:\n{res.stdout[-3000:]}")
        self.adapter.start()
        res = run_role("gpu_metrics_adapter", self.adapter_vars(), self.workdir)
        if res.returncode:
            raise RuntimeError(f"gpu_metrics_adapter external failed:\n{res.stdout[-3000:]}")
        return self

    def stop(self) -> None:
        """Unregister the API first (an APIService whose adapter is gone breaks discovery for every client)."""
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=self.kubeconfig)
        reg = client.ApiregistrationV1Api(api)
        rbac = client.RbacAuthorizationV1Api(api)
        for version in ("v1beta1", "v1beta2"):
            _ignore_404(reg.delete_api_service, f"{version}.custom.metrics.k8s.io")
        for name in ("custom-metrics-reader", "resource-reader"):
            _ignore_404(rbac.delete_cluster_role, f"k8sgpu:{self.adapter_name}:{name}")
        _ignore_404(client.CoreV1Api(api).delete_namespaced_secret, f"{self.adapter_name}-serving-cert", self.namespace)
        for name in ("hpa-custom-metrics", "resource-reader", "auth-delegator"):
            _ignore_404(rbac.delete_cluster_role_binding, f"k8sgpu:{self.adapter_name}:{name}")
        for part in (self.adapter, self.prometheus, self.standin):
            if part:
                part.stop()


def _ignore_404(call: Callable, *args: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        call(*args)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _up(args: list[str]) -> None:
    """For site.yml against the lab: stand-in, Prometheus and the adapter on fixed ports (K8SGPU_LAB_* variables),
    their addresses under .lab/monitoring/ (the lab inventory reads them). The adapter's configuration and serving
    certificate are the gpu_metrics_adapter role's (external mode, which also registers it, verified by the
    certificate's CA); site.yml -e k8sgpu_monitoring=true then finds them in place."""
    from kubernetes import client, config

    kubeconfig = str(LAB_STATE / "kubeconfig")
    state = LAB_STATE / "monitoring"
    standin = Standin(kubeconfig, state, name="dcgm-standin-lab",
                      ports={n: int(os.environ.get("K8SGPU_LAB_DCGM_PORT", "39400")) + i
                             for i, n in enumerate(GPU_NODES)},
                      control_port=int(os.environ.get("K8SGPU_LAB_DCGM_CONTROL_PORT", "39399"))).start()
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    pods = {n: exporter_pod_name(core, n, EXPORTER_NAMESPACE, EXPORTER_SERVICE) for n in GPU_NODES}
    prom = Prometheus(scrape_config(standin, pods), state, name="prometheus-lab",
                      port=int(os.environ.get("K8SGPU_LAB_PROMETHEUS_PORT", "39090"))).start()
    (state / "prometheus-url").write_text(prom.url + "\n")
    (state / "dcgm-standin-url").write_text(standin.control + "\n")
    port = int(os.environ.get("K8SGPU_LAB_ADAPTER_PORT", "36444"))
    # external, without waiting: the configuration and the serving certificate the adapter starts with (the
    # APIServices trust that certificate's CA only); site.yml's own run then finds both in place.
    res = run_role("gpu_metrics_adapter", {"gpu_metrics_adapter_mode": "external",
                                           "gpu_metrics_adapter_external_name": "127.0.0.1",
                                           "gpu_metrics_adapter_external_port": port,
                                           "gpu_metrics_adapter_output_dir": str(state / "adapter"),
                                           "gpu_metrics_adapter_prometheus_check": "direct",
                                           "gpu_metrics_adapter_relist_interval": "15s",
                                           "gpu_metrics_adapter_wait": False,
                                           "gpu_metrics_adapter_prometheus_url": prom.url}, state)
    if res.returncode:
        raise SystemExit(f"gpu_metrics_adapter external failed:\n{res.stdout[-3000:]}")
    adapter = Adapter(kubeconfig, state / "adapter" / "prometheus-adapter-config.yaml", prom.url, state,
                      name="prometheus-adapter-lab", port=port, tls_dir=state / "adapter").start()
    (state / "adapter-port").write_text(f"{adapter.port}\n")
    print(f"Prometheus {prom.url}, stand-in control {standin.control}, adapter https://127.0.0.1:{adapter.port}")


def _down(args: list[str]) -> None:
    """Unregister an adapter the lab's site.yml registered (an APIService without its adapter breaks discovery
    for every client), then stop the processes."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(LAB_STATE / "kubeconfig"))
    reg = client.ApiregistrationV1Api(api)
    for svc in reg.list_api_service(label_selector="app.kubernetes.io/managed-by=k8sgpu.nvidia").items:
        target = svc.spec.service
        if svc.spec.group == "custom.metrics.k8s.io" and target and (target.namespace, target.name) == (
                ADAPTER_NAMESPACE, "prometheus-adapter"):  # the role's defaults, which site.yml uses
            _ignore_404(reg.delete_api_service, svc.metadata.name)
    for name in ("prometheus-adapter-lab", "prometheus-lab", "dcgm-standin-lab"):
        pidfile = LAB_STATE / "procs" / f"{name}.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass
            pidfile.unlink()


if __name__ == "__main__":
    {"up": _up, "down": _down}[sys.argv[1]](sys.argv[2:])
