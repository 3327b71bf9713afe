from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring as m

LABEL = "nvidia.com/gpu.present"
DS = {"metadata": {"generation": 2}, "spec": {"template": {"spec": {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["true"]}]}]}}},
}}}}
COUNTERS = [
    {"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "GPU temperature (C)"},
    {"field": "DCGM_FI_DRIVER_VERSION", "type": "label", "help": "Driver version"},
    {"field": "DCGM_FI_PROF_DRAM_ACTIVE", "type": "gauge", "help": "DRAM active"},
]


def node(name, labels=None, gpus=None, ready="True", taints=None):
    status = {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown"}]}
    if gpus is not None:
        status["capacity"] = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": {LABEL: "true"} if labels is None else labels},
            "spec": {"taints": taints or []}, "status": status}


def pod(name, node_name, ready=True, waiting=None):
    cs = {"name": "exporter", "state": {"waiting": waiting} if waiting else {"running": {}}}
    return {"metadata": {"name": name}, "spec": {"nodeName": node_name},
            "status": {"phase": "Running", "containerStatuses": [cs],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


# --- counters -----------------------------------------------------------------------------------------------------

def test_counters_csv_lines_in_order_and_profiling_switch():
    text = m.counters_csv(COUNTERS)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (C)", "DCGM_FI_DRIVER_VERSION, label, Driver version",
                     "DCGM_FI_PROF_DRAM_ACTIVE, gauge, DRAM active"]
    assert m.profiling_fields(text) == ["DCGM_FI_PROF_DRAM_ACTIVE"]
    without = m.counters_csv(COUNTERS, profiling=False)
    assert "DCGM_FI_PROF_" not in without and m.profiling_fields(without) == []
    extra = [{"field": "DCGM_EXP_XID_ERRORS_COUNT", "type": "counter", "help": "XIDs in the window"}]
    assert m.counters_csv(COUNTERS, extra=extra).splitlines()[-1] == "DCGM_EXP_XID_ERRORS_COUNT, counter, XIDs in the window"


@pytest.mark.parametrize("entry, message", [
    ({"field": "DCGM_FI_DEV_FAN", "type": "gauges", "help": "x"},
     "dcgm_exporter_counters[0] (DCGM_FI_DEV_FAN): unknown type 'gauges'; the exporter accepts gauge, counter, "
     "histogram, summary, label"),
    ({"field": "gpu_temp", "type": "gauge", "help": "x"}, "field must be a DCGM field name"),
    ({"field": "DCGM_FI_DEV_FAN", "type": "gauge", "help": "fan, in %"}, "help must be one line of text without commas"),
    ({"field": "DCGM_FI_DEV_FAN", "type": "gauge", "help": "x", "unit": "%"}, "unknown key(s) unit"),
    ("DCGM_FI_DEV_FAN", "must be a dict with keys field, type and help"),
])
def test_bad_counter_entries_are_named(entry, message):
    with pytest.raises(m.MonitoringError, match=None) as err:
        m.check_counters([entry])
    assert message in str(err.value)


def test_a_field_twice_is_an_error_naming_both_entries():
    with pytest.raises(m.MonitoringError) as err:
        m.counters_csv(COUNTERS, extra=[dict(COUNTERS[0])])
    assert "DCGM_FI_DEV_GPU_TEMP is listed twice (entries 0 and 3)" in str(err.value)


# --- rollout and diagnosis -----------------------------------------------------------------------------------------

def test_rolled_out_needs_the_latest_generation_and_every_pod_available():
    status = {"observedGeneration": 2, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2}
    assert m.daemonset_rolled_out({**DS, "status": status})
    assert not m.daemonset_rolled_out({**DS, "status": {**status, "observedGeneration": 1}})
    assert not m.daemonset_rolled_out({**DS, "status": {**status, "numberAvailable": 1}})
    assert not m.daemonset_rolled_out(None)


def test_problems_name_each_gpu_node_and_why():
    nodes = [
        node("ok"),
        node("tainted", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        node("down", ready="Unknown"),
        node("crashing"),
        node("cpu", labels={}),
        node("gpu-unlabelled", labels={}, gpus=8),
        node("in-group-unlabelled", labels={}),
    ]
    crash = {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}
    pods = [pod("e-ok", "ok"), pod("e-crash", "crashing", ready=False, waiting=crash)]
    problems = m.daemonset_node_problems(nodes, DS, pods, ["in-group-unlabelled", "ghost"], "dcgm-exporter pod")
    assert problems == {
        "tainted": "no dcgm-exporter pod on this node: untolerated taint(s) dedicated=infra:NoSchedule",
        "down": "Node is not Ready (NodeStatusUnknown)",
        "crashing": "dcgm-exporter pod e-crash is waiting: CrashLoopBackOff: back-off 5m0s",
        "in-group-unlabelled": "no dcgm-exporter pod on this node: the node does not match nvidia.com/gpu.present In "
                               "true (DaemonSet node affinity)",
        "ghost": "no Node named ghost",
    }
    # A Node with GPUs that is neither labelled nor in the group is not a failure, but is named apart.
    assert m.gpu_nodes_outside(nodes, DS, ["in-group-unlabelled"]) == ["gpu-unlabelled"]


def test_terminating_pods_do_not_count():
    gone = pod("e-old", "ok")
    gone["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    assert m.daemonset_node_problems([node("ok")], DS, [gone], what="x pod") == {"ok": "no x pod on this node yet"}


# --- alert rules ------------------------------------------------------------------------------------------------

SETTINGS = {
    "job": "dcgm-exporter", "selector": "", "severity_critical": "critical", "severity_warning": "warning",
    "target_down_for": "5m", "xid_for": "0s", "xid_ignore": [13, 43], "gpu_temp_celsius": 85, "gpu_temp_for": "5m",
    "memory_temp_celsius": 95, "memory_temp_for": "5m", "ecc_dbe_for": "0s", "row_remap_for": "0s",
    "framebuffer_percent": 95, "framebuffer_for": "15m", "gpu_count_for": "10m", "gpu_count_metric": "DCGM_FI_DEV_GPU_TEMP",
    "gpu_replicas": 1, "group_name": "gpu.rules", "extra_labels": {"team": "ml"}, "runbook_url": "",
}


def test_alert_rules_every_alert_with_thresholds_and_for():
    groups = m.gpu_alert_rules(SETTINGS)
    rules = {r["alert"]: r for r in groups[0]["rules"]}
    assert tuple(rules) == m.ALERT_NAMES
    assert rules["GPUXidError"]["expr"] == 'DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter"} > 0 != 13 != 43'
    assert "for" not in rules["GPUXidError"]
    assert rules["GPUTemperatureHigh"]["expr"].endswith("> 85") and rules["GPUTemperatureHigh"]["for"] == "5m"
    assert rules["GPUEccDoubleBitErrors"]["labels"] == {"severity": "critical", "team": "ml"}
    assert 'kube_node_status_allocatable{resource="nvidia_com_gpu"}' in rules["GPUNodeGPUsNotReported"]["expr"]
    scoped = m.gpu_alert_rules({**SETTINGS, "selector": 'cluster="a"', "gpu_replicas": 4, "runbook_url": "https://rb/"})
    rules = {r["alert"]: r for r in scoped[0]["rules"]}
    assert rules["DCGMExporterTargetDown"]["expr"] == 'up{job="dcgm-exporter", cluster="a"} == 0'
    assert ") / 4)" in rules["GPUNodeGPUsNotReported"]["expr"]
    assert rules["GPURowRemapFailure"]["annotations"]["runbook_url"] == "https://rb/gpurowremapfailure"


@pytest.mark.parametrize("change, message", [
    ({"gpu_temp_for": "5 minutes"}, "gpu_alerts_gpu_temp_for: a Prometheus duration"),
    ({"gpu_temp_celsius": "hot"}, "gpu_alerts_gpu_temp_celsius: a number"),
    ({"framebuffer_percent": 120}, "gpu_alerts_framebuffer_percent: between 0 and 100"),
    ({"xid_ignore": ["13a"]}, "gpu_alerts_xid_ignore: XID codes are whole numbers"),
    ({"gpu_replicas": 1.5}, "gpu_alerts_gpu_replicas: a positive whole number"),
    ({"selector": "{cluster=\"a\"}"}, "gpu_alerts_selector is label matchers without braces"),
])
def test_bad_alert_settings_are_named(change, message):
    with pytest.raises(m.MonitoringError) as err:
        m.gpu_alert_rules({**SETTINGS, **change})
    assert message in str(err.value)


# --- dashboards ---------------------------------------------------------------------------------------------------

def test_grafana_dashboard_checks_json_shape_and_size():
    good = '{"title": "GPUs", "panels": []}'
    assert m.grafana_dashboard(good, "a.json") == good
    with pytest.raises(m.MonitoringError, match=r"b.json is not valid JSON: Expecting value: line 1 column 11"):
        m.grafana_dashboard('{"title": ', "b.json")
    with pytest.raises(m.MonitoringError, match="c.json is not a Grafana dashboard"):
        m.grafana_dashboard('{"panels": []}', "c.json")
    with pytest.raises(m.MonitoringError, match="d.json is .* bytes; a ConfigMap holds at most"):
        m.grafana_dashboard('{"title": "x", "panels": [], "pad": "' + "x" * m.CONFIGMAP_MAX_BYTES + '"}', "d.json")


def test_a_node_an_autoscaler_is_removing_is_no_rollout_problem():
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils._monitoring import node_going_away
    assert node_going_away({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}})
    assert node_going_away({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}})
    assert node_going_away({"metadata": {"deletionTimestamp": "2026-11-25T00:00:00Z"}})
    assert not node_going_away({"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})
    assert not node_going_away({"spec": {"unschedulable": True}})
