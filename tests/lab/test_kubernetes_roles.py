"""control_plane_untaint, node_labels and device_plugin against the lab's real API server."""
from __future__ import annotations

import json
import time
import uuid

import pytest
import yaml
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, run

CP_KEY = "node-role.kubernetes.io/control-plane"
MASTER_KEY = "node-role.kubernetes.io/master"
OTHER = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def role(name: str, *args: str, extra: dict | None = None):
    cmd = ["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "-e", f"role={name}"]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    return run(cmd + list(args))


def changed(res) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def taints_of(core, name) -> list[tuple]:
    return sorted((t.key, t.value, t.effect) for t in core.read_node(name).spec.taints or [])


@pytest.fixture
def temp_nodes(core):
    """kwok Nodes created for one test, deleted after it."""
    made = []

    def make(taints: list[dict], labels: dict | None = None, gpus: int | None = None) -> str:
        name = f"test-{uuid.uuid4().hex[:8]}"
        cap = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        if gpus is not None:
            cap["nvidia.com/gpu"] = str(gpus)
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                       "labels": {"type": "kwok", "kubernetes.io/hostname": name, **(labels or {})}},
                          "spec": {"taints": taints}, "status": {"capacity": cap, "allocatable": cap}})
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_node(name)


# --- control_plane_untaint ------------------------------------------------------

UNTAINT_CASES = {
    "master only": [{"key": MASTER_KEY, "effect": "NoSchedule"}],
    "control-plane only": [{"key": CP_KEY, "effect": "NoSchedule"}],
    "both": [{"key": CP_KEY, "effect": "NoSchedule"}, {"key": MASTER_KEY, "effect": "NoSchedule"}],
    "none": [],
    "unrelated kept": [OTHER, {"key": CP_KEY, "effect": "NoSchedule"},
                       {"key": CP_KEY, "effect": "PreferNoSchedule"}],
}


