# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the GPU monitoring roles' logic (dcgm_exporter, gpu_alerts, gpu_dashboard).

Pure functions over plain data, so they are unit-tested without a cluster:
- the DCGM exporter's counters CSV from the role's list of counters (checked as the exporter checks it);
- per GPU Node, why no Ready exporter pod runs there (the device plugin's diagnosis, _k8s_gpu);
- the Prometheus alert rules of the gpu_alerts role;
- the Pod Security labels of the namespaces the roles create, and whether an existing namespace admits their pods.
"""
from __future__ import annotations

import re

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_gpu import daemonset_pod_gap, node_not_ready

# The Prometheus types the exporter accepts in its CSV (dcgm-exporter's promMetricType; "label" turns a field into
# a label of the other metrics, e.g. DCGM_FI_DRIVER_VERSION).
COUNTER_TYPES = ("gauge", "counter", "histogram", "summary", "label")
# DCGM fields (DCGM_FI_*) and the exporter's own (DCGM_EXP_*, e.g. DCGM_EXP_XID_ERRORS_COUNT).
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
# Profiling (DCP) fields: the exporter reads them through DCGM's profiling module, which needs CAP_SYS_ADMIN.
PROFILING_PREFIX = "DCGM_FI_PROF_"


class MonitoringError(ValueError):
    """Bad input, with a message naming the entry and the fix."""


def check_counters(counters: list, source: str = "dcgm_exporter_counters") -> list[dict]:
    """The counters as {field, type, help} dicts, or MonitoringError naming the first bad entry and the fix."""
    if not isinstance(counters, list) or not counters:
        raise MonitoringError(f"{source} must be a non-empty list of {{field, type, help}} entries")
    seen: dict[str, int] = {}
    out = []
    for index, entry in enumerate(counters):
        where = f"{source}[{index}]"
        if not isinstance(entry, dict):
            raise MonitoringError(f"{where} must be a dict with keys field, type and help, got {entry!r}")
        unknown = sorted(set(entry) - {"field", "type", "help"})
        if unknown:
            raise MonitoringError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: field, type, help)")
        field = str(entry.get("field") or "").strip()
        ptype = str(entry.get("type") or "").strip()
        text = str(entry.get("help") or "").strip()
        where = f"{where} ({field or 'no field'})"
        if not _FIELD.match(field):
            raise MonitoringError(f"{where}: field must be a DCGM field name such as DCGM_FI_DEV_GPU_UTIL "
                                  "(DCGM_FI_* or the exporter's DCGM_EXP_*)")
        if ptype not in COUNTER_TYPES:
            raise MonitoringError(f"{where}: unknown type {ptype!r}; the exporter accepts {', '.join(COUNTER_TYPES)}")
        if not text or any(c in text for c in ",\n\r\""):
            raise MonitoringError(f"{where}: help must be one line of text without commas or quotes (CSV), got {text!r}")
        if field in seen:
            raise MonitoringError(f"{where}: {field} is listed twice (entries {seen[field]} and {index})")
        seen[field] = index
        out.append({"field": field, "type": ptype, "help": text})
    return out


def counters_csv(counters: list, profiling: bool = True, extra: list | None = None) -> str:
    """The exporter's counters file: one "FIELD, type, help" line per counter.

    extra counters are added after the list (a field listed in both is an error); profiling=False leaves out the
    DCGM_FI_PROF_* fields, so the exporter runs without CAP_SYS_ADMIN.
    """
    base = check_counters(counters)
    more = check_counters(extra, "dcgm_exporter_extra_counters") if extra else []
    both = check_counters(base + more, "dcgm_exporter_counters + dcgm_exporter_extra_counters")
    lines = ["# DCGM field, Prometheus type, help (written by the k8sgpu.nvidia.dcgm_exporter role)"]
    for entry in both:
        if not profiling and entry["field"].startswith(PROFILING_PREFIX):
            continue
        lines.append(f"{entry['field']}, {entry['type']}, {entry['help']}")
    return "\n".join(lines) + "\n"


def profiling_fields(csv_text: str) -> list[str]:
    """The DCGM_FI_PROF_* fields a counters file asks for (those need CAP_SYS_ADMIN)."""
    fields = [line.split(",", 1)[0].strip() for line in csv_text.splitlines() if line.strip() and not line.startswith("#")]
    return [f for f in fields if f.startswith(PROFILING_PREFIX)]


def daemonset_rolled_out(daemonset: dict | None) -> bool:
    """The DaemonSet's controller saw its latest spec, and every pod it schedules runs that spec and is available."""
    if not daemonset:
        return False
    status = daemonset.get("status") or {}
    desired = status.get("desiredNumberScheduled", -1)
    return (status.get("observedGeneration", 0) >= (daemonset.get("metadata") or {}).get("generation", 1)
            and status.get("updatedNumberScheduled", 0) == desired
            and status.get("numberAvailable", 0) == desired)


def deployment_rolled_out(deployment: dict | None) -> bool:
    """The Deployment's controller saw its latest spec, and every replica runs that spec and is available."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    return (status.get("observedGeneration", 0) >= (deployment.get("metadata") or {}).get("generation", 1)
            and status.get("updatedReplicas", 0) == wanted
            and status.get("availableReplicas", 0) == wanted
            and status.get("replicas", 0) == wanted)


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def _required_label(daemonset: dict) -> tuple[str, str] | None:
    """The (key, value) the DaemonSet's first required node-affinity term asks with operator In, if any."""
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In" and len(expr.get("values") or []) == 1:
                return expr["key"], expr["values"][0]
    return None


def gpu_nodes(nodes: list, daemonset: dict | None, names: list | None = None) -> list[str]:
    """The Nodes that must run the DaemonSet: those named (the inventory's GPU hosts) and those with the label its
    node affinity requires (nvidia.com/gpu.present=true)."""
    wanted = set(names or [])
    label = _required_label(daemonset or {})
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if label and labels.get(label[0]) == label[1]:
            wanted.add(_name(node))
    return sorted(n for n in wanted if n)


def gpu_nodes_outside(nodes: list, daemonset: dict | None, names: list | None = None,
                      resource: str = "nvidia.com/gpu") -> list[str]:
    """Nodes with GPU capacity that gpu_nodes leaves out (no label, not named): no exporter will run there."""
    inside = set(gpu_nodes(nodes, daemonset, names))
    return sorted(_name(n) for n in nodes if _name(n) not in inside
                  and str(((n.get("status") or {}).get("capacity") or {}).get(resource) or "0") != "0")


# Taints an autoscaler puts on a Node it is removing: no new pod goes there, and the Node is about to go.
GOING_AWAY_TAINTS = ("karpenter.sh/disrupted", "ToBeDeletedByClusterAutoscaler")


def node_going_away(node: dict) -> bool:
    """True for a Node being deleted or drained for removal by Karpenter or the cluster-autoscaler."""
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return any(t.get("key") in GOING_AWAY_TAINTS for t in (node.get("spec") or {}).get("taints") or [])


def daemonset_node_problems(nodes: list, daemonset: dict | None, pods: list, names: list | None = None,
                            what: str = "pod") -> dict[str, str]:
    """Per GPU Node (see gpu_nodes) without a Ready pod of the DaemonSet, why; {} when every one has one.

    nodes, daemonset and pods are API objects (the resources of kubernetes.core.k8s_info); pods are the
    DaemonSet's pods (any Node); what names them in the text, e.g. "dcgm-exporter pod".
    """
    by_name = {_name(n): n for n in nodes}
    by_node: dict[str, list] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
    problems = {}
    for name in gpu_nodes(nodes, daemonset, names):
        node = by_name.get(name)
        if node is None:
            problems[name] = f"no Node named {name}"
            continue
        if node_going_away(node):
            continue
        why = node_not_ready(node) or daemonset_pod_gap(node, by_node.get(name, []), daemonset or {}, what)
        if why:
            problems[name] = why
    return problems


# --- dashboards ----------------------------------------------------------------------------------------------------

# A ConfigMap holds at most 1 MiB (etcd's request limit, less the object's other fields).
CONFIGMAP_MAX_BYTES = 1024 * 1024 - 4096


def grafana_dashboard(text: str, source: str) -> str:
    """The dashboard JSON text, checked: valid JSON, an object with panels (or rows, before Grafana 5) and a title,
    small enough for a ConfigMap. MonitoringError names the source and the fix."""
    import json

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MonitoringError(f"{source} is not valid JSON: {exc}; export the dashboard from Grafana "
                              "(Share, Export, Save to file) or download it from grafana.com") from None
    if not isinstance(data, dict) or not ("panels" in data or "rows" in data) or not data.get("title"):
        raise MonitoringError(f"{source} is not a Grafana dashboard: a JSON object with a title and panels is expected")
    size = len(text.encode())
    if size > CONFIGMAP_MAX_BYTES:
        raise MonitoringError(f"{source} is {size} bytes; a ConfigMap holds at most {CONFIGMAP_MAX_BYTES}: "
                              "remove panels or ship it another way")
    return text


# --- alert rules -----------------------------------------------------------------------------------------------

# Setting -> its kind: str, list, dict, "number" (a positive number), "count" (a whole number, at least 1).
_ALERT_SETTINGS = {
    "job": str, "selector": str, "severity_critical": str, "severity_warning": str,
    "target_down_for": str, "xid_for": str, "xid_ignore": list, "gpu_temp_celsius": "number", "gpu_temp_for": str,
    "memory_temp_celsius": "number", "memory_temp_for": str, "ecc_dbe_for": str, "row_remap_for": str,
    "framebuffer_percent": "number", "framebuffer_for": str, "gpu_count_for": str, "gpu_count_metric": str,
    "gpu_replicas": "count", "group_name": str, "extra_labels": dict, "runbook_url": str,
}
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
ALERT_NAMES = ("DCGMExporterTargetDown", "GPUXidError", "GPUTemperatureHigh", "GPUMemoryTemperatureHigh",
               "GPUEccDoubleBitErrors", "GPURowRemapFailure", "GPUFramebufferNearlyFull", "GPUNodeGPUsNotReported")


def _check_alert_settings(settings: dict) -> dict:
    if not isinstance(settings, dict):
        raise MonitoringError("gpu_alert_rules expects a dict of settings")
    missing = sorted(set(_ALERT_SETTINGS) - set(settings))
    if missing:
        raise MonitoringError(f"gpu_alert_rules: missing setting(s) {', '.join(missing)}")
    out = {}
    for key, kind in _ALERT_SETTINGS.items():
        value = settings[key]
        if kind in ("number", "count"):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise MonitoringError(f"gpu_alerts_{key}: a number, got {value!r}") from None
            if value <= 0 or (kind == "count" and not value.is_integer()):
                raise MonitoringError(f"gpu_alerts_{key}: a positive {'whole ' if kind == 'count' else ''}number, "
                                      f"got {settings[key]!r}")
            if value.is_integer():
                value = int(value)
        elif not isinstance(value, kind):
            raise MonitoringError(f"gpu_alerts_{key}: expected {kind.__name__}, got {value!r}")
        if key.endswith("_for") and not (_DURATION.match(value) or value == "0s"):
            raise MonitoringError(f"gpu_alerts_{key}: a Prometheus duration such as 5m or 1h30m, got {value!r}")
        out[key] = value
    if not 0 < out["framebuffer_percent"] <= 100:
        raise MonitoringError(f"gpu_alerts_framebuffer_percent: between 0 and 100, got {out['framebuffer_percent']!r}")
    bad_xid = [x for x in out["xid_ignore"] if not str(x).isdigit()]
    if bad_xid:
        raise MonitoringError(f"gpu_alerts_xid_ignore: XID codes are whole numbers, got {bad_xid!r}")
    if "\"" in out["job"] or "}" in out["selector"]:
        raise MonitoringError("gpu_alerts_job must not contain quotes, and gpu_alerts_selector is label matchers "
                              "without braces, e.g. cluster=\"a\"")
    return out


def gpu_alert_rules(settings: dict) -> list[dict]:
    """The rule groups (Prometheus rules file's "groups", the same as a PrometheusRule's spec.groups)."""
    s = _check_alert_settings(settings)
    job = f'job="{s["job"]}"' + (f', {s["selector"]}' if s["selector"] else "")
    sel = "{" + job + "}"
    gpu = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on node {{ $labels.node }}"
    xid_filter = "".join(f" != {int(x)}" for x in s["xid_ignore"])
    ksm = 'kube_node_status_allocatable{resource="nvidia_com_gpu"}'
    advertised = f"max by (node) ({ksm})" + (f" / {s['gpu_replicas']}" if s["gpu_replicas"] > 1 else "")
    reported = f"count by (node) (group by (node, UUID) ({s['gpu_count_metric']}{sel}))"

    def rule(name: str, expr: str, duration: str, severity: str, summary: str, description: str) -> dict:
        labels = {"severity": severity, **{str(k): str(v) for k, v in s["extra_labels"].items()}}
        annotations = {"summary": summary, "description": description}
        if s["runbook_url"]:
            annotations["runbook_url"] = f"{s['runbook_url'].rstrip('/')}/{name.lower()}"
        out = {"alert": name, "expr": expr}
        if duration not in ("0s", "0m"):
            out["for"] = duration
        out.update({"labels": labels, "annotations": annotations})
        return out

    rules = [
        rule("DCGMExporterTargetDown", f"up{sel} == 0", s["target_down_for"], s["severity_warning"],
             "DCGM exporter target down",
             "Prometheus cannot scrape the DCGM exporter at {{ $labels.instance }} (node {{ $labels.node }}): "
             "no GPU metrics from that node."),
        rule("GPUXidError", f"DCGM_FI_DEV_XID_ERRORS{sel} > 0{xid_filter}", s["xid_for"], s["severity_critical"],
             "GPU reported an XID error",
             f"{gpu} reported XID {{{{ $value }}}}: see NVIDIA's XID catalogue for the action."),
        rule("GPUTemperatureHigh", f"DCGM_FI_DEV_GPU_TEMP{sel} > {s['gpu_temp_celsius']}", s["gpu_temp_for"],
             s["severity_warning"], "GPU temperature high",
             f"{gpu} is at {{{{ $value }}}} C (threshold {s['gpu_temp_celsius']} C)."),
        rule("GPUMemoryTemperatureHigh", f"DCGM_FI_DEV_MEMORY_TEMP{sel} > {s['memory_temp_celsius']}",
             s["memory_temp_for"], s["severity_warning"], "GPU memory temperature high",
             f"{gpu} memory is at {{{{ $value }}}} C (threshold {s['memory_temp_celsius']} C)."),
        rule("GPUEccDoubleBitErrors", f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{sel} > 0", s["ecc_dbe_for"],
             s["severity_critical"], "GPU double-bit ECC errors",
             f"{gpu} has {{{{ $value }}}} uncorrectable (double-bit) ECC errors since the driver loaded: "
             "drain the node and reset the GPU."),
        rule("GPURowRemapFailure", f"DCGM_FI_DEV_ROW_REMAP_FAILURE{sel} > 0", s["row_remap_for"],
             s["severity_critical"], "GPU row remapping failed",
             f"{gpu} could not remap a memory row: the GPU needs service."),
        rule("GPUFramebufferNearlyFull",
             f"DCGM_FI_DEV_FB_USED{sel} / (DCGM_FI_DEV_FB_USED{sel} + DCGM_FI_DEV_FB_FREE{sel}) * 100"
             f" > {s['framebuffer_percent']}", s["framebuffer_for"], s["severity_warning"],
             "GPU framebuffer nearly full",
             f"{gpu} framebuffer is {{{{ $value | humanize }}}}% used (threshold {s['framebuffer_percent']}%)."),
        # advertised minus reported (0 where the exporter reports nothing), so $value is how many are missing.
        rule("GPUNodeGPUsNotReported",
             f"({advertised}) - on (node) ({reported} or on (node) ({advertised} * 0)) > 0",
             s["gpu_count_for"], s["severity_warning"], "Node advertises more GPUs than the exporter reports",
             "Node {{ $labels.node }} advertises {{ $value }} more GPU(s) than the DCGM exporter reports "
             "(kube-state-metrics' allocatable nvidia.com/gpu minus the GPUs with metrics): the exporter is "
             "missing there or cannot see every GPU."),
    ]
    return [{"name": s["group_name"], "rules": rules}]


# ---------------------------------------------------------------------------------------------------------------
# Pod Security Admission: the namespaces the roles create
# ---------------------------------------------------------------------------------------------------------------
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")  # strictest first
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "k8sgpu.nvidia"}


