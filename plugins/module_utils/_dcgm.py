# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the dcgm_exporter role's counters file and objects (filters dcgm_counters_csv,
dcgm_profiling_fields and dcgm_exporter_objects).

Pure functions over plain data: the counters CSV from the role's list of counters, checked as the exporter checks it,
the profiling (DCP) fields a counters file asks for, and the exporter's objects (its ConfigMap, DaemonSet, Service,
ServiceMonitor, and the equivalent Prometheus scrape configuration) from the role's settings.
"""
from __future__ import annotations

import re
from typing import Any

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_daemonset as nd


class DcgmError(nd.NodeDaemonSetError):
    """Bad input, with a message naming the entry and the fix."""


# The Prometheus types the exporter accepts in its CSV (dcgm-exporter's promMetricType; "label" turns a field into
# a label of the other metrics, e.g. DCGM_FI_DRIVER_VERSION).
COUNTER_TYPES = ("gauge", "counter", "histogram", "summary", "label")
# DCGM fields (DCGM_FI_*) and the exporter's own (DCGM_EXP_*, e.g. DCGM_EXP_XID_ERRORS_COUNT).
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
# Profiling (DCP) fields: the exporter reads them through DCGM's profiling module, which needs CAP_SYS_ADMIN.
PROFILING_PREFIX = "DCGM_FI_PROF_"


def check_counters(counters: list, source: str = "dcgm_exporter_counters") -> list[dict]:
    """The counters as {field, type, help} dicts, or DcgmError naming the first bad entry and the fix."""
    if not isinstance(counters, list) or not counters:
        raise DcgmError(f"{source} must be a non-empty list of {{field, type, help}} entries")
    seen: dict[str, int] = {}
    out = []
    for index, entry in enumerate(counters):
        where = f"{source}[{index}]"
        if not isinstance(entry, dict):
            raise DcgmError(f"{where} must be a dict with keys field, type and help, got {entry!r}")
        unknown = sorted(set(entry) - {"field", "type", "help"})
        if unknown:
            raise DcgmError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: field, type, help)")
        field = str(entry.get("field") or "").strip()
        ptype = str(entry.get("type") or "").strip()
        text = str(entry.get("help") or "").strip()
        where = f"{where} ({field or 'no field'})"
        if not _FIELD.match(field):
            raise DcgmError(f"{where}: field must be a DCGM field name such as DCGM_FI_DEV_GPU_UTIL "
                            "(DCGM_FI_* or the exporter's DCGM_EXP_*)")
        if ptype not in COUNTER_TYPES:
            raise DcgmError(f"{where}: unknown type {ptype!r}; the exporter accepts {', '.join(COUNTER_TYPES)}")
        if not text or any(c in text for c in ",\n\r\""):
            raise DcgmError(f"{where}: help must be one line of text without commas or quotes (CSV), got {text!r}")
        if field in seen:
            raise DcgmError(f"{where}: {field} is listed twice (entries {seen[field]} and {index})")
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


# The exporter's objects (filter dcgm_exporter_objects).

OWNER = "dcgm_exporter_objects"
# Where the counters CSV is mounted in the exporter's container.
COUNTERS_DIR = "/etc/dcgm-exporter/k8sgpu"
# The toolkit gives a container GPUs listed as volume mounts under this directory (the device plugin's volume-mounts
# strategy), which unprivileged containers cannot ask for through NVIDIA_VISIBLE_DEVICES any more.
DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"
# The Node name in a `node` label, in both the ServiceMonitor (relabelings) and the plain scrape configuration.
NODE_RELABEL = {"source": "__meta_kubernetes_pod_node_name", "target": "node"}
# What exporter_objects builds (its part argument), each from the settings it reads (the role's variables without the
# prefix, and what its vars derive from them: the image, the labels, the checked counters CSV, the tolerations;
# managed: the text of the scrape configuration's first comment, ansible_managed). A part reads only its own
# settings, so that Ansible templates only those (the settings are templated when they are read).
PARTS = ("objects", "service_monitor", "scrape_config")
SETTINGS = {
    "objects": ("name", "namespace", "version", "image", "image_pull_policy", "image_pull_secrets", "labels",
                "counters_csv", "port", "collect_interval_ms", "gpus_by_volume_mount", "kubelet_pod_resources_dir",
                "node_affinity_label", "tolerations", "priority_class", "runtime_class", "resources",
                "probe_initial_delay", "probe_period", "probe_timeout", "probe_failure_threshold"),
    "service_monitor": ("name", "namespace", "labels", "service_monitor_labels", "scrape_interval"),
    "scrape_config": ("name", "namespace", "scrape_interval", "managed"),
}

_SCRAPE_CONFIG = """\
{managed}
# DCGM exporter scrape configuration, written by k8sgpu.nvidia.dcgm_exporter because the cluster has no
# ServiceMonitor CRD (monitoring.coreos.com/v1). Give this file to Prometheus with scrape_config_files:, or copy
# the job under scrape_configs:. It gives the targets the labels a ServiceMonitor would (namespace, service, pod,
# container, endpoint, job = the Service's name) and the Node's name in `node`; honor_labels: false turns the
# exporter's own pod labels into exported_namespace/exported_pod/exported_container.
scrape_configs:
  - job_name: {job}
    scrape_interval: {interval}
    metrics_path: /metrics
    honor_labels: false
    kubernetes_sd_configs:
      - role: endpoints
        namespaces:
          names: {namespaces}
    relabel_configs:
      - source_labels: [__meta_kubernetes_service_name, __meta_kubernetes_endpoint_port_name]
        regex: {regex}
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_service_name]
        target_label: service
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_container_name]
        target_label: container
      - source_labels: [__meta_kubernetes_endpoint_port_name]
        target_label: endpoint
      - source_labels: [__meta_kubernetes_service_name]
        target_label: job
      - source_labels: {node_source}
        target_label: {node_target}