def test_untaint_every_taint_state(core, temp_nodes):
    nodes = {case: temp_nodes(taints) for case, taints in UNTAINT_CASES.items()}
    extra = {"control_plane_untaint_nodes": list(nodes.values())}

    check = role("control_plane_untaint", "--check", "--diff", extra=extra)
    assert check.returncode == 0, check.stdout[-3000:]
    assert changed(check) == 1
    assert taints_of(core, nodes["both"]) == [(CP_KEY, None, "NoSchedule"), (MASTER_KEY, None, "NoSchedule")]

    res = role("control_plane_untaint", extra=extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert changed(res) == 1
    for case in ("master only", "control-plane only", "both", "none"):
        assert taints_of(core, nodes[case]) == [], case
    # Other keys, and the same key with another effect, stay.
    assert taints_of(core, nodes["unrelated kept"]) == sorted([("dedicated", "infra", "NoSchedule"),
                                                              (CP_KEY, None, "PreferNoSchedule")])

    again = role("control_plane_untaint", extra=extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]


def test_untaint_missing_node_fails_with_its_name():
    res = role("control_plane_untaint", extra={"control_plane_untaint_nodes": ["no-such-node-x"]})
    assert res.returncode != 0
    assert "No Node named no-such-node-x" in res.stdout


# --- node_labels ----------------------------------------------------------------

def _labels(core, name) -> dict:
    return core.read_node(name).metadata.labels or {}


@pytest.fixture
def clean_gpu_labels(core):
    keys = ["gpu", "nvidia.com/gpu.present", "role", "team"]
    body = {"metadata": {"labels": {k: None for k in keys}}}
    for n in GPU_NODES:
        core.patch_node(n, body)
    yield
    for n in GPU_NODES:
        core.patch_node(n, body)
        core.patch_node(n, {"spec": {"taints": None}})


def test_node_labels_idempotent_check_and_removal(core, clean_gpu_labels):
    extra = {"node_labels_labels": {"role": "train-gpu"}}
    check = role("node_labels", "--check", extra=extra)
    assert check.returncode == 0 and changed(check) == 1, check.stdout[-3000:]
    assert "gpu" not in _labels(core, GPU_NODES[0])

    first = role("node_labels", "--diff", extra=extra)
    assert first.returncode == 0 and changed(first) == 1, first.stdout[-3000:]
    for n in GPU_NODES:
        labels = _labels(core, n)
        assert labels["gpu"] == "true" and labels["nvidia.com/gpu.present"] == "true" and labels["role"] == "train-gpu"
    assert "kubernetes.io/hostname" in _labels(core, GPU_NODES[0])  # other labels untouched

    second = role("node_labels", extra=extra)
    assert second.returncode == 0 and changed(second) == 0, second.stdout[-3000:]

    removed = role("node_labels", extra={"node_labels_remove": ["role"]})
    assert removed.returncode == 0 and changed(removed) == 1
    assert all("role" not in _labels(core, n) and _labels(core, n)["gpu"] == "true" for n in GPU_NODES)


def test_node_labels_taint(core, clean_gpu_labels):
    res = role("node_labels", extra={"node_labels_taint": "present"})
    assert res.returncode == 0, res.stdout[-3000:]
    assert all(taints_of(core, n) == [("nvidia.com/gpu", "present", "NoSchedule")] for n in GPU_NODES)
    res = role("node_labels", extra={"node_labels_taint": "absent"})
    assert res.returncode == 0 and changed(res) == 1
    assert all(taints_of(core, n) == [] for n in GPU_NODES)


def test_node_labels_missing_node_fails_with_its_name():
    res = role("node_labels", "-e", "k8sgpu_node_name=ghost-node")
    assert res.returncode != 0
    assert "No Node named ghost-node" in res.stdout


def test_node_labels_bad_label_is_named(clean_gpu_labels):
    res = role("node_labels", extra={"node_labels_labels": {"role": "train gpu"}})
    assert res.returncode != 0
    out = " ".join(res.stdout.split())
    # Refused by the role's input check, before any Node is read (Kubernetes' own wording for a label value).
    assert "node_labels: node_labels_labels.role is 'train gpu'; a label value: a valid label must be an empty " \
        "string or consist of alphanumeric characters" in out, res.stdout[-2000:]
    assert "1 input refused" in out and "node_labels : Label the GPU nodes" not in out, res.stdout[-2000:]


# --- device_plugin ------------------------------------------------------------------

DS = "nvidia-device-plugin-daemonset"


@pytest.fixture
def plugin(core):
    """AppsV1Api, with no device plugin deployed before the test (site.yml may have left one) or after it."""
    apps = client.AppsV1Api(core.api_client)

    def remove():
        for call in (lambda: apps.delete_namespaced_daemon_set(DS, "kube-system"),
                     lambda: core.delete_namespaced_config_map(f"{DS}-config", "kube-system")):
            try:
                call()
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        for _attempt in range(50):
            if not _plugin_pods(core):
                return
            time.sleep(0.2)

    remove()
    yield apps
    remove()


def _plugin_pods(core) -> dict:
    pods = core.list_namespaced_pod("kube-system", label_selector="app.kubernetes.io/name=nvidia-device-plugin").items
    return {p.spec.node_name: p for p in pods if not p.metadata.deletion_timestamp}


def test_device_plugin_rolls_out_on_gpu_nodes_only(core, plugin, clean_gpu_labels):
    labelled = role("node_labels")
    assert labelled.returncode == 0, labelled.stdout[-3000:]
    extra = {"device_plugin_time_slicing_replicas": 4, "device_plugin_wait_timeout": 60}

    check = role("device_plugin", "--check", extra=extra)
    assert check.returncode == 0, check.stdout[-3000:]
    with pytest.raises(client.ApiException):
        plugin.read_namespaced_daemon_set(DS, "kube-system")

    res = role("device_plugin", extra=extra)
    assert res.returncode == 0, res.stdout[-4000:]
    ds = plugin.read_namespaced_daemon_set(DS, "kube-system")
    assert ds.status.desired_number_scheduled == len(GPU_NODES) == ds.status.number_ready
    pods = _plugin_pods(core)
    assert sorted(pods) == sorted(GPU_NODES)  # not the CPU-only node, not the control plane
    spec = ds.spec.template.spec
    assert spec.priority_class_name == "system-node-critical"
    assert spec.automount_service_account_token is False
    ctr = spec.containers[0]
    assert ctr.image == "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    assert ctr.security_context.capabilities.drop == ["ALL"] and ctr.security_context.allow_privilege_escalation is False
    assert {t.key for t in spec.tolerations} == {"nvidia.com/gpu", "nvidia.com/gpu-health", "CriticalAddonsOnly"}
    term = spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    assert (term.match_expressions[0].key, term.match_expressions[0].values) == ("nvidia.com/gpu.present", ["true"])

    config = yaml.safe_load(core.read_namespaced_config_map(f"{DS}-config", "kube-system").data["config.yaml"])
    assert config["sharing"]["timeSlicing"] == {
        "renameByDefault": False, "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    assert config["flags"]["migStrategy"] == "none" and config["flags"]["failOnInitError"] is True

    again = role("device_plugin", extra=extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]

    # A config change updates the ConfigMap and the DaemonSet's config checksum, which rolls the pods.
    old_sum = ds.spec.template.metadata.annotations["k8sgpu.nvidia/config-sha256"]
    changed_cfg = role("device_plugin", extra={**extra, "device_plugin_time_slicing_replicas": 0})
    # One task (the private role k8s_apply's apply, one module call for both objects) writes both; both changing is
    # asserted below, on the live objects.
    assert changed_cfg.returncode == 0 and changed(changed_cfg) == 1, changed_cfg.stdout[-3000:]
    ds = plugin.read_namespaced_daemon_set(DS, "kube-system")
    assert ds.spec.template.metadata.annotations["k8sgpu.nvidia/config-sha256"] != old_sum
    assert sorted(_plugin_pods(core)) == sorted(GPU_NODES)
    config = yaml.safe_load(core.read_namespaced_config_map(f"{DS}-config", "kube-system").data["config.yaml"])
    assert "sharing" not in config


def test_device_plugin_wait_names_each_node_and_why(core, plugin, clean_gpu_labels, temp_nodes):
    role("node_labels")
    # A labelled node whose plugin runs but reports no GPU, and one with a taint the DaemonSet does not tolerate.
    no_gpu = temp_nodes([], {"nvidia.com/gpu.present": "true"})
    tainted = temp_nodes([OTHER], {"nvidia.com/gpu.present": "true"})
    inv_extra = {"device_plugin_wait_timeout": 20, "device_plugin_gpu_group": "all_gpu"}
    res = run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/device_plugin_wait.yml",
               "-e", json.dumps({**inv_extra, "extra_nodes": [no_gpu, tainted]})])
    assert res.returncode != 0
    out = res.stdout
    assert f"{no_gpu}: device plugin pod" in out and "the plugin found no GPU" in out, out[-4000:]
    assert f"{tainted}: no device plugin pod on this node: untolerated taint(s) dedicated=infra:NoSchedule" in out, out[-6000:]
    for n in GPU_NODES:
        assert f"{n}:" not in out.split("advertise no allocatable")[-1]


