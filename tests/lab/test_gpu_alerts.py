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
from test_dcgm_exporter import (  # noqa: F401  (fixtures)
    NS,
    PROMTOOL,
    SHARED,
    changed,
    crds,
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


@pytest.fixture
def rules_file(no_crds, tmp_path):
    """The rules as the role renders them without the CRD (check mode writes nothing; a real run writes the file)."""
    path = tmp_path / "out" / "gpu-alerts.rules.yml"
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
