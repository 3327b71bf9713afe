# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the Prometheus alert rules of the gpu_alerts role (filter gpu_alert_rules), from the
role's settings, each checked and named in the error."""
from __future__ import annotations

import re


class AlertRulesError(ValueError):
    """A bad setting, with a message naming the role variable and the fix."""


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
        raise AlertRulesError("gpu_alert_rules expects a dict of settings")
    missing = sorted(set(_ALERT_SETTINGS) - set(settings))
    if missing:
        raise AlertRulesError(f"gpu_alert_rules: missing setting(s) {', '.join(missing)}")
    out = {}
    for key, kind in _ALERT_SETTINGS.items():
        value = settings[key]
        if kind in ("number", "count"):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise AlertRulesError(f"gpu_alerts_{key}: a number, got {value!r}") from None
            if value <= 0 or (kind == "count" and not value.is_integer()):
                raise AlertRulesError(f"gpu_alerts_{key}: a positive {'whole ' if kind == 'count' else ''}number, "
                                      f"got {settings[key]!r}")
            if value.is_integer():
                value = int(value)
        elif not isinstance(value, kind):
            raise AlertRulesError(f"gpu_alerts_{key}: expected {kind.__name__}, got {value!r}")
        if key.endswith("_for") and not (_DURATION.match(value) or value == "0s"):
            raise AlertRulesError(f"gpu_alerts_{key}: a Prometheus duration such as 5m or 1h30m, got {value!r}")
        out[key] = value
    if not 0 < out["framebuffer_percent"] <= 100:
        raise AlertRulesError(f"gpu_alerts_framebuffer_percent: between 0 and 100, got {out['framebuffer_percent']!r}")
    bad_xid = [x for x in out["xid_ignore"] if not str(x).isdigit()]
    if bad_xid:
        raise AlertRulesError(f"gpu_alerts_xid_ignore: XID codes are whole numbers, got {bad_xid!r}")
    if "\"" in out["job"] or "}" in out["selector"]:
        raise AlertRulesError("gpu_alerts_job must not contain quotes, and gpu_alerts_selector is label matchers "
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