def pod_security_labels(level: str, version: str = "latest") -> dict:
    """enforce, audit and warn at `level`, each pinned to the policy `version` ("latest" or "v1.N")."""
    if level not in POD_SECURITY_LEVELS:
        raise MonitoringError(f"Pod Security level {level!r} is not one of {', '.join(POD_SECURITY_LEVELS)}")
    if not isinstance(version, str) or not re.match(r"^(latest|v1\.[0-9]+)$", version):
        raise MonitoringError(f"Pod Security version {version!r} is neither 'latest' nor 'v1.<minor>'")
    out = {}
    for mode in ("enforce", "audit", "warn"):
        out[f"{POD_SECURITY_PREFIX}{mode}"] = level
        out[f"{POD_SECURITY_PREFIX}{mode}-version"] = version
    return out


def pod_security_namespace(name: str, level: str, version: str = "latest") -> dict:
    """The Namespace a role creates: labelled as the collection's, with the Pod Security labels of `level`."""
    if not isinstance(name, str) or not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", name):
        raise MonitoringError(f"namespace {name!r} is not a DNS label")
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**MANAGED_BY, **pod_security_labels(level, version)}}}


def pod_security_conflict(namespace: dict | None, needed: str) -> str:
    """Why the pods needing `needed` would be refused in an existing namespace ('' when they are admitted).

    Only the enforce label refuses pods (audit and warn only record and warn); without it the cluster's default
    applies (privileged, unless the admission configuration says otherwise)."""
    if needed not in POD_SECURITY_LEVELS:
        raise MonitoringError(f"Pod Security level {needed!r} is not one of {', '.join(POD_SECURITY_LEVELS)}")
    if not namespace:
        return ""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    enforce = labels.get(f"{POD_SECURITY_PREFIX}enforce")
    if enforce not in POD_SECURITY_LEVELS:
        return ""
    if POD_SECURITY_LEVELS.index(enforce) < POD_SECURITY_LEVELS.index(needed):
        name = (namespace.get("metadata") or {}).get("name")
        return (f"namespace {name} enforces Pod Security level {enforce}, but these pods need {needed}: the API "
                f"server would refuse them. Label it (kubectl label --overwrite namespace {name} "
                f"{POD_SECURITY_PREFIX}enforce={needed}) or choose another namespace")
    return ""


# --- removal (the private role _k8s) -------------------------------------------------------------------------------

def namespace_leftovers(results: list, defaults: list | None = None, removed: list | None = None) -> list[str]:
    """What a namespace still holds ("Kind/name", sorted) that is not Kubernetes' own (defaults, "Kind/name"), not
    being removed (removed: API objects), not owned by another object (garbage-collected with it) and not already
    being deleted. results: the loop results of kubernetes.core.k8s_info, one per kind (item.kind, resources)."""
    skip = set(defaults or [])
    skip.update(f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o in removed or [] if isinstance(o, dict))
    out = set()
    for result in results or []:
        kind = (result.get("item") or {}).get("kind")
        for obj in result.get("resources") or []:
            meta = obj.get("metadata") or {}
            if meta.get("ownerReferences") or meta.get("deletionTimestamp"):
                continue
            key = f"{obj.get('kind') or kind}/{meta.get('name')}"
            if key not in skip:
                out.add(key)
    return sorted(out)
