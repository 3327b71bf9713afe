# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: reading the custom metrics API's registration (APIService) and what it serves."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

CUSTOM_METRICS_GROUP = "custom.metrics.k8s.io"


def apiservice_state(name: str, obj: dict | None) -> dict[str, Any]:
    """name, exists, available, reason, message and the Service behind an APIService object (None: absent)."""
    if not obj:
        return {"name": name, "exists": False, "available": False, "reason": "NotFound", "message": "", "service": None}
    cond = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Available"), {})
    svc = (obj.get("spec") or {}).get("service")
    return {
        "name": name, "exists": True, "available": cond.get("status") == "True",
        "reason": cond.get("reason", "NoCondition"), "message": cond.get("message", ""),
        "service": f"{svc.get('namespace')}/{svc.get('name')}:{svc.get('port', 443)}" if svc else "Local",
    }


def unavailable_message(state: dict[str, Any]) -> str:
    """What is wrong with an APIService that is not Available, and the fix."""
    name = state["name"]
    if not state["exists"]:
        return (f"APIService {name} does not exist: no custom metrics adapter is registered in this cluster. "
                "Run the k8sgpu.nvidia.gpu_metrics_adapter role first (or install prometheus-adapter).")
    where = f"Service {state['service']}" if state["service"] else "its Service"
    return (f"APIService {name} is not Available ({state['reason']}: {state['message'] or 'no message'}): the "
            f"adapter behind {where} does not answer the API server. Check that the adapter runs and that the "
            "Service reaches it (kubectl get apiservice " + name + " -o yaml; the adapter's logs).")


def served_metrics(resource_list: dict | None) -> dict[str, list[str]]:
    """metric -> resources it is served for, from the group version's APIResourceList ('pods/<metric>')."""
    out: dict[str, list[str]] = {}
    for res in (resource_list or {}).get("resources") or []:
        kind, _sep, metric = str(res.get("name", "")).partition("/")
        if metric:
            out.setdefault(metric, []).append(kind)
    return {k: sorted(v) for k, v in sorted(out.items())}


def prometheus_url_parts(url: Any) -> dict[str, Any]:
    """scheme, host, port, path of a Prometheus URL and, for a <svc>.<ns>.svc[.<domain>] host, the Service."""
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL of Prometheus (for example http://prometheus.monitoring.svc:9090)")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    labels = parts.hostname.split(".")
    service = {"name": labels[0], "namespace": labels[1]} if len(labels) >= 3 and labels[2] == "svc" else None
    return {"scheme": parts.scheme, "host": parts.hostname, "port": port, "path": parts.path.rstrip("/"),
            "service": service}


def service_proxy_path(parts: dict[str, Any], api_path: str) -> str:
    """The API server's service proxy path to api_path on the Prometheus Service parts names."""
    svc = parts["service"]
    return (f"/api/v1/namespaces/{svc['namespace']}/services/{parts['scheme']}:{svc['name']}:{parts['port']}"
            f"/proxy{parts['path']}{api_path}")
