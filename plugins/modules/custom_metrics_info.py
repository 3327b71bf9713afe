#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: custom_metrics_info
short_description: Whether the custom metrics API is served, which metrics it has, and whether Prometheus answers
version_added: 1.0.0
description:
  - Reads the C(APIService) objects of C(custom.metrics.k8s.io) (by default C(v1beta1) and C(v1beta2)) and their
    C(Available) condition (C(status.conditions), set by the API server's aggregator after it reached the adapter),
    waiting up to O(wait) seconds for them to become Available.
  - Lists the metrics the adapter serves from the group version's discovery document
    (C(GET /apis/custom.metrics.k8s.io/v1beta1), resource names C(<resource>/<metric>)) and reports which of
    O(metrics) are missing - the symptom behind the HPA's "no metrics returned" when the adapter's rules do not
    match the exporter's labels.
  - With O(prometheus_url), asks Prometheus for C(/api/v1/status/buildinfo), directly from the controller, or, for a
    C(<service>.<namespace>.svc) URL that the controller cannot resolve, through the API server's service proxy
    (O(prometheus_via=auto)).
  - Fails, with the APIService's reason and message and the fix, when O(require_available) and an APIService is
    absent or not Available, when O(require_metrics) and a metric is missing, and when Prometheus does not answer.
  - Written because M(kubernetes.core.k8s_info) reads the APIService but cannot read an aggregated API's discovery
    document nor reach Prometheus through the service proxy, and the roles need one clear message for each failure.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
options:
  versions:
    description: Versions of C(custom.metrics.k8s.io) whose APIService must be Available.
    type: list
    elements: str
    default: [v1beta1, v1beta2]
  wait:
    description:
      - Seconds to wait for the APIServices to become Available (and, with O(require_metrics), O(metrics) to
        appear). V(0) checks once.
    type: int
    default: 0
  require_available:
    description: Fail when an APIService of O(versions) is absent or not Available.
    type: bool
    default: true
  metrics:
    description: Metric names the adapter should serve (any resource).
    type: list
    elements: str
    default: []
  require_metrics:
    description: Fail when a metric of O(metrics) is not served after O(wait).
    type: bool
    default: false
  prometheus_url:
    description: Prometheus URL to check (the adapter's C(--prometheus-url)). Not checked when empty.
    type: str
    default: ""
  prometheus_via:
    description:
      - How to reach O(prometheus_url). V(direct) from the controller; V(service_proxy) through the API server's
        service proxy (the URL's host must be C(<service>.<namespace>.svc[.<domain>])); V(auto) uses the service
        proxy for such hosts and V(direct) for others.
    type: str
    choices: [auto, direct, service_proxy]
    default: auto
requirements:
  - kubernetes >= 24.2.0 (Python)
notes:
  - Needs RBAC C(get) on C(apiservices), C(get) on the custom metrics discovery document, and for the service proxy
    C(get) on C(services/proxy) in Prometheus's namespace.
"""

EXAMPLES = r"""
- name: Fail unless the custom metrics API is served
  k8sgpu.nvidia.custom_metrics_info:
    wait: 60

- name: Check the adapter's metrics and its Prometheus
  k8sgpu.nvidia.custom_metrics_info:
    metrics: [DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_GPU_UTIL_AVG]
    prometheus_url: http://prometheus-operated.monitoring.svc:9090
  register: custom_metrics
"""

RETURN = r"""
apiservices:
  description: Per APIService of O(versions), what its C(Available) condition says.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: v1beta1.custom.metrics.k8s.io, exists: true, available: false, reason: FailedDiscoveryCheck,
       message: "failing or missing response from https://127.0.0.1:6443/apis/custom.metrics.k8s.io/v1beta1",
       service: gpu-monitoring/prometheus-adapter:443}
served:
  description: Metric name to the resources it is served for (discovery of the first Available version).
  returned: always
  type: dict
  sample: {DCGM_FI_DEV_GPU_UTIL: [namespaces, pods], DCGM_FI_DEV_GPU_UTIL_AVG: [namespaces, services]}
missing_metrics:
  description: Names in O(metrics) that are not served.
  returned: always
  type: list
  elements: str
prometheus:
  description: The Prometheus check (empty without O(prometheus_url)).
  returned: always
  type: dict
  sample: {url: "http://prometheus-operated.monitoring.svc:9090", via: service_proxy, reachable: true, version: 3.16.0, error: ""}
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

import json
import time
from collections.abc import Callable
import urllib.error

from ansible.module_utils.urls import open_url

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._custom_metrics import (
    CUSTOM_METRICS_GROUP,
    apiservice_state,
    prometheus_url_parts,
    served_metrics,
    service_proxy_path,
    unavailable_message,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)


def _get(api, path: str):
    """The object at path, or None when the API server answers 404."""
    try:
        return api.request("get", path, serializer=raw_json)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise


def _prometheus(module, api: Callable, url: str, via: str) -> dict:
    try:
        parts = prometheus_url_parts(url)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if via == "auto":
        via = "service_proxy" if parts["service"] else "direct"
    if via == "service_proxy" and not parts["service"]:
        module.fail_json(msg=f"prometheus_via=service_proxy needs a <service>.<namespace>.svc URL, got {url}")
    result = {"url": url, "via": via, "reachable": False, "version": "", "error": ""}
    try:
        if via == "direct":
            resp = open_url(f"{url.rstrip('/')}/api/v1/status/buildinfo", timeout=5)
            answer = json.loads(resp.read().decode())
        else:
            answer = api().request("get", service_proxy_path(parts, "/api/v1/status/buildinfo"), serializer=raw_json)
            if isinstance(answer, (str, bytes)):
                answer = json.loads(answer)
        result["version"] = ((answer or {}).get("data") or {}).get("version", "")
        result["reachable"] = (answer or {}).get("status") == "success"
        if not result["reachable"]:
            result["error"] = f"unexpected answer {str(answer)[:200]}"
    except (OSError, urllib.error.URLError, ValueError) as exc:
        result["error"] = str(getattr(exc, "reason", exc))
    except Exception as exc:  # the dynamic client's ApiException through the service proxy
        result["error"] = api_error_message(exc)
    return result


def main() -> None:
    argument_spec = dict(
        versions=dict(type="list", elements="str", default=["v1beta1", "v1beta2"]),
        wait=dict(type="int", default=0),
        require_available=dict(type="bool", default=True),
        metrics=dict(type="list", elements="str", default=[]),
        require_metrics=dict(type="bool", default=False),
        prometheus_url=dict(type="str", default=""),
        prometheus_via=dict(type="str", default="auto", choices=["auto", "direct", "service_proxy"]),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    p = module.params
    clients: dict = {}

    def api():
        """The API client, made on first use: a direct Prometheus check alone needs no cluster."""
        if "api" not in clients:
            clients["api"] = dynamic_client(module)
        return clients["api"]

    prometheus = {}
    if p["prometheus_url"]:
        prometheus = _prometheus(module, api, p["prometheus_url"], p["prometheus_via"])
        if not prometheus["reachable"]:
            module.fail_json(
                msg=f"Prometheus at {p['prometheus_url']} does not answer ({prometheus['via']}: {prometheus['error']}): "
                    "the adapter would serve no metrics. Set the Prometheus URL (scheme, host, port) of a running "
                    "Prometheus that scrapes the DCGM exporter.", prometheus=prometheus)

    start = time.monotonic()
    while True:
        try:
            states = [apiservice_state(f"{v}.{CUSTOM_METRICS_GROUP}",
                                       _get(api(), f"/apis/apiregistration.k8s.io/v1/apiservices/{v}.{CUSTOM_METRICS_GROUP}"))
                      for v in p["versions"]]
            served: dict[str, list[str]] = {}
            up = next((s for s in states if s["available"]), None)
            if up:
                version = up["name"].split(".", 1)[0]
                served = served_metrics(_get(api(), f"/apis/{CUSTOM_METRICS_GROUP}/{version}"))
        except Exception as exc:
            module.fail_json(msg=f"Could not read the custom metrics API's registration: {api_error_message(exc)}")
        missing = [m for m in p["metrics"] if m not in served]
        waited = round(time.monotonic() - start, 1)
        if (all(s["available"] for s in states) and not (missing and p["require_metrics"])) or waited >= p["wait"]:
            break
        time.sleep(2)

    result = dict(changed=False, apiservices=states, served=served, missing_metrics=missing, prometheus=prometheus,
                  waited=waited)
    down = [s for s in states if not s["available"]]
    if p["require_available"] and down:
        module.fail_json(msg=" ".join(unavailable_message(s) for s in down), **result)
    if p["require_metrics"] and missing:
        module.fail_json(
            msg=f"The custom metrics API serves no {', '.join(missing)} after {waited:g} s (it serves "
                f"{', '.join(served) or 'nothing'}): the adapter found no matching series in Prometheus. Check that "
                "Prometheus scrapes the DCGM exporter with honorLabels false (so the pod's labels arrive as "
                "exported_namespace/exported_pod) and that a pod holds a GPU.", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
