"""gpu_alerts: the rendered rules pass `promtool check rules` and `promtool test rules` (each alert fires on a series
that should fire it and stays silent on one that should not); the PrometheusRule is validated and stored by the lab's
API server when the CRD exists, a rules file is written when it does not; check mode and a second run change nothing.
gpu_dashboard: the dashboard ConfigMaps (ours and a user-supplied one) in the lab's API server."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from kubernetes import client

from conftest import ROOT
# Fixtures (crds, ext, namespace, no_crds) are imported for pytest, which finds them by name.
from test_dcgm_exporter import (  # noqa: F401  # pylint: disable=unused-import
    NS,
    PROMTOOL,
    SHARED,
    changed,
    crds,
    delete_monitoring_crds,
    ext,
    flat,
    namespace,
    no_crds,
    role,
)

# The exporter's labels as Prometheus stores them (honorLabels false, node relabelled from the pod's Node).
GPU0 = {"job": "dcgm-exporter", "instance": "10.0.0.4:9400", "node": "gpu-1", "Hostname": "gpu-1", "gpu": "0",
        "UUID": "GPU-aaa"}
GPU1 = {**GPU0, "gpu": "1", "UUID": "GPU-bbb"}
GPU2 = {**GPU0, "gpu": "2", "UUID": "GPU-ccc"}
# The role's thresholds in these tests (defaults, except the XID codes to ignore).
ALERT_VARS = {"gpu_alerts_xid_ignore": [43]}


def series(name: str, labels: dict, values: str) -> dict:
    body = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def gpu_text(labels: dict) -> str:
    return f"GPU {labels['gpu']} ({labels['UUID']}) on node {labels['node']}"


def case(alert: str, inputs: list[dict], fired: list[tuple[dict, str, str]]) -> dict:
    """One promtool test: the inputs, evaluated at 20m, fire `alert` exactly for `fired` (labels, summary, description)."""
    return {"interval": "1m", "input_series": inputs, "alert_rule_test": [{
        "eval_time": "20m", "alertname": alert,
        "exp_alerts": [{"exp_labels": labels, "exp_annotations": {"summary": summary, "description": text}}
                       for labels, summary, text in fired]}]}


CRIT, WARN = {"severity": "critical"}, {"severity": "warning"}
TESTS = [
    case("DCGMExporterTargetDown",
         [series("up", {**GPU0, "instance": "a"}, "0x30"),
          series("up", {**GPU0, "instance": "b", "node": "gpu-2"}, "1x30"),
          series("up", {"job": "node-exporter", "instance": "c"}, "0x30")],  # another job: silent
         [({"job": "dcgm-exporter", "instance": "a", "node": "gpu-1", "Hostname": "gpu-1", "gpu": "0", "UUID": "GPU-aaa",
            **WARN}, "DCGM exporter target down",
           "Prometheus cannot scrape the DCGM exporter at a (node gpu-1): no GPU metrics from that node.")]),
    case("GPUXidError",
         [series("DCGM_FI_DEV_XID_ERRORS", GPU0, "0 0 79x28"),
          series("DCGM_FI_DEV_XID_ERRORS", GPU1, "43x30"),  # ignored code
          series("DCGM_FI_DEV_XID_ERRORS", GPU2, "0x30")],
         [({**GPU0, **CRIT}, "GPU reported an XID error",
           f"{gpu_text(GPU0)} reported XID 79: see NVIDIA's XID catalogue for the action.")]),
    case("GPUTemperatureHigh",
         [series("DCGM_FI_DEV_GPU_TEMP", GPU0, "90x30"),
          series("DCGM_FI_DEV_GPU_TEMP", GPU1, "80x30"),
          series("DCGM_FI_DEV_GPU_TEMP", GPU2, "70x17 90x12")],  # hot for 2 minutes only: pending, not firing
         [({**GPU0, **WARN}, "GPU temperature high", f"{gpu_text(GPU0)} is at 90 C (threshold 85 C).")]),
    case("GPUMemoryTemperatureHigh",
         [series("DCGM_FI_DEV_MEMORY_TEMP", GPU0, "100x30"), series("DCGM_FI_DEV_MEMORY_TEMP", GPU1, "90x30")],
         [({**GPU0, **WARN}, "GPU memory temperature high",
           f"{gpu_text(GPU0)} memory is at 100 C (threshold 95 C).")]),
    case("GPUEccDoubleBitErrors",
         [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU0, "0 0 2x28"), series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU1, "0x30")],
         [({**GPU0, **CRIT}, "GPU double-bit ECC errors",
           f"{gpu_text(GPU0)} has 2 uncorrectable (double-bit) ECC errors since the driver loaded: drain the node and "
           "reset the GPU.")]),
    case("GPURowRemapFailure",
         [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU0, "1x30"), series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU1, "0x30")],
         [({**GPU0, **CRIT}, "GPU row remapping failed", f"{gpu_text(GPU0)} could not remap a memory row: the GPU needs "
           "service.")]),
    case("GPUFramebufferNearlyFull",
         [series("DCGM_FI_DEV_FB_USED", GPU0, "79000x30"), series("DCGM_FI_DEV_FB_FREE", GPU0, "1000x30"),
          series("DCGM_FI_DEV_FB_USED", GPU1, "40000x30"), series("DCGM_FI_DEV_FB_FREE", GPU1, "40000x30")],
         [({**GPU0, **WARN}, "GPU framebuffer nearly full",
           f"{gpu_text(GPU0)} framebuffer is 98.75% used (threshold 95%).")]),
    case("GPUNodeGPUsNotReported",
         [series("kube_node_status_allocatable", {"job": "kube-state-metrics", "node": n, "resource": "nvidia_com_gpu",
                                                  "unit": "integer"}, f"{gpus}x30")
          for n, gpus in (("gpu-1", 8), ("gpu-2", 2), ("gpu-3", 4), ("cpu-1", 0))]
         + [series("DCGM_FI_DEV_GPU_TEMP", g, "40x30") for g in (GPU0, GPU1, GPU2)]  # gpu-1: 3 of 8 reported
         + [series("DCGM_FI_DEV_GPU_TEMP", {**GPU0, "node": "gpu-2", "gpu": str(i), "UUID": f"GPU-x{i}"}, "40x30")
            for i in range(2)],  # gpu-2: 2 of 2; gpu-3: none of 4
         [({"node": "gpu-1", **WARN}, "Node advertises more GPUs than the exporter reports",
           "Node gpu-1 advertises 5 more GPU(s) than the DCGM exporter reports (kube-state-metrics' allocatable "
           "nvidia.com/gpu minus the GPUs with metrics): the exporter is missing there or cannot see every GPU."),
          ({"node": "gpu-3", **WARN}, "Node advertises more GPUs than the exporter reports",
           "Node gpu-3 advertises 4 more GPU(s) than the DCGM exporter reports (kube-state-metrics' allocatable "
           "nvidia.com/gpu minus the GPUs with metrics): the exporter is missing there or cannot see every GPU.")]),
]


def promtool(*args: str) -> subprocess.CompletedProcess:
    if not PROMTOOL.exists():
        pytest.fail(f"{PROMTOOL} not found: the lab builds it (make lab)")
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def rules_file(ext, tmp_path_factory):
    """The rules as the role renders them without the CRD (check mode writes nothing; a real run writes the file).
    Made once per file (three role runs, ~14 s): the tests that use it only read it."""
    delete_monitoring_crds(ext)
    path = tmp_path_factory.mktemp("gpu-alerts") / "out" / "gpu-alerts.rules.yml"
    extra = {**ALERT_VARS, "gpu_alerts_rules_file_path": str(path)}
    check = role("gpu_alerts", extra, "--check", "--diff")
    assert check.returncode == 0 and changed(check) > 0, check.stdout[-3000:]
    assert not path.exists()
    res = role("gpu_alerts", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "No PrometheusRule CRD" in res.stdout and str(path) in flat(res.stdout)
    again = role("gpu_alerts", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
    return path


def test_rendered_rules_pass_promtool_check_and_every_alert_fires_only_where_it_should(rules_file, tmp_path):
    checked = promtool("check", "rules", str(rules_file))
    assert checked.returncode == 0 and "SUCCESS: 8 rules found" in checked.stdout, checked.stdout + checked.stderr

    names = [r["alert"] for r in yaml.safe_load(rules_file.read_text())["groups"][0]["rules"]]
    assert sorted(names) == sorted(t["alert_rule_test"][0]["alertname"] for t in TESTS)  # every alert is tested
    tests = tmp_path / "gpu-alerts.test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": TESTS},
                                    sort_keys=False))
    res = promtool("test", "rules", str(tests))
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_test_fails_when_an_alert_is_expected_on_a_silent_series(rules_file, tmp_path):
    # The same kind of test the previous one passes, expecting the cool GPU to fire: promtool must say it did not.
    wrong = case("GPUTemperatureHigh", [series("DCGM_FI_DEV_GPU_TEMP", GPU1, "80x30")],
                 [({**GPU1, **WARN}, "GPU temperature high", f"{gpu_text(GPU1)} is at 80 C (threshold 85 C).")])
    tests = tmp_path / "wrong.test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": [wrong]}))
    res = promtool("test", "rules", str(tests))
    assert res.returncode != 0 and "GPUTemperatureHigh" in res.stdout + res.stderr


def test_prometheus_rule_stored_when_the_crd_exists(core, namespace, crds, tmp_path):
    custom = client.CustomObjectsApi(core.api_client)
    path = tmp_path / "rules.yml"
    extra = {**ALERT_VARS, "gpu_alerts_namespace": NS, "gpu_alerts_rules_file_path": str(path),
             "gpu_alerts_prometheus_rule": "always", "gpu_alerts_rule_labels": {"release": "kube-prometheus-stack"}}
    check = role("gpu_alerts", extra, "--check")
    assert check.returncode == 0 and changed(check) > 0, check.stdout[-3000:]
    res = role("gpu_alerts", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert not path.exists()
    rule = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheusrules", "gpu-alerts")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert len(alerts) == 8 and alerts["GPUXidError"]["expr"] == 'DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter"} > 0 != 43'
    assert alerts["GPUTemperatureHigh"]["for"] == "5m"
    again = role("gpu_alerts", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
    recheck = role("gpu_alerts", extra, "--check")
    assert recheck.returncode == 0 and changed(recheck) == 0, recheck.stdout[-3000:]


@pytest.mark.parametrize("extra, message", [
    ({"gpu_alerts_gpu_temp_for": "5 minutes"}, "gpu_alerts_gpu_temp_for: a Prometheus duration such as 5m or 1h30m, "
                                               "got '5 minutes'"),
    ({"gpu_alerts_framebuffer_percent": 150}, "gpu_alerts_framebuffer_percent: between 0 and 100, got 150"),
    ({"gpu_alerts_xid_ignore": ["x13"]}, "Elements value for option 'gpu_alerts_xid_ignore' is of type str and we "
                                         "were unable to convert to int"),
], ids=["duration", "percent", "xid"])
def test_bad_alert_settings_are_named(extra, message):
    res = role("gpu_alerts", {"gpu_alerts_prometheus_rule": "never", **extra}, "--check")
    assert res.returncode != 0
    assert message in flat(res.stdout), flat(res.stdout)[-2000:]


# --- gpu_dashboard ------------------------------------------------------------------------------------------------

DASHBOARD = ROOT / "roles/gpu_dashboard/files/k8sgpu-gpu-dashboard.json"
DASHBOARD_12239 = SHARED / "dcgm-exporter" / "grafana-dashboard-12239.json"
# What Prometheus stores from the exporter with the dcgm_exporter role's scraping (honorLabels false).
EXPORTER_LABELS = {"node", "gpu", "UUID", "Hostname", "exported_namespace", "exported_pod", "exported_container"}


def _queries(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_parse_and_use_the_exporter_metrics_and_labels():
    import re

    dashboard = json.loads(DASHBOARD.read_text())
    counters = {c["field"] for c in yaml.safe_load((ROOT / "roles/dcgm_exporter/vars/main.yml").read_text())
                ["_dcgm_exporter_default_counters"]}
    queries = _queries(dashboard)
    metrics = {m for q in queries for m in re.findall(r"\b(DCGM_\w+)", q)}
    assert metrics <= counters, metrics - counters  # only what the exporter serves with the role's counters
    for needed in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                   "DCGM_FI_DEV_XID_ERRORS"):
        assert needed in metrics
    labels = {m for q in queries for m in re.findall(r"(\w+)\s*(?:=~|!=|=)\s*\"", q)}
    labels |= {m.strip() for q in queries for by in re.findall(r"by \(([^)]*)\)", q) for m in by.split(",")}
    assert labels <= EXPORTER_LABELS, labels - EXPORTER_LABELS
    # Per node, per GPU and per pod: the grouping each panel's query uses.
    assert any("by (node)" in q for q in queries) and any("by (exported_namespace, exported_pod)" in q for q in queries)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "node", "gpu", "namespace"}
    for query in queries:  # every query parses with the variables set to "All"
        text = query.replace("$node", ".*").replace("$gpu", ".*").replace("$namespace", ".*")
        res = promtool("promql", "format", "--experimental", text)
        assert res.returncode == 0, f"{text}: {res.stderr}"


def test_dashboards_shipped_in_labelled_configmaps(core, namespace, tmp_path):
    extra_files = []
    if DASHBOARD_12239.exists():
        extra_files.append({"name": "dcgm-exporter-12239", "path": str(DASHBOARD_12239)})
    extra = {"gpu_dashboard_namespace": NS, "gpu_dashboard_extra": extra_files,
             "gpu_dashboard_annotations": {"grafana_folder": "GPUs"}}
    check = role("gpu_dashboard", extra, "--check")
    assert check.returncode == 0 and changed(check) > 0, check.stdout[-3000:]
    with pytest.raises(client.ApiException):
        core.read_namespaced_config_map("k8sgpu-gpu-dashboard", NS)
    res = role("gpu_dashboard", extra)
    assert res.returncode == 0, res.stdout[-3000:]

    shipped = {"k8sgpu-gpu-dashboard": DASHBOARD, **{e["name"]: DASHBOARD_12239 for e in extra_files}}
    for name, source in shipped.items():
        cm = core.read_namespaced_config_map(name, NS)
        assert cm.metadata.labels["grafana_dashboard"] == "1" and cm.metadata.annotations["grafana_folder"] == "GPUs"
        assert list(cm.data) == [source.name]
        assert json.loads(cm.data[source.name]) == json.loads(source.read_text())
    again = role("gpu_dashboard", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
    if not extra_files:
        pytest.skip(f"{DASHBOARD_12239} is absent: only our own dashboard was shipped")


def test_a_dashboard_file_that_is_not_json_is_named(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"title": "x", "panels": [')
    res = role("gpu_dashboard", {"gpu_dashboard_namespace": NS, "gpu_dashboard_ship_ours": False,
                                 "gpu_dashboard_extra": [{"name": "broken", "path": str(bad)}]}, "--check")
    assert res.returncode != 0
    assert f"{bad} is not valid JSON: Expecting value: line 1 column 27" in flat(res.stdout), flat(res.stdout)[-2000:]
