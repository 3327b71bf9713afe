# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""prometheus-adapter rules for the DCGM exporter's GPU metrics, the same rules as Helm values, and the RBAC rules
those rules need (the adapter's read access to the objects they name, the HPA's read access to the metrics)."""
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


_IRREGULAR_PLURALS = {"ingress": "ingresses", "endpoints": "endpoints", "networkpolicy": "networkpolicies"}


def _plural(resource: str) -> str:
    name = resource.lower()
    if name in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[name]
    if name.endswith("s"):
        return name
    if name.endswith("y"):
        return name[:-1] + "ies"
    return name + "s"


def _rule_resources(rule: dict, where: str) -> list[tuple[str, str]] | None:
    """(API group, plural) of every Kubernetes resource a rule maps series to; None when a template decides."""
    resources = rule.get("resources") or {}
    if not isinstance(resources, dict):
        raise AnsibleFilterError(f"{where}: resources must be a dict (overrides and/or template)")
    if resources.get("template"):
        return None
    out = []
    for label, target in (resources.get("overrides") or {}).items():
        if isinstance(target, dict):
            group, name = str(target.get("group") or ""), target.get("resource")
        else:
            group, name = "", target
        if not isinstance(name, str) or not name:
            raise AnsibleFilterError(f"{where}: resources.overrides.{label} names no resource")
        if "." in name and not group:
            name, group = name.split(".", 1)
        out.append((group, _plural(name)))
    return out


def _rule_metric(rule: dict) -> str | None:
    """The metric name a rule serves, when it is written out; None when a regular expression computes it."""
    name = (rule.get("name") or {}).get("as")
    if name is not None:
        return name if isinstance(name, str) and _LABEL.match(name) else None
    if (rule.get("name") or {}).get("matches"):
        return None
    series = re.match(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{|$)", str(rule.get("seriesQuery") or ""))
    return series.group(1) if series else None


def adapter_rbac_rules(config: dict) -> dict:
    """RBAC rules from the adapter's configuration: ``adapter``, the objects the adapter lists to answer (the
    resources its rules map series to), and ``metrics_reader``, the custom metrics the HPA controller may read
    (``<resource>/<metric>`` for every rule's metric on every resource but namespaces).

    A rule whose resources come from a template, or whose name a regular expression computes, cannot be listed:
    then the rules fall back to every resource (``*``) for that part, which the role's README states."""
    if not isinstance(config, dict) or not isinstance(config.get("rules"), list):
        raise AnsibleFilterError("adapter_rbac_rules: expects the adapter configuration (a dict with a rules list)")
    groups: dict[str, set] = {"": {"namespaces"}}
    metrics: set = set()
    wide_objects = wide_metrics = False
    for index, rule in enumerate(config["rules"]):
        where = f"adapter_rbac_rules: rules[{index}]"
        if not isinstance(rule, dict):
            raise AnsibleFilterError(f"{where} is not a dict")
        resources = _rule_resources(rule, where)
        metric = _rule_metric(rule)
        if resources is None:
            wide_objects = wide_metrics = True
            continue
        for group, plural in resources:
            groups.setdefault(group, set()).add(plural)
            if plural == "namespaces":
                continue
            if metric is None:
                wide_metrics = True
            else:
                metrics.add(f"{plural}.{group}/{metric}" if group else f"{plural}/{metric}")
    verbs = ["get", "list", "watch"]
    if wide_objects:
        adapter = [{"apiGroups": ["*"], "resources": ["*"], "verbs": verbs}]
    else:
        adapter = [{"apiGroups": [g], "resources": sorted(r), "verbs": verbs} for g, r in sorted(groups.items())]
    reader = {"apiGroups": ["custom.metrics.k8s.io"], "resources": ["*"] if wide_metrics else sorted(metrics),
              "verbs": ["get", "list"]}
    return {"adapter": adapter, "metrics_reader": [reader]}


class FilterModule:
    def filters(self) -> dict:
        return {"gpu_adapter_rules": gpu_adapter_rules, "adapter_helm_values": adapter_helm_values,
                "adapter_rbac_rules": adapter_rbac_rules}
