# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""prometheus-adapter rules for the DCGM exporter's GPU metrics, and the same rules as Helm values."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_AGGREGATIONS = ("avg", "max", "min", "sum")


def gpu_adapter_rules(exporter_service: str, metric: str = "DCGM_FI_DEV_GPU_UTIL", aggregation: str = "avg",
                      object_metric: str = "DCGM_FI_DEV_GPU_UTIL_AVG", extra_rules: list | None = None) -> dict:
    """The adapter's configuration (its --config file): custom rules only, no resource metrics.

    - Pods: ``metric`` per pod. With honorLabels false the exporter's pod labels arrive as exported_namespace /
      exported_pod (the target's own namespace/pod are the exporter pod's), so those two are mapped to the
      namespace and pod resources. A pod holding several GPUs gets ``aggregation`` over them.
    - Object: ``object_metric`` on Service/<exporter_service> in namespace N: ``aggregation`` of ``metric`` over
      every GPU that pods of N hold, as reported through that Service (its ``service`` target label).
    """
    if not isinstance(exporter_service, str) or not exporter_service:
        raise AnsibleFilterError(f"gpu_adapter_rules: exporter_service must be a Service name, got {exporter_service!r}")
    for name, value in (("metric", metric), ("object_metric", object_metric)):
        if not isinstance(value, str) or not _LABEL.match(value):
            raise AnsibleFilterError(f"gpu_adapter_rules: {name} {value!r} is not a Prometheus metric name")
    if aggregation not in _AGGREGATIONS:
        raise AnsibleFilterError(f"gpu_adapter_rules: aggregation {aggregation!r} is not one of {list(_AGGREGATIONS)}")
    if extra_rules is not None and not isinstance(extra_rules, list):
        raise AnsibleFilterError("gpu_adapter_rules: extra_rules must be a list of adapter rules")
    query = f"{aggregation} by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})"
    rules = [
        {
            "seriesQuery": f'{metric}{{exported_namespace!="",exported_pod!=""}}',
            "resources": {"overrides": {"exported_namespace": {"resource": "namespace"},
                                        "exported_pod": {"resource": "pod"}}},
            "name": {"matches": f"^{metric}$", "as": metric},
            "metricsQuery": query,
        },
        {
            "seriesQuery": f'{metric}{{exported_namespace!="",exported_pod!="",service="{exporter_service}"}}',
            "resources": {"overrides": {"exported_namespace": {"resource": "namespace"},
                                        "service": {"resource": "service"}}},
            "name": {"matches": f"^{metric}$", "as": object_metric},
            "metricsQuery": query,
        },
    ]
    return {"rules": rules + list(extra_rules or [])}


def adapter_helm_values(config: dict, prometheus_url: str) -> dict:
    """Values for the prometheus-community/prometheus-adapter chart: its URL, port and path split apart, the
    chart's default rules off, and the configuration's rules as custom rules."""
    if not isinstance(config, dict) or not isinstance(config.get("rules"), list):
        raise AnsibleFilterError("adapter_helm_values: expects the adapter configuration (a dict with a rules list)")
    parts = urlsplit(str(prometheus_url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AnsibleFilterError(f"adapter_helm_values: {prometheus_url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {
        "prometheus": {"url": f"{parts.scheme}://{parts.hostname}", "port": port, "path": parts.path.rstrip("/")},
        "rules": {"default": False, "custom": config["rules"]},
    }


class FilterModule:
    def filters(self) -> dict:
        return {"gpu_adapter_rules": gpu_adapter_rules, "adapter_helm_values": adapter_helm_values}