"""


def comment(text: str) -> str:
    """The text as a block of # comment lines, as ansible.builtin.comment (style plain) writes it."""
    return "#\n" + ("# " + text.replace("\n", "\n# ")).replace("# \n", "#\n") + "\n#"


def exporter_objects(settings: Any, part: str | None = None, allow_unsafe_settings: Any = False) -> Any:
    """What the role puts into the cluster, one part or all: objects, [ConfigMap, DaemonSet, Service] (applied in
    this order); service_monitor, the ServiceMonitor; scrape_config, the text of the equivalent Prometheus scrape
    configuration file. Without part, {objects, service_monitor, scrape_config}."""
    if part is not None and part not in PARTS:
        raise DcgmError(f"{OWNER}: part must be one of {', '.join(PARTS)}, got {part!r}")
    builders = {"objects": _workload, "service_monitor": _service_monitor, "scrape_config": _scrape_config}

    def of(name: str) -> dict:
        s = nd.settings_of(settings, SETTINGS[name], OWNER)
        if name == "objects":  # lets check_host_paths pass (with a warning) what it refuses
            s["allow_unsafe_settings"] = allow_unsafe_settings
        return s

    if part is not None:
        return builders[part](of(part))
    return {name: builders[name](of(name)) for name in PARTS}


POD_RESOURCES_NAME = "pod-resources"


