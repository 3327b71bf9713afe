"""playbooks/gke.yml end to end: the GKE contract server for Google's API, the lab's real API server for the cluster.

What runs for real: ansible-playbook with the collection's module, role and k8s_gpu_verify; the lab's
kube-apiserver (which validates and stores the driver-installer DaemonSet and the verify Job), its scheduler
(which leaves the Job's pod Pending - no node matches the pool's selector - while the pool has no node, then binds
it to the new node) and kwok (which runs the pod on the simulated node). What is stood in for: GKE's API (the contract
server tests/support/k8sgpu_testlib/gke_contract_server.py, which checks that every request parses into google-cloud-container's proto types) and
GKE's cluster autoscaler (tests/support/k8sgpu_testlib/scale_from_zero.py, which adds a kwok GPU node with the pool's labels and
GPU taint only once the pod is Pending and unschedulable, and removes it after). The driver installer's pod
"runs" on a kwok node, so nothing proves that Google's installer image installs a driver.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import run

from k8sgpu_testlib.gke_contract_server import running
from k8sgpu_testlib.scale_from_zero import FakeAutoscaler

PROJECT, REGION = "k8sgpu-lab", "us-central1"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def gke():
    with running() as state:
        yield state


@pytest.fixture
def namespace(core):
    name = f"k8sgpu-gke-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def apps(kubeconfig):
    from kubernetes import config  # pylint: disable=import-outside-toplevel

    return client.AppsV1Api(config.new_client_from_config(config_file=kubeconfig))


def daemonset(apps, name: str, namespace: str = "kube-system"):
    try:
        return apps.read_namespaced_daemon_set(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def playbook(path: str, extra: dict, tmp_path: Path, *args: str):
    vars_file = tmp_path / f"vars-{uuid.uuid4().hex[:6]}.json"
    vars_file.write_text(json.dumps(extra))
    proc = run(["ansible-playbook", "-i", "localhost,", path, "-e", f"@{vars_file}",
                "-e", "ansible_python_interpreter={{ ansible_playbook_python }}", *args],
               env_extra={"ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_NOCOLOR": "1"})
    return proc, recap(proc.stdout).get("localhost", {})


def test_gke_playbook_scale_from_zero_second_run_and_teardown(core, apps, gke, namespace, kubeconfig, tmp_path):
    cluster = f"train-{uuid.uuid4().hex[:6]}"
    gke.add_cluster(PROJECT, REGION, cluster)
    pool = f"gpu-{uuid.uuid4().hex[:6]}"
    extra = {
        "k8sgpu_gke_node_pool": {
            "project": PROJECT, "location": REGION, "cluster": cluster, "name": pool,
            "api_endpoint": gke.base, "access_token": "contract-token",
            "machine_type": "n1-standard-4", "image_type": "UBUNTU_CONTAINERD", "spot": True,
            # the driver is ours to install: the playbook applies the Ubuntu driver-installer DaemonSet
            "accelerator": {"type": "nvidia-tesla-t4", "count": 1, "gpu_driver_version": "INSTALLATION_DISABLED"},
            "labels": {"role": "train-gpu"},
            "autoscaling": {"min_node_count": 0, "max_node_count": 1, "location_policy": "ANY"}},
        "k8sgpu_gke_verify_namespace": namespace, "k8sgpu_gke_verify_timeout": 120,
        "k8sgpu_gke_verify_require_logs": False,  # kwok has no container logs
        "k8sgpu_gke_scale_down_poll": 1,
        "k8sgpu_kubeconfig": kubeconfig,
    }
    # The nodes GKE would add to this pool: its own labels, the pool's labels, GKE's GPU taint.
    node_labels = {"cloud.google.com/gke-nodepool": pool, "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                   "role": "train-gpu"}
    try:
        with FakeAutoscaler(core, node_prefix="k8sgpu-gke-sfz", labels=node_labels, taints=[GPU_TAINT],
                            node_selector={"cloud.google.com/gke-nodepool": pool}, gpus=1, delay=3.0,
                            namespaces=[namespace], scale_down_after=2.0) as autoscaler:
            proc, stats = playbook("playbooks/gke.yml", extra, tmp_path)
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
            assert stats["changed"] >= 2 and stats["failed"] == 0  # the pool, the DaemonSet

            live = gke.pool(PROJECT, REGION, cluster, pool)
            assert live.status.name == "RUNNING" and live.config.spot
            assert live.config.accelerators[0].gpu_driver_installation_config.gpu_driver_version.name == \
                "INSTALLATION_DISABLED"
            ds = daemonset(apps, "nvidia-driver-installer")
            assert ds is not None, "the driver-installer DaemonSet was not applied"
            spec = ds.spec.template.spec
            assert spec.init_containers[0].image == "gke-nvidia-installer:fixed"
            assert spec.init_containers[0].security_context.privileged is True
            terms = spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
            exprs = {(e.key, e.operator, tuple(e.values or ())) for e in terms[0].match_expressions}
            assert exprs == {("cloud.google.com/gke-accelerator", "Exists", ()),
                             ("cloud.google.com/gke-nodepool", "In", (pool,))}

            # The Job's pod was Pending and unschedulable first; only then did a node join, and the pod ran there.
            assert len(autoscaler.scale_ups) == 1, autoscaler.scale_ups
            up = autoscaler.scale_ups[0]
            # No node carries the pool's label yet: the scheduler's reason, which the cluster autoscaler acts on.
            assert "didn't match Pod's node affinity/selector" in up.reason, up.reason
            assert up.node_created is not None and up.pod_running is not None
            assert up.pending_seen <= up.node_created <= up.pod_running and up.pod_node == up.node
            assert f"node pool {pool}: PASSED" in proc.stdout
            # The scale-down check: the playbook waited until the pool had no node left.
            assert f"node pool {pool}: back to zero nodes after the check" in proc.stdout
            assert autoscaler.removed and set(autoscaler.removed) == set(autoscaler.nodes)

            # Second run: nothing changes (the check scales the pool from zero and back again).
            proc, stats = playbook("playbooks/gke.yml", extra, tmp_path)
            assert proc.returncode == 0, proc.stdout[-4000:]
            assert stats["changed"] == 0, proc.stdout[-4000:]
            # Check mode: nothing changes, nothing is reported as changing.
            proc, stats = playbook("playbooks/gke.yml", extra, tmp_path, "--check")
            assert proc.returncode == 0 and stats["changed"] == 0, proc.stdout[-4000:]
        assert autoscaler.errors == []
    finally:
        # Teardown: the DaemonSet, then the pool.
        proc, stats = playbook("playbooks/gke.yml", {**extra, "k8sgpu_gke_state": "absent"}, tmp_path)
    assert proc.returncode == 0 and stats["changed"] == 2, proc.stdout[-4000:]
    assert gke.pool(PROJECT, REGION, cluster, pool) is None
    assert daemonset(apps, "nvidia-driver-installer") is None
    proc, stats = playbook("playbooks/gke.yml", {**extra, "k8sgpu_gke_state": "absent"}, tmp_path)
    assert proc.returncode == 0 and stats["changed"] == 0, proc.stdout[-4000:]


def test_driver_installer_role_cos_check_mode_and_second_run(apps, kubeconfig, tmp_path):
    """The COS variant against the real API server: validated and stored; check mode and a second run change nothing."""
    name = f"nvidia-driver-installer-{uuid.uuid4().hex[:6]}"
    play = tmp_path / "role.yml"
    play.write_text(json.dumps([{
        "name": "driver installer", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [{"role": "k8sgpu.nvidia.gke_driver_installer"}]}]))
    extra = {"gke_driver_installer_name": name, "gke_driver_installer_image_type": "COS_CONTAINERD",
             "gke_driver_installer_driver_version": "latest", "gke_driver_installer_node_pools": ["gpu-a", "gpu-b"],
             "gke_driver_installer_pause_digest": "sha256:" + "0" * 64, "gke_driver_installer_kubeconfig": kubeconfig}
    try:
        proc, stats = playbook(str(play), extra, tmp_path, "--check")
        assert proc.returncode == 0 and stats["changed"] == 1, proc.stdout[-3000:]
        assert daemonset(apps, name) is None, "check mode created the DaemonSet"

        proc, stats = playbook(str(play), extra, tmp_path)
        assert proc.returncode == 0 and stats["changed"] == 1, proc.stdout[-3000:]
        spec = daemonset(apps, name).spec.template.spec
        assert spec.host_pid is True and spec.host_network is True
        init = spec.init_containers[0]
        assert init.image == "cos-nvidia-installer:fixed" and init.image_pull_policy == "Never"
        assert init.command == ["/cos-gpu-installer", "install", "--version=latest"]
        assert {m.mount_path for m in init.volume_mounts} >= {"/usr/local/nvidia", "/root", "/dev", "/build/cos-tools"}
        assert spec.containers[0].image == "registry.k8s.io/pause:3.10@sha256:" + "0" * 64
        assert [t.operator for t in spec.tolerations] == ["Exists"]

        proc, stats = playbook(str(play), extra, tmp_path)
        assert proc.returncode == 0 and stats["changed"] == 0, proc.stdout[-3000:]
        proc, stats = playbook(str(play), {**extra, "gke_driver_installer_image_type": "WINDOWS_LTSC_CONTAINERD"},
                               tmp_path)
        assert proc.returncode != 0 and "COS* or UBUNTU*" in proc.stdout
    finally:
        proc, _stats = playbook(str(play), {**extra, "gke_driver_installer_state": "absent"}, tmp_path)
    assert proc.returncode == 0 and daemonset(apps, name) is None
