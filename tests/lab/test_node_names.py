"""Host -> Node mapping against the lab: the name the kubelet registers (uname -n, lowercased) or k8sgpu_node_name,
never the inventory name; Jobs pinned by the Node's name, not its kubernetes.io/hostname label."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from conftest import GPU_NODES, LAB_NAME, LAB_STATE, ROOT, run

ALIAS = "GPU-One.Example.NET"  # an inventory name the kubelet never registered: upper case, an FQDN
LABEL = "k8sgpu-test/node-name"


def inventory(tmp_path: Path, gpu_hosts: dict) -> Path:
    """An inventory like a site's: GPU hosts by any name, reached by ansible_host; the lab's group_vars."""
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories" / "lab" / "group_vars")
    inv = {"all": {"children": {
        "gpu_nodes": {"hosts": gpu_hosts, "vars": {"ansible_connection": "community.docker.docker",
                                                   "ansible_python_interpreter": "/usr/bin/python3"}},
        "k8s_control_plane": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
    }}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def kubernetes_playbook(inv: Path, extra: dict):
    # Alone: nothing gathered facts earlier in the run. The device plugin is another test's subject.
    return run(["ansible-playbook", "-i", str(inv), "playbooks/kubernetes.yml",
                "-e", json.dumps({"k8sgpu_deploy_device_plugin": False, **extra})],
               env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


@pytest.fixture
def test_label(core):
    value = uuid.uuid4().hex[:12]
    yield value
    for n in GPU_NODES:
        core.patch_node(n, {"metadata": {"labels": {LABEL: None}}})


def test_kubernetes_playbook_alone_labels_the_node_the_kubelet_registered(core, tmp_path, test_label):
    assert ALIAS.lower() != GPU_NODES[0]
    inv = inventory(tmp_path, {ALIAS: {"ansible_host": GPU_NODES[0]}})
    res = kubernetes_playbook(inv, {"node_labels_labels": {LABEL: test_label}})
    assert res.returncode == 0, res.stdout[-4000:]
    labels = {n: core.read_node(n).metadata.labels or {} for n in GPU_NODES}
    assert labels[GPU_NODES[0]].get(LABEL) == test_label
    assert LABEL not in labels[GPU_NODES[1]]


def test_unreachable_host_without_override_fails_naming_it_and_the_fix(core, tmp_path, test_label):
    ghost = "ghost.example.net"
    inv = inventory(tmp_path, {ALIAS: {"ansible_host": GPU_NODES[0]},
                               ghost: {"ansible_host": f"{LAB_NAME}-no-such-node"}})
    res = kubernetes_playbook(inv, {"node_labels_labels": {LABEL: test_label}})
    assert res.returncode != 0
    out = " ".join(res.stdout.split())
    assert f"No Kubernetes Node name for host {ghost}" in out, res.stdout[-4000:]
    assert "set k8sgpu_node_name for it to its Node's name" in out
    assert f"No Node named {ghost}" not in out  # no guess from the inventory name
    assert LABEL not in (core.read_node(GPU_NODES[0]).metadata.labels or {})  # nothing labelled from a partial map


@pytest.fixture
def renamed_node(core):
    """A kwok GPU Node whose kubernetes.io/hostname label is not its name (as with --hostname-override)."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    cap = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"}
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                   "labels": {"type": "kwok", "kubernetes.io/hostname": f"{name}-kubelet-host"}},
                      "status": {"capacity": cap, "allocatable": cap}})
    yield name
    core.delete_node(name)


def test_pinned_job_lands_on_its_node_when_the_hostname_label_differs(core, renamed_node):
    res = run(["ansible", "localhost", "-i", "inventories/lab", "-m", "k8sgpu.nvidia.k8s_gpu_verify", "-a",
               json.dumps({"kubeconfig": str(LAB_STATE / "kubeconfig"), "per_node": True, "nodes": [renamed_node],
                           "require_logs": False, "timeout": 45, "cleanup": False})],
              env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    out = json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    batch = client.BatchV1Api(core.api_client)
    run_id = out["jobs"][0]["job"].split("-")[2] if out.get("jobs") else None
    try:
        assert res.returncode == 0, out.get("msg")
        assert out["jobs"][0]["status"] == "completed_no_logs", out["jobs"]
        pods = core.list_namespaced_pod("default", label_selector=f"k8sgpu.nvidia/verify-run={run_id}").items
        assert [p.spec.node_name for p in pods] == [renamed_node]  # the real scheduler placed it there
    finally:
        if run_id:
            batch.delete_collection_namespaced_job("default", label_selector=f"k8sgpu.nvidia/verify-run={run_id}",
                                                   propagation_policy="Background")
