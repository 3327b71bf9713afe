"""A stand-in for NVIDIA's dcgm-exporter, for the lab (kwok GPU nodes have no GPUs and no DCGM).

One process serves, for each GPU Node it is given, the exporter's exact metric names, types and label set on a port
of its own (as one exporter pod per node would):

    DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-...",pci_bus_id="00000000:10:00.0",device="nvidia0",
                         modelName="NVIDIA H100 80GB HBM3",Hostname="<node>",DCGM_FI_DRIVER_VERSION="580.159.04",
                         container="cuda",namespace="ns",pod="p"} 90

- Metric names and types come from the exporter's counters CSV (its etc/default-counters.csv, --counters).
  Fields of type ``label`` (DCGM_FI_DRIVER_VERSION) become labels of every series, as the exporter does.
- GPUs per Node: the Node's ``nvidia.com/gpu`` capacity, read from the API.
- ``namespace``/``pod``/``container``: what the exporter's pod-resources mapping (DCGM_EXPORTER_KUBERNETES=true)
  gives, here from the API: Running pods bound to the Node whose containers request ``nvidia.com/gpu`` get that
  many GPUs, lowest free index first; a GPU stays with its pod until the pod is gone. GPUs no pod holds carry no
  pod labels (the exporter's are empty, which Prometheus drops).
- Values: a default per metric, changed by ``POST /set`` on the control port with a JSON body
  ``{"metric": "DCGM_FI_DEV_GPU_UTIL", "value": 90, "namespace": "ns", "pod": "p", "node": "n", "gpu": 0}``
  (every selector key optional; later rules win), ``POST /reset`` drops every rule, ``GET /state`` shows rules and
  the current GPU assignment.

Run: python dcgm_standin.py --kubeconfig K --counters default-counters.csv --node NODE=PORT ... --control-port P
"""
from __future__ import annotations

import argparse
import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "580.159.04"
# Plausible idle values of an H100; any metric not named here starts at 0.
DEFAULTS = {
    "DCGM_FI_DEV_SM_CLOCK": 1980.0,
    "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
    "DCGM_FI_DEV_MEMORY_TEMP": 38.0,
    "DCGM_FI_DEV_GPU_TEMP": 33.0,
    "DCGM_FI_DEV_POWER_USAGE": 71.5,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789.0,
    "DCGM_FI_DEV_FB_FREE": 81050.0,
    "DCGM_FI_DEV_FB_USED": 0.0,
    "DCGM_FI_DEV_FB_RESERVED": 509.0,
}
SELECTORS = ("node", "gpu", "namespace", "pod", "container")


@dataclass
class Counter:
    name: str
    type: str  # gauge | counter | label
    help: str


