# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters gpu_adapter_rules, adapter_helm_values and adapter_rbac_rules of the gpu_metrics_adapter role).

prometheus-adapter rules for the DCGM exporter's GPU metrics, the same rules as Helm values, and the RBAC rules
those rules need (the adapter's read access to the objects they name, the HPA's read access to the metrics).
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit


class AdapterRulesError(ValueError):
    """A bad rule or setting, with a message naming it and the fix."""


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
        raise AdapterRulesError(f"gpu_adapter_rules: exporter_service must be a Service name, got {exporter_service!r}")
    for name, value in (("metric", metric), ("object_metric", object_metric)):
        if not isinstance(value, str) or not _LABEL.match(value):
            raise AdapterRulesError(f"gpu_adapter_rules: {name} {value!r} is not a Prometheus metric name")
    if aggregation not in _AGGREGATIONS:
        raise AdapterRulesError(f"gpu_adapter_rules: aggregation {aggregation!r} is not one of {list(_AGGREGATIONS)}")
    if extra_rules is not None and not isinstance(extra_rules, list):
        raise AdapterRulesError("gpu_adapter_rules: extra_rules must be a list of adapter rules")
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
        raise AdapterRulesError("adapter_helm_values: expects the adapter configuration (a dict with a rules list)")
    parts = urlsplit(str(prometheus_url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AdapterRulesError(f"adapter_helm_values: {prometheus_url!r} is not an http(s) URL")
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


# What an adapter rule may never make its RBAC grant: the adapter reads, with get/list/watch, every object of the
# resources its rules name, so a rule on Secrets (or a wildcard) would let it read every Secret of the cluster.
_FORBIDDEN_RESOURCES = ("secrets",)
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GROUP_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_FIX_RESOURCES = ("give resources.overrides naming each label's resource explicitly, for example "
                  "{exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}")


def _rule_name(rule: dict, index: int) -> str:
    return f"gpu_metrics_adapter rules[{index}] (seriesQuery {rule.get('seriesQuery')!r})"


def _rule_resources(rule: dict, where: str) -> list[tuple[str, str]]:
    """(API group, plural) of every Kubernetes resource a rule maps series to.

    Refused (AdapterRulesError naming the rule and the fix): resources from a template (the adapter would need to
    read every resource), a wildcard or malformed resource or group, a subresource, and Secrets."""
    resources = rule.get("resources") or {}
    if not isinstance(resources, dict):
        raise AdapterRulesError(f"{where}: resources must be a dict (overrides and/or template)")
    if resources.get("template"):
        raise AdapterRulesError(
            f"{where}: resources.template {resources['template']!r} lets any label name any resource, so the adapter "
            f"would need read access to every resource of the cluster (Secrets included), which is refused; "
            f"{_FIX_RESOURCES}.")
    overrides = resources.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise AdapterRulesError(f"{where}: resources.overrides must be a dict of label: {{resource: ...}}; "
                                f"{_FIX_RESOURCES}")
    out = []
    for label, target in overrides.items():
        if isinstance(target, dict):
            group, name = str(target.get("group") or ""), target.get("resource")
        else:
            group, name = "", target
        if not isinstance(name, str) or not name:
            raise AdapterRulesError(f"{where}: resources.overrides.{label} names no resource; {_FIX_RESOURCES}")
        if "." in name and not group:
            name, group = name.split(".", 1)
        plural = _plural(name)
        if group == "core":
            group = ""
        if not _RESOURCE_NAME.match(plural) or (group and not _GROUP_NAME.match(group)):
            raise AdapterRulesError(
                f"{where}: resources.overrides.{label} names {name!r} (group {group!r}), not one resource of one API "
                f"group (no wildcard, no subresource); {_FIX_RESOURCES}")
        if plural in _FORBIDDEN_RESOURCES:
            raise AdapterRulesError(
                f"{where}: resources.overrides.{label} maps series to {plural}, and the adapter would then read every "
                f"Secret of the cluster; refused. Map the series to the object the metric is about (a pod, a "
                f"namespace, a service).")
        out.append((group, plural))
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

    Never a wildcard (resource, API group or verb) and never Secrets: a rule whose resources come from a template,
    that names a wildcard, a subresource or Secrets, or whose metric name a regular expression computes, is refused
    (AdapterRulesError naming the rule's index and seriesQuery, and the fix)."""
    if not isinstance(config, dict) or not isinstance(config.get("rules"), list):
        raise AdapterRulesError("adapter_rbac_rules: expects the adapter configuration (a dict with a rules list)")
    groups: dict[str, set] = {"": {"namespaces"}}
    metrics: set = set()
    for index, rule in enumerate(config["rules"]):
        if not isinstance(rule, dict):
            raise AdapterRulesError(f"adapter_rbac_rules: gpu_metrics_adapter rules[{index}] is not a dict")
        where = f"adapter_rbac_rules: {_rule_name(rule, index)}"
        resources = _rule_resources(rule, where)
        metric = _rule_metric(rule)
        for group, plural in resources:
            groups.setdefault(group, set()).add(plural)
            if plural == "namespaces":
                continue
            if metric is None:
                raise AdapterRulesError(
                    f"{where}: its metric's name is computed (name.as {(rule.get('name') or {}).get('as')!r}, or "
                    f"name.matches without name.as), so the HPA controller's read access could only be every custom "
                    f"metric (*), which is refused; give name.as the metric's literal name (a Prometheus metric "
                    f"name), one rule per metric.")
            metrics.add(f"{plural}.{group}/{metric}" if group else f"{plural}/{metric}")
    verbs = ["get", "list", "watch"]
    adapter = [{"apiGroups": [g], "resources": sorted(r), "verbs": verbs} for g, r in sorted(groups.items())]
    reader = {"apiGroups": ["custom.metrics.k8s.io"], "resources": sorted(metrics), "verbs": ["get", "list"]}
    _check_no_wildcard(adapter + [reader])
    return {"adapter": adapter, "metrics_reader": [reader]}


def _check_no_wildcard(rules: list) -> None:
    """The last line of defence: no PolicyRule with a wildcard anywhere, none on Secrets."""
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs"):
            if any("*" in str(v) for v in rule[key]):
                raise AdapterRulesError(f"adapter_rbac_rules: a rule would grant {key} {rule[key]}: refused")
        if "custom.metrics.k8s.io" not in rule["apiGroups"] and \
                any(str(r).split("/", maxsplit=1)[0] in _FORBIDDEN_RESOURCES for r in rule["resources"]):
            raise AdapterRulesError(f"adapter_rbac_rules: a rule would grant {rule['resources']}: refused")