def host_path_problem(path: Any) -> str | None:
    """Why dcgm_exporter_kubelet_pod_resources_dir is not the kubelet's pod-resources directory (None when it is).

    The directory is a hostPath volume of a root (uid 0, with SYS_ADMIN for profiling) container: anything else of the
    host there (/, /etc, the kubelet's whole directory with every pod's Secret volumes) is readable by the exporter's
    image. The rule: an absolute, normalised path without '..' whose last component is pod-resources - the kubelet's
    --root-dir (/var/lib/kubelet by default; /var/lib/k0s/kubelet, /var/snap/microk8s/common/var/lib/kubelet, ...)
    followed by /pod-resources."""
    if not isinstance(path, str) or not path.startswith("/") or re.search(r"[\x00-\x1f\x7f]", path):
        return "it must be an absolute path"
    parts = path.split("/")[1:]
    if path != "/" and (".." in parts or "." in parts or "" in parts):
        return "it must be normalised, without '..', '.', '//' or a trailing '/'"
    if parts[-1] != POD_RESOURCES_NAME or len(parts) < 2:
        return (f"it must be the kubelet's {POD_RESOURCES_NAME} directory (<kubelet root-dir>/{POD_RESOURCES_NAME}, "
                f"/var/lib/kubelet/{POD_RESOURCES_NAME} by default)")
    return None


def check_host_paths(s: dict) -> str | None:
    """None, or (with allow_unsafe_settings) the warning for a pod-resources directory outside the rule; without it,
    DcgmError naming the variable, the value and the fix."""
    problem = host_path_problem(s["kubelet_pod_resources_dir"])
    if not problem:
        return None
    text = (f"dcgm_exporter_kubelet_pod_resources_dir ({s['kubelet_pod_resources_dir']!r}) is mounted as a hostPath "
            f"volume in the exporter's root container, and {problem}: another host directory there is readable by the "
            "exporter's image (/ or /etc the whole host, the kubelet's directory every pod's Secrets).")
    if nd.to_bool(s.get("allow_unsafe_settings") or False):
        return text + " Let through because dcgm_exporter_allow_unsafe_settings is true."
    raise DcgmError(text + " Give the kubelet's pod-resources directory, or set dcgm_exporter_allow_unsafe_settings: "
                    "true to mount it anyway.")


