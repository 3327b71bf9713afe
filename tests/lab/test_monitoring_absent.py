"""k8sgpu.nvidia.monitoring with k8sgpu_monitoring_state: absent, against the lab's real API server: the playbook
installs the whole chain (DCGM exporter, alert rules, dashboard, prometheus-adapter's rules, the GPU HPA over a
Deployment of the test's), then the same playbook with absent removes it, last part first (each role's own
state: absent), leaving the workload the HPA scaled and nothing else of the chain: the namespaces the roles created,
the HPA, the controller-side files. kube-prometheus-stack (prometheus_stack_install)
is test_prometheus_stack.py's: this test leaves it off and checks its settings are refused as for any run."""
from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import run

RUN = uuid.uuid4().hex[:5]
EXPORTER_NS, ALERTS_NS, DASHBOARD_NS, WORK_NS = (f"k8sgpu-monabs-{p}-{RUN}" for p in ("dcgm", "alerts", "dash", "work"))
WORKLOAD = "gpu-work"
# The removal's tasks, in the order the chain is removed.
REMOVAL = ["Remove the GPU-driven HorizontalPodAutoscaler", "Remove the GPU metrics adapter", "Remove the GPU dashboard",
           "Remove the GPU alert rules", "Remove the DCGM exporter"]


def monitoring(tmp_path, **extra):
    settings = {
        "k8sgpu_controller_dir": str(tmp_path),
        "dcgm_exporter_namespace": EXPORTER_NS, "dcgm_exporter_wait": False,
        "dcgm_exporter_scrape_config_path": str(tmp_path / "dcgm-exporter-scrape-config.yml"),
        "gpu_alerts_namespace": ALERTS_NS, "gpu_alerts_rules_file_path": str(tmp_path / "gpu-alerts.rules.yml"),
        "gpu_dashboard_namespace": DASHBOARD_NS,
        # the adapter's configuration and Helm values only: nothing serves custom metrics here
        "gpu_metrics_adapter_mode": "rules_only", "gpu_metrics_adapter_prometheus_check": "none",
        "gpu_metrics_adapter_output_dir": str(tmp_path / "adapter"),
        "gpu_autoscaling_target_name": WORKLOAD, "gpu_autoscaling_namespace": WORK_NS,
        "gpu_autoscaling_check_metrics_api": False,
        **extra}
    return run(["ansible-playbook", "-i", "inventories/lab", "--limit", "localhost", "playbooks/monitoring.yml",
                "-e", json.dumps(settings)])


def out(res) -> str:
    return (res.stdout + res.stderr)[-6000:]


def changed(res) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def namespaces(core) -> set[str]:
    return {n.metadata.name for n in core.list_namespace().items if not n.metadata.deletion_timestamp}


@pytest.fixture
def workload(core):
    """The site's GPU workload the HPA scales: the test's, in a namespace of its own that the chain must leave."""
    apps = client.AppsV1Api(core.api_client)
    core.create_namespace({"metadata": {"name": WORK_NS}})
    labels = {"app": WORKLOAD}
    apps.create_namespaced_deployment(WORK_NS, {
        "metadata": {"name": WORKLOAD}, "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{"name": "w", "image": "registry.local/w:1"}]}}}})
    yield apps
    for ns in (WORK_NS, EXPORTER_NS, ALERTS_NS, DASHBOARD_NS):
        try:
            core.delete_namespace(ns)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def test_absent_removes_the_whole_chain_last_part_first(core, workload, tmp_path):
    t0 = time.monotonic()
    res = monitoring(tmp_path)
    assert res.returncode == 0, out(res)
    installed = time.monotonic() - t0
    apps, autoscaling = workload, client.AutoscalingV2Api(core.api_client)
    assert {EXPORTER_NS, DASHBOARD_NS} <= namespaces(core)
    assert apps.read_namespaced_daemon_set("dcgm-exporter", EXPORTER_NS).metadata.name == "dcgm-exporter"
    hpas = [h.metadata.name for h in autoscaling.list_namespaced_horizontal_pod_autoscaler(WORK_NS).items]
    assert len(hpas) == 1, hpas
    assert core.list_namespaced_config_map(DASHBOARD_NS, label_selector="app.kubernetes.io/managed-by=k8sgpu.nvidia").items
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert "adapter/prometheus-adapter-values.yaml" in files, files
    # The rules and the scrape configuration: custom resources where the lab serves prometheus-operator's CRDs (other
    # tests apply them), else files on the controller.
    assert ALERTS_NS in namespaces(core) or "gpu-alerts.rules.yml" in files, files
    assert "dcgm-exporter-scrape-config.yml" in files or core.api_client.call_api(
        f"/apis/monitoring.coreos.com/v1/namespaces/{EXPORTER_NS}/servicemonitors/dcgm-exporter", "GET",
        auth_settings=["BearerToken"], _preload_content=False)[1] == 200, files

    res = monitoring(tmp_path, k8sgpu_monitoring_state="absent")
    assert res.returncode == 0 and changed(res) > 0, out(res)
    order = [res.stdout.find(f"TASK [{name}]") for name in REMOVAL]
    assert -1 not in order and order == sorted(order), list(zip(REMOVAL, order))
    for name in ("Deploy the DCGM exporter", "Scale the GPU workload on GPU utilisation", "Install kube-prometheus-stack first"):
        assert re.search(rf"TASK \[{name}\] \*+\nskipping: \[localhost\]", res.stdout), name
    # Gone: every namespace the roles created (with what was in them), the HPA, the controller-side files the roles
    # wrote. Left: the workload and its namespace, which are the site's.
    for _attempt in range(150):
        left = {EXPORTER_NS, ALERTS_NS, DASHBOARD_NS} & namespaces(core)
        if not left:
            break
        time.sleep(0.2)
    assert not left, left
    assert autoscaling.list_namespaced_horizontal_pod_autoscaler(WORK_NS).items == []
    assert apps.read_namespaced_deployment(WORKLOAD, WORK_NS).spec.replicas == 1
    left_files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert not [f for f in left_files if f in files], left_files
    # A second removal changing nothing is each role's (tests/lab/test_role_absent.py): left out here for CI's time.
    print(f"monitoring.yml: install {installed:.1f} s, removal {time.monotonic() - t0 - installed:.1f} s")


def test_an_unknown_state_is_refused_before_anything(tmp_path):
    res = monitoring(tmp_path, k8sgpu_monitoring_state="removed")
    assert res.returncode != 0
    assert re.search(r"k8sgpu_monitoring_state is \\?\"removed\\?\"; set present", res.stdout), out(res)
    assert "TASK [Remove the" not in res.stdout and "TASK [Deploy the DCGM exporter]" not in res.stdout
