"""dcgm_exporter against the lab's real API server: DaemonSet on the GPU nodes only, check mode, idempotence, the
ServiceMonitor (CRD applied) or the scrape configuration file (no CRD), the per-node diagnosis, bad input."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, KUBECTL, ROOT, run
from k8sgpu_testlib.k8s_api import ignore_404

NS = "k8sgpu-mon-a"
NAME = "dcgm-exporter"
GPU_LABEL = "nvidia.com/gpu.present"
SHARED = ROOT.parent / "shared"
CRD_DIR = SHARED / "crds" / "monitoring.coreos.com"
DEFAULT_COUNTERS = SHARED / "dcgm-exporter" / "default-counters.csv"
CACHE = Path(os.environ.get("K8SGPU_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "k8sgpu-lab"))
PROMTOOL = CACHE / "bin" / f"prometheus-{os.environ.get('PROMETHEUS_VERSION', 'v0.316.0')}" / "promtool"
MONITORING_CRDS = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com",
                   "podmonitors.monitoring.coreos.com")


def role(name: str, extra: dict, *args: str):
    return run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "-e", f"role={name}",
                "-e", json.dumps(extra), *args])


def changed(res) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- fixtures (shared with test_gpu_alerts.py) -----------------------------------------------------------------

def delete_monitoring_crds(ext: client.ApiextensionsV1Api) -> None:
    for crd in MONITORING_CRDS:
        ignore_404(ext.delete_custom_resource_definition, crd)
    for _attempt in range(150):
        names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        if not names & set(MONITORING_CRDS):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRDs {MONITORING_CRDS} still present after 30 s")


def apply_monitoring_crds(ext: client.ApiextensionsV1Api) -> None:
    if not CRD_DIR.is_dir():
        pytest.skip(f"{CRD_DIR} is absent: the monitoring.coreos.com CRDs come from ../shared (not in the repo)")
    res = subprocess.run([*KUBECTL, "apply", "--server-side", "-f", str(CRD_DIR)], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    for _attempt in range(150):
        crds = [c for c in ext.list_custom_resource_definition().items if c.metadata.name in MONITORING_CRDS]
        if len(crds) == len(MONITORING_CRDS) and all(
                any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []) for crd in crds):
            return
        time.sleep(0.2)
    raise AssertionError("monitoring.coreos.com CRDs not Established after 30 s")


@pytest.fixture(scope="module")
def ext(core) -> client.ApiextensionsV1Api:
    return client.ApiextensionsV1Api(core.api_client)


@pytest.fixture(scope="module")
def namespace(core):
    """The test namespace, absent before the module's tests and deleted after them."""
    def delete():
        ignore_404(core.delete_namespace, NS)
        for _attempt in range(300):
            try:
                core.read_namespace(NS)
            except client.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.2)
        raise AssertionError(f"namespace {NS} not deleted after 60 s")
    delete()
    yield NS
    delete()


@pytest.fixture(scope="module")
def gpu_labelled(core):
    """The lab's GPU nodes carry nvidia.com/gpu.present=true (node_labels' label); restored afterwards."""
    added = [n for n in GPU_NODES if (core.read_node(n).metadata.labels or {}).get(GPU_LABEL) != "true"]
    for n in added:
        core.patch_node(n, {"metadata": {"labels": {GPU_LABEL: "true"}}})
    yield
    for n in added:
        core.patch_node(n, {"metadata": {"labels": {GPU_LABEL: None}}})


@pytest.fixture
def no_crds(ext):
    delete_monitoring_crds(ext)


@pytest.fixture
def crds(ext):
    apply_monitoring_crds(ext)
    yield
    delete_monitoring_crds(ext)