def _workload(s: dict) -> list[dict]:
    """[ConfigMap, DaemonSet, Service]: the counters CSV, the exporter's pod in the node agents' DaemonSet, and the
    Service in front of its port metrics."""
    name, namespace, labels, csv_text = s["name"], s["namespace"], s["labels"], s["counters_csv"]
    if not isinstance(csv_text, str):
        raise DcgmError(f"{OWNER}: counters_csv must be the counters CSV text (filter dcgm_counters_csv)")
    check_host_paths(s)
    port = nd.to_int(s["port"], "dcgm_exporter_port")
    counters_name = f"{name}-counters"
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": counters_name, "namespace": namespace, "labels": {**labels, **nd.MANAGED_BY}},
        "data": {"counters.csv": csv_text.strip() + "\n"},
    }
    # uid 0 without capabilities: the pod-resources socket is root's (0600). SYS_ADMIN only for DCGM's profiling
    # module (DCGM_FI_PROF_* counters), which the RuntimeDefault profile honours. Never privileged: a privileged
    # container runs seccomp Unconfined whatever it asks for.
    capabilities: dict = {"drop": ["ALL"]}
    if profiling_fields(csv_text):
        capabilities["add"] = ["SYS_ADMIN"]
    probe = {"httpGet": {"path": "/health", "port": "metrics"},
             "initialDelaySeconds": nd.to_int(s["probe_initial_delay"], "dcgm_exporter_probe_initial_delay"),
             "periodSeconds": nd.to_int(s["probe_period"], "dcgm_exporter_probe_period"),
             "timeoutSeconds": nd.to_int(s["probe_timeout"], "dcgm_exporter_probe_timeout")}
    mounts = [{"name": "pod-gpu-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True},
              {"name": "counters", "mountPath": COUNTERS_DIR, "readOnly": True}]
    volumes = [{"name": "pod-gpu-resources", "hostPath": {"path": s["kubelet_pod_resources_dir"]}},
               {"name": "counters", "configMap": {"name": counters_name}}]
    if nd.to_bool(s["gpus_by_volume_mount"]):
        # The GPU list as the toolkit reads it from an unprivileged container: a mount named after the devices.
        mounts.append({"name": "all-gpus", "mountPath": f"{DEVICE_LIST_DIR}/all", "readOnly": True})
        volumes.append({"name": "all-gpus", "hostPath": {"path": "/dev/null", "type": "CharDevice"}})
    pod = {
        "containers": [{
            "name": "exporter",
            "image": s["image"],
            "imagePullPolicy": s["image_pull_policy"],
            "env": [
                {"name": "DCGM_EXPORTER_LISTEN", "value": f":{port}"},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                {"name": "DCGM_EXPORTER_COLLECTORS", "value": f"{COUNTERS_DIR}/counters.csv"},
                {"name": "DCGM_EXPORTER_INTERVAL", "value": str(s["collect_interval_ms"])},
                # Every GPU of the node, outside the scheduler's accounting (it only reads them). A toolkit that
                # ignores this variable from unprivileged containers reads the volume mount instead.
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                # The Hostname label of every metric.
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
            "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
            "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "privileged": False,
                                "allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"},
                                "capabilities": capabilities},
            "livenessProbe": {**probe, "httpGet": dict(probe["httpGet"]), "failureThreshold": nd.to_int(
                s["probe_failure_threshold"], "dcgm_exporter_probe_failure_threshold")},
            "readinessProbe": probe,
            "resources": s["resources"],
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    # The DaemonSet around the pod (labels and selector, rolling updates, node affinity, tolerations, priority and
    # runtime class, pull secrets, RuntimeDefault seccomp, no service account token: the pod-to-GPU mapping comes from
    # the kubelet's pod-resources socket, not from the API server) is the node agents' (shared with device_plugin).
    # The pods roll when the counters change (the exporter reads its CSV once, at start).
    daemonset = nd.node_daemonset(
        pod, name, namespace, dict(labels), s["version"], s["node_affinity_label"], s["tolerations"],
        s["priority_class"], s["runtime_class"], s["image_pull_secrets"],
        {"k8sgpu.nvidia/counters-sha256": nd.sha256(csv_text)})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {**labels, **nd.MANAGED_BY}},
        "spec": {"type": "ClusterIP", "selector": dict(labels),
                 "ports": [{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}]},
    }
    return [config_map, daemonset, service]


def _service_monitor(s: dict) -> dict:
    """The ServiceMonitor of the Service's port metrics, the Node's name relabelled into node."""
    name, namespace, labels = s["name"], s["namespace"], s["labels"]
    service_monitor_labels = s["service_monitor_labels"] or {}
    if not isinstance(service_monitor_labels, dict):
        raise DcgmError(f"{OWNER}: service_monitor_labels must be a dict, got {service_monitor_labels!r}")
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {**labels, **service_monitor_labels, **nd.MANAGED_BY}},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "namespaceSelector": {"matchNames": [namespace]},
            # The exporter's own namespace/pod/container labels (the pod using the GPU) become exported_namespace,
            # exported_pod and exported_container; namespace/pod/container are the exporter pod's.
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": s["scrape_interval"],
                           "honorLabels": False,
                           "relabelings": [{"sourceLabels": [NODE_RELABEL["source"]],
                                            "targetLabel": NODE_RELABEL["target"], "action": "replace"}]}],
        },
    }


def _scrape_config(s: dict) -> str:
    """The same scrape as the ServiceMonitor's, for a Prometheus without the operator: every value as to_json writes
    it, so that no setting adds YAML structure."""
    name = s["name"]
    return _SCRAPE_CONFIG.format(
        managed=comment(str(s["managed"])), job=nd.to_json(name), interval=nd.to_json(s["scrape_interval"]),
        namespaces=nd.to_json([s["namespace"]]), regex=nd.to_json(f"{name};metrics"),
        node_source=nd.to_json([NODE_RELABEL["source"]]), node_target=nd.to_json(NODE_RELABEL["target"]))
