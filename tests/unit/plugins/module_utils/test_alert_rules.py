"""module_utils/_alert_rules.py: the gpu_alerts role's rules."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _alert_rules as m

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
    with pytest.raises(m.AlertRulesError) as err:
        m.gpu_alert_rules({**SETTINGS, **change})
    assert message in str(err.value)