@pytest.fixture
def temp_gpu_node(core):
    """kwok Nodes of this test (prefix k8sgpu-mon-a-), deleted after it."""
    made = []

    def make(taints: list[dict]) -> str:
        name = f"k8sgpu-mon-a-{uuid.uuid4().hex[:6]}"
        cap = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"}
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                       "labels": {"type": "kwok", "kubernetes.io/hostname": name, GPU_LABEL: "true"}},
                          "spec": {"taints": taints}, "status": {"capacity": cap, "allocatable": cap}})
        made.append(name)
        return name

    yield make
    for name in made:
        ignore_404(core.delete_node, name)


# --- the counters -------------------------------------------------------------------------------------------------

def _role_counters() -> list[dict]:
    return yaml.safe_load((ROOT / "roles/dcgm_exporter/vars/main.yml").read_text())["_dcgm_exporter_default_counters"]


def test_counters_hold_every_exporter_default_and_what_the_alerts_need():
    if not DEFAULT_COUNTERS.exists():
        pytest.skip(f"{DEFAULT_COUNTERS} is absent (../shared holds NVIDIA's default-counters.csv)")
    rows = csv.reader(line for line in DEFAULT_COUNTERS.read_text().splitlines()
                      if line.strip() and not line.lstrip().startswith("#"))
    theirs = {r[0].strip(): r[1].strip() for r in rows}
    ours = {c["field"]: c["type"] for c in _role_counters()}
    assert len(theirs) > 20
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"exporter default counters missing from dcgm_exporter_counters: {missing}"
    assert {f: ours[f] for f in theirs} == theirs  # same Prometheus types
    # What gpu_alerts reads: XID, double-bit ECC, row remapping, GPU and memory temperature, framebuffer.
    for field in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                  "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
        assert field in ours, field


# --- deploy, check mode, idempotence, fallback ------------------------------------------------------------------

def _pods(core) -> dict[str, client.V1Pod]:
    pods = core.list_namespaced_pod(NS, label_selector=f"app.kubernetes.io/name={NAME}").items
    return {p.spec.node_name: p for p in pods if not p.metadata.deletion_timestamp}