# Every optional setting of the DaemonSet and its configuration, set; the role's defaults clear them all.
OPTIONAL_SET = {
    "device_plugin_runtime_class": "nvidia",
    "device_plugin_image_pull_secrets": ["regcred"],
    "device_plugin_extra_tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    "device_plugin_image_digest": "sha256:" + "0123456789abcdef" * 4,
    "device_plugin_time_slicing_replicas": 4,
    "device_plugin_tolerate_control_plane": True,
}
# The RuntimeClass does not exist in the lab, so the pods would never run: no waiting.
NO_WAIT = {"device_plugin_wait": False}


def _optional_settings(core, apps) -> dict:
    """Which optional settings the live objects carry."""
    spec = apps.read_namespaced_daemon_set(DS, "kube-system").spec.template.spec
    keys = {t.key for t in spec.tolerations or []}
    config = yaml.safe_load(core.read_namespaced_config_map(f"{DS}-config", "kube-system").data["config.yaml"])
    return {
        "runtime class": spec.runtime_class_name is not None,
        "image pull secrets": bool(spec.image_pull_secrets),
        "extra toleration": "dedicated" in keys,
        "image digest": "@sha256:" in spec.containers[0].image,
        "time-slicing": "sharing" in config,
        "control-plane tolerations": bool(keys & {CP_KEY, MASTER_KEY}),
    }


def _managers(apps) -> set:
    """Field managers of the DaemonSet itself (not of its status)."""
    ds = apps.read_namespaced_daemon_set(DS, "kube-system")
    return {(m.manager, m.operation) for m in ds.metadata.managed_fields or [] if not m.subresource}


def test_device_plugin_clearing_a_setting_removes_it_from_the_live_objects(core, plugin):
    # First from objects written as earlier versions of the role wrote them (a merge patch, another field manager).
    legacy = run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/device_plugin_legacy.yml",
                  "-e", json.dumps(OPTIONAL_SET)])
    assert legacy.returncode == 0, legacy.stdout[-3000:]
    assert _managers(plugin) == {("OpenAPI-Generator", "Update")}
    assert all(_optional_settings(core, plugin).values()), _optional_settings(core, plugin)

    check = role("device_plugin", "--check", extra=NO_WAIT)
    assert check.returncode == 0 and changed(check) > 0, check.stdout[-3000:]
    assert all(_optional_settings(core, plugin).values())  # check mode changed nothing
    assert _managers(plugin) == {("OpenAPI-Generator", "Update")}

    cleared = role("device_plugin", extra=NO_WAIT)
    assert cleared.returncode == 0, cleared.stdout[-3000:]
    assert not any(_optional_settings(core, plugin).values()), _optional_settings(core, plugin)
    assert _managers(plugin) == {("k8sgpu.nvidia", "Apply")}

    again = role("device_plugin", extra=NO_WAIT)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]

    # Then set and cleared again, both by the role.
    set_ = role("device_plugin", extra={**OPTIONAL_SET, **NO_WAIT})
    assert set_.returncode == 0, set_.stdout[-3000:]
    assert all(_optional_settings(core, plugin).values()), _optional_settings(core, plugin)
    set_again = role("device_plugin", extra={**OPTIONAL_SET, **NO_WAIT})
    assert set_again.returncode == 0 and changed(set_again) == 0, set_again.stdout[-3000:]
    cleared = role("device_plugin", extra=NO_WAIT)
    assert cleared.returncode == 0, cleared.stdout[-3000:]
    assert not any(_optional_settings(core, plugin).values()), _optional_settings(core, plugin)
