"""The filter dcgm_exporter_objects gives what the dcgm_exporter role's templates gave before it (issue 35 item 6):
tests/unit/fixtures/role_objects/before_issue_35.json holds, per case, the variables, the settings the role's vars
build from them, and what the removed templates configmap.yml.j2, daemonset.yml.j2, service.yml.j2 (the objects),
servicemonitor.yml.j2 and scrape-config.yml.j2 (the file's text) gave. Equal as data, the counters CSV and the scrape
configuration byte for byte."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._dcgm_exporter_objects import dcgm_exporter_objects

ROOT = Path(__file__).resolve().parents[4]
FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "role_objects" / "before_issue_35.json").read_text())


def test_the_frozen_cases_cover_the_settings():
    variables = {name for case in FROZEN["dcgm_exporter"] for name in case["variables"]}
    reaching = {"dcgm_exporter_" + key for key in (
        "version", "image_registry", "image_repository", "image_digest", "image_pull_policy", "image_pull_secrets",
        "namespace", "name", "port", "collect_interval_ms", "counters", "extra_counters", "profiling_metrics",
        "gpus_by_volume_mount", "kubelet_pod_resources_dir", "node_affinity_label", "tolerate_control_plane",
        "extra_tolerations", "priority_class", "runtime_class", "resources", "probe_initial_delay", "probe_period",
        "probe_timeout", "probe_failure_threshold", "service_monitor_labels", "scrape_interval")}
    assert reaching | {"ansible_managed"} <= variables


@pytest.mark.parametrize("case", FROZEN["dcgm_exporter"], ids=lambda case: case["case"])
def test_the_objects_are_the_templates(case):
    got = dcgm_exporter_objects(case["settings"])
    assert got["objects"] == case["objects"]
    assert [o["kind"] for o in got["objects"]] == ["ConfigMap", "DaemonSet", "Service"]  # the order applied
    assert got["objects"][0]["data"]["counters.csv"] == case["objects"][0]["data"]["counters.csv"]
    assert got["service_monitor"] == case["service_monitor"]
    assert got["scrape_config"] == case["scrape_config"]


@pytest.mark.parametrize("part", ["objects", "service_monitor", "scrape_config"])
def test_one_part(part):
    settings = FROZEN["dcgm_exporter"][0]["settings"]
    assert dcgm_exporter_objects(settings, part) == dcgm_exporter_objects(settings)[part]


@pytest.mark.parametrize("args, message", [
    (({},), "dcgm_exporter_objects: the settings lack 'name'"),
    (("name",), "expects the role's settings"),
    (({"x": 1}, "service"), "part must be one of objects, service_monitor, scrape_config"),
])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        dcgm_exporter_objects(*args)


def test_bad_counters_are_named():
    settings = {**FROZEN["dcgm_exporter"][0]["settings"], "counters_csv": ["DCGM_FI_DEV_GPU_TEMP"]}
    with pytest.raises(AnsibleFilterError, match="counters_csv must be the counters CSV text"):
        dcgm_exporter_objects(settings, "objects")


# --- the pod-resources hostPath (issue 46 item 2) --------------------------------------------------------------

@pytest.mark.parametrize("path", ["/var/lib/kubelet/pod-resources", "/var/lib/k0s/kubelet/pod-resources",
                                  "/var/snap/microk8s/common/var/lib/kubelet/pod-resources"])
def test_the_kubelets_pod_resources_directory_passes(path):
    settings = {**FROZEN["dcgm_exporter"][0]["settings"], "kubelet_pod_resources_dir": path}
    volumes = dcgm_exporter_objects(settings, "objects")[1]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "pod-gpu-resources", "hostPath": {"path": path}} in volumes


@pytest.mark.parametrize("path", ["/", "/etc", "/var/lib/kubelet", "/var/lib/kubelet/pods", "/root/pod-resources/..",
                                  "/var/lib/kubelet/./pod-resources", "pod-resources", "/pod-resources"])
def test_another_host_directory_is_refused_unless_allowed_and_then_warned(path, monkeypatch):
    settings = {**FROZEN["dcgm_exporter"][0]["settings"], "kubelet_pod_resources_dir": path}
    with pytest.raises(AnsibleFilterError) as err:
        dcgm_exporter_objects(settings, "objects")
    assert str(err.value).startswith(f"dcgm_exporter_kubelet_pod_resources_dir ({path!r}) is mounted as a hostPath")
    assert "dcgm_exporter_allow_unsafe_settings: true" in str(err.value)
    warned = []
    from ansible.utils.display import Display
    monkeypatch.setattr(Display, "warning", lambda self, msg, *a, **k: warned.append(msg))
    got = dcgm_exporter_objects(settings, "objects", True)
    assert {"name": "pod-gpu-resources", "hostPath": {"path": path}} in got[1]["spec"]["template"]["spec"]["volumes"]
    assert len(warned) == 1 and "Let through because dcgm_exporter_allow_unsafe_settings is true" in warned[0]
    # The other parts neither read nor warn about it.
    warned.clear()
    dcgm_exporter_objects(settings, "service_monitor", True)
    assert not warned