def test_exporter_on_gpu_nodes_only_check_mode_idempotent_scrape_file(core, namespace, gpu_labelled, no_crds,
                                                                      tmp_path):
    apps = client.AppsV1Api(core.api_client)
    scrape = tmp_path / "out" / "dcgm-scrape.yml"
    extra = {"dcgm_exporter_namespace": NS, "dcgm_exporter_scrape_config_path": str(scrape),
             "dcgm_exporter_wait_timeout": 120}

    check = role("dcgm_exporter", extra, "--check", "--diff")
    assert check.returncode == 0, check.stdout[-3000:]
    assert changed(check) > 0
    with pytest.raises(client.ApiException):
        core.read_namespace(NS)  # check mode created nothing
    assert not scrape.exists()

    first = role("dcgm_exporter", extra)
    assert first.returncode == 0, first.stdout[-4000:]
    assert "DCGM exporter Ready on" in first.stdout

    # The pods run on exactly the Nodes labelled nvidia.com/gpu.present=true: the lab's GPU nodes, not the CPU
    # worker or the control plane.
    labelled = sorted(n.metadata.name for n in core.list_node(label_selector=f"{GPU_LABEL}=true").items)
    assert set(GPU_NODES) <= set(labelled)
    assert sorted(_pods(core)) == labelled
    assert not any(n in _pods(core) for n in ("k8sgpu-lab-cpu-1", "k8sgpu-lab-cp-1", "k8sgpu-lab-cp-legacy"))
    ds = apps.read_namespaced_daemon_set(NAME, NS)
    assert ds.status.number_ready == ds.status.desired_number_scheduled == len(labelled)

    spec = ds.spec.template.spec
    ctr = spec.containers[0]
    assert ctr.image == "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"
    env = {e.name: e.value for e in ctr.env}
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true" and env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert next(e for e in ctr.env if e.name == "NODE_NAME").value_from.field_ref.field_path == "spec.nodeName"
    mounts = {m.name: m for m in ctr.volume_mounts}
    assert mounts["pod-gpu-resources"].mount_path == "/var/lib/kubelet/pod-resources"
    assert mounts["pod-gpu-resources"].read_only is True
    # Profiling counters are in the defaults, so SYS_ADMIN, and only that; never privileged, and the runtime's
    # default seccomp profile on pod and container even so (issue 19).
    assert ctr.security_context.capabilities.add == ["SYS_ADMIN"] and ctr.security_context.capabilities.drop == ["ALL"]
    assert ctr.security_context.allow_privilege_escalation is False and ctr.security_context.privileged is False
    assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
    assert ctr.security_context.seccomp_profile.type == "RuntimeDefault"
    # Every GPU of the node through the list the toolkit trusts from unprivileged containers, /dev/null mounted at
    # /var/run/nvidia-container-devices/all, and the variable for runtimes configured the old way.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert mounts["all-gpus"].mount_path == "/var/run/nvidia-container-devices/all"
    volumes = {v.name: v for v in spec.volumes}
    assert (volumes["all-gpus"].host_path.path, volumes["all-gpus"].host_path.type) == ("/dev/null", "CharDevice")
    # The namespace the role created enforces privileged (hostPath volumes), and the pods above were admitted.
    labels = core.read_namespace(NS).metadata.labels
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")} == {
        f"pod-security.kubernetes.io/{mode}{suffix}": value for mode in ("enforce", "audit", "warn")
        for suffix, value in (("", "privileged"), ("-version", "latest"))}
    assert spec.automount_service_account_token is False and spec.priority_class_name == "system-node-critical"
    for probe in (ctr.liveness_probe, ctr.readiness_probe):
        assert probe.http_get.path == "/health" and probe.initial_delay_seconds == 45 and probe.timeout_seconds == 5
    assert ctr.liveness_probe.failure_threshold == 6
    assert {(t.key, t.operator) for t in spec.tolerations} == {("nvidia.com/gpu", "Exists"), ("nvidia.com/gpu-health", "Exists")}
    term = spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    assert (term.match_expressions[0].key, term.match_expressions[0].values) == (GPU_LABEL, ["true"])

    svc = core.read_namespaced_service(NAME, NS)
    assert [(p.name, p.port) for p in svc.spec.ports] == [("metrics", 9400)]
    counters = core.read_namespaced_config_map(f"{NAME}-counters", NS).data["counters.csv"]
    fields = [line.split(",")[0] for line in counters.splitlines() if line and not line.startswith("#")]
    assert fields == [c["field"] for c in _role_counters()]

    # No ServiceMonitor CRD: the scrape configuration is written instead, and Prometheus accepts it.
    assert "No ServiceMonitor CRD" in first.stdout and str(scrape) in flat(first.stdout)
    job = yaml.safe_load(scrape.read_text())["scrape_configs"][0]
    assert job["honor_labels"] is False and job["kubernetes_sd_configs"][0]["role"] == "endpoints"
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in job["relabel_configs"]
    if PROMTOOL.exists():
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({"scrape_config_files": [str(scrape)]}))
        checked = subprocess.run([str(PROMTOOL), "check", "config", str(config)], capture_output=True, text=True,
                                 check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr

    again = role("dcgm_exporter", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
    recheck = role("dcgm_exporter", extra, "--check")
    assert recheck.returncode == 0 and changed(recheck) == 0, recheck.stdout[-3000:]


def test_service_monitor_stored_when_the_crd_exists_and_profiling_off(core, namespace, gpu_labelled, crds, tmp_path):
    custom = client.CustomObjectsApi(core.api_client)
    scrape = tmp_path / "dcgm-scrape.yml"
    extra = {"dcgm_exporter_namespace": NS, "dcgm_exporter_scrape_config_path": str(scrape),
             "dcgm_exporter_service_monitor": "always", "dcgm_exporter_profiling_metrics": False,
             "dcgm_exporter_service_monitor_labels": {"release": "kube-prometheus-stack"},
             "dcgm_exporter_wait_timeout": 120}
    res = role("dcgm_exporter", extra)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not scrape.exists()

    # The API server validated and stored it (the CRD's schema rejects unknown fields and wrong types).
    sm = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "servicemonitors", NAME)
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    endpoint = sm["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is False
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
            "action": "replace"} in endpoint["relabelings"]
    assert sm["spec"]["selector"]["matchLabels"] == core.read_namespaced_service(NAME, NS).spec.selector

    # Profiling off: no DCGM_FI_PROF_* counter, no capability, the default seccomp profile.
    ds = client.AppsV1Api(core.api_client).read_namespaced_daemon_set(NAME, NS)
    ctr = ds.spec.template.spec.containers[0]
    assert ctr.security_context.capabilities.add is None
    assert ds.spec.template.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    assert "DCGM_FI_PROF_" not in core.read_namespaced_config_map(f"{NAME}-counters", NS).data["counters.csv"]

    again = role("dcgm_exporter", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]


def test_service_monitor_always_without_the_crd_fails_clearly(namespace, no_crds, tmp_path):
    res = role("dcgm_exporter", {"dcgm_exporter_namespace": NS, "dcgm_exporter_service_monitor": "always",
                                 "dcgm_exporter_scrape_config_path": str(tmp_path / "s.yml"), "dcgm_exporter_wait": False})
    assert res.returncode != 0
    out = flat(res.stdout)
    assert "dcgm_exporter_service_monitor=always, but the cluster has no established CRD " \
           "servicemonitors.monitoring.coreos.com" in out, out[-2000:]


def test_wait_names_each_gpu_node_without_an_exporter_and_why(core, namespace, gpu_labelled, no_crds,
                                                              temp_gpu_node, tmp_path):
    tainted = temp_gpu_node([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
    res = role("dcgm_exporter", {"dcgm_exporter_namespace": NS, "dcgm_exporter_wait_timeout": 30,
                                 "dcgm_exporter_scrape_config_path": str(tmp_path / "s.yml")})
    assert res.returncode != 0
    out = flat(res.stdout)
    assert (f"{tainted}: no dcgm-exporter pod on this node: untolerated taint(s) dedicated=infra:NoSchedule"
            in out), out[-3000:]
    tail = out.rsplit("without a Ready dcgm-exporter pod:", maxsplit=1)[-1]
    assert all(f"{n}:" not in tail for n in GPU_NODES), tail


@pytest.mark.parametrize("extra, message", [
    # a form: k8sgpu.nvidia.role_inputs, the role's first task (issue 35: each check in one place)
    ({"dcgm_exporter_image_digest": "sha256:xyz"},
     "dcgm_exporter_image_digest is 'sha256:xyz'; an image digest: give sha256:<64 hex>"),
    ({"dcgm_exporter_extra_counters": [{"field": "DCGM_FI_DEV_FAN_SPEED", "type": "gauges", "help": "Fan"}]},
     # Refused by the role's argument spec (suboption choices, 1.1.0), before any host or object is read.
     "value of type must be one of: gauge, counter, histogram, summary, label, got: gauges found in "
     "dcgm_exporter_extra_counters"),
    ({"dcgm_exporter_extra_counters": [{"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "again"}]},
     "DCGM_FI_DEV_GPU_TEMP is listed twice"),
    ({"dcgm_exporter_service_monitor": "yes"},
     "value of dcgm_exporter_service_monitor must be one of: auto, always, never, got: yes"),
], ids=["digest", "counter type", "counter twice", "service monitor"])
def test_bad_input_is_named(extra, message):
    res = role("dcgm_exporter", {"dcgm_exporter_namespace": NS, **extra}, "--check")
    assert res.returncode != 0
    assert message in flat(res.stdout), flat(res.stdout)[-2000:]