def read_counters(path: Path) -> list[Counter]:
    """The exporter's counters CSV: 'DCGM field, Prometheus type, help'; '#' starts a comment."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, typ, help_ = (p.strip() for p in line.split(",", 2))
        out.append(Counter(name, typ, help_))
    return out


@dataclass
class State:
    counters: list[Counter]
    rules: list[dict[str, Any]] = field(default_factory=list)
    # node -> gpu index -> (namespace, pod, container, pod uid)
    assignment: dict[str, dict[int, tuple[str, str, str, str]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def value(self, metric: str, labels: dict[str, str]) -> float:
        val = DEFAULTS.get(metric, 0.0)
        with self.lock:
            rules = list(self.rules)
        for rule in rules:
            if rule["metric"] != metric:
                continue
            if all(str(rule[k]) == labels.get(k, "") for k in SELECTORS if k in rule):
                val = float(rule["value"])
        return val


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Cluster:
    """What the exporter's Kubernetes mapping needs from the API: a Node's GPUs and the GPU pods on it."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config  # imported here: --help works without the client

        self.core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))

    def gpu_count(self, node: str) -> int:
        capacity = self.core.read_node(node).status.capacity or {}
        return int(capacity.get("nvidia.com/gpu", "0"))

    def gpu_pods(self, node: str) -> list[tuple[str, str, str, str, int]]:
        """(namespace, pod, container, uid, GPUs) of Running pods on the Node, oldest first."""
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        out = []
        for pod in sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.namespace, p.metadata.name)):
            if pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
                continue
            for ctr in pod.spec.containers:
                limits = (ctr.resources.limits or {}) if ctr.resources else {}
                requests = (ctr.resources.requests or {}) if ctr.resources else {}
                gpus = int(limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu", "0")))
                if gpus:
                    out.append((pod.metadata.namespace, pod.metadata.name, ctr.name, pod.metadata.uid, gpus))
        return out


def assign(current: dict[int, tuple[str, str, str, str]], pods: list[tuple[str, str, str, str, int]],
           gpus: int) -> dict[int, tuple[str, str, str, str]]:
    """GPU index -> holder: holders that still run keep their GPUs; new ones take the lowest free indexes."""
    wanted = {(ns, pod, ctr, uid): n for ns, pod, ctr, uid, n in pods}
    kept = {i: h for i, h in current.items() if h in wanted and i < gpus}
    for holder, n in wanted.items():
        have = sum(1 for h in kept.values() if h == holder)
        for i in range(gpus):
            if have >= n:
                break
            if i not in kept:
                kept[i] = holder
                have += 1
    return dict(sorted(kept.items()))


def gpu_labels(node: str, index: int) -> dict[str, str]:
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return {
        "gpu": str(index),
        "UUID": f"GPU-{uuid.UUID(digest[:32])}",
        "pci_bus_id": f"00000000:{0x10 + index * 0x10:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": MODEL,
        "Hostname": node,
    }


def render(state: State, cluster: Cluster, node: str) -> str:
    gpus = cluster.gpu_count(node)
    pods = cluster.gpu_pods(node)
    with state.lock:
        state.assignment[node] = assign(state.assignment.get(node, {}), pods, gpus)
        held = dict(state.assignment[node])
    static = {c.name: DRIVER_VERSION for c in state.counters if c.type == "label"}
    lines: list[str] = []
    for counter in state.counters:
        if counter.type == "label":
            continue
        lines.append(f"# HELP {counter.name} {counter.help}")
        lines.append(f"# TYPE {counter.name} {counter.type}")
        for index in range(gpus):
            labels = gpu_labels(node, index) | static
            if index in held:
                ns, pod, ctr, _uid = held[index]
                labels |= {"container": ctr, "namespace": ns, "pod": pod}
            selector = labels | {"node": node}
            value = state.value(counter.name, selector)
            text = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            lines.append(f"{counter.name}{{{text}}} {value:g}")
    return "\n".join(lines) + "\n"


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with one body."""

    def reply(self, code: int, data: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # pylint: disable=redefined-builtin
        return


def exporter_handler(state: State, cluster: Cluster, node: str) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._send(200, "OK\n")
            elif self.path.split("?")[0] == "/metrics":
                try:
                    self._send(200, render(state, cluster, node), "text/plain; version=0.0.4; charset=utf-8")
                except Exception as exc:  # pylint: disable=broad-except  # the scrape shows why
                    self._send(500, f"stand-in for {node}: {exc}\n")
            else:
                self._send(404, "not found\n")

        def _send(self, code: int, body: str, ctype: str = "text/plain") -> None:
            self.reply(code, body.encode(), ctype)

    return Handler


def control_handler(state: State) -> type[BaseHTTPRequestHandler]:
    names = {c.name for c in state.counters}

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/state":
                with state.lock:
                    body = {"rules": state.rules,
                            "assignment": {n: {str(i): list(h[:3]) for i, h in a.items()}
                                           for n, a in state.assignment.items()}}
                self._send(200, body)
            elif self.path == "/health":
                self._send(200, {"ok": True})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as exc:
                self._send(400, {"error": f"body is not JSON: {exc}"})
                return
            if self.path == "/reset":
                with state.lock:
                    state.rules.clear()
                self._send(200, {"rules": []})
            elif self.path == "/set":
                unknown = set(body) - {"metric", "value", *SELECTORS}
                if body.get("metric") not in names or "value" not in body or unknown:
                    self._send(400, {"error": f"need metric (one of the counters), value and selectors from "
                                              f"{list(SELECTORS)}; got {body}"})
                    return
                with state.lock:
                    state.rules.append(body)
                    rules = list(state.rules)
                self._send(200, {"rules": rules})
            else:
                self._send(404, {"error": "not found"})

        def _send(self, code: int, body: Any) -> None:
            self.reply(code, json.dumps(body).encode(), "application/json")

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--counters", required=True, type=Path, help="the exporter's counters CSV")
    parser.add_argument("--node", action="append", required=True, metavar="NODE=PORT")
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--address", default="127.0.0.1")
    args = parser.parse_args()

    state = State(read_counters(args.counters))
    cluster = Cluster(args.kubeconfig)
    servers = [ThreadingHTTPServer((args.address, args.control_port), control_handler(state))]
    for item in args.node:
        node, port = item.rsplit("=", 1)
        servers.append(ThreadingHTTPServer((args.address, int(port)), exporter_handler(state, cluster, node)))
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
