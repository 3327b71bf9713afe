"""playbooks/upgrade.yml on real packages (make upgrade-test; issue 12): NVIDIA driver 535.216.03 -> 535.261.03.

Two Debian 12 node containers (lab/upgrade-nodes.sh) start from an image with bookworm-backports' nvidia-driver
535.216.03 held, its kernel module built by DKMS; each maps to a kwok Node of its own name (created here, with
nvidia.com/gpu). upgrade.yml with serial 1 moves them to bookworm's 535.261.03: apt, DKMS builds the new module,
the node "reboots" (its container restarts: the driver cannot load in a container), the Node comes back, its
Deployment pods (under a PodDisruptionBudget) were evicted and rescheduled. A watch of the Nodes records how many were
unschedulable at once. A second run changes nothing and reboots nothing: the hosts booted since the module was
installed (the driver role's reboot rule).

Slow (a DKMS build per node): not part of make test; `make upgrade-test` sets K8SGPU_UPGRADE_TEST=1.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from ansible_output import recap
from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh
from test_upgrade import NodeWatch, flat

pytestmark = pytest.mark.skipif(os.environ.get("K8SGPU_UPGRADE_TEST") != "1",
                                reason="the real-packages driver upgrade runs with make upgrade-test (DKMS builds)")

HOSTS = [f"{LAB_NAME}-upg-1", f"{LAB_NAME}-upg-2"]
NS, APP = "k8sgpu-upgrade-packages", "gpu-app"
FROM, TO = "535.216.03", "535.261.03"
ANNOTATION = "k8sgpu.nvidia/cordoned-for-maintenance"
HELD = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced", "nvidia-smi"]


def sh(host: str, cmd: str) -> str:
    return node_sh(host, cmd).strip()


def restarts(host: str) -> int:
    return int(subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", host], capture_output=True, text=True,
                              check=True).stdout)


def kwok_node(name: str) -> dict:
    """A kwok Node like the lab's GPU Nodes (lab/topology.py): the kwok controller keeps it Ready."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}},
            "status": {"capacity": resources, "allocatable": resources}}


@pytest.fixture(scope="module")
def apis(kubeconfig):
    api = config.new_client_from_config(config_file=kubeconfig)
    return client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, apis):
    """The node containers from the starting image, their kwok Nodes, a Deployment with a budget; all removed after."""
    core, apps, policy = apis
    wait_namespace_gone(core)
    try:
        cp = subprocess.run([str(ROOT / "lab/upgrade-nodes.sh"), "nodes", *HOSTS], capture_output=True, text=True,
                            check=False, env={**os.environ, "K8SGPU_LAB_STATE": str(LAB_STATE)})
        assert cp.returncode == 0, cp.stderr[-3000:]
        for host in HOSTS:
            core.create_node(kwok_node(host))
        core.create_namespace({"metadata": {"name": NS}})
        labels = {"app": APP}
        apps.create_namespaced_deployment(NS, {
            "metadata": {"name": APP},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": HOSTS}]}]}}},
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                   "whenUnsatisfiable": "ScheduleAnyway",
                                                   "labelSelector": {"matchLabels": labels}}],
                }}}})
        policy.create_namespaced_pod_disruption_budget(NS, {
            "metadata": {"name": APP}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}})
        inv_dir = tmp_path_factory.mktemp("upgrade-packages-inventory")
        (inv_dir / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
        (inv_dir / "hosts.yml").write_text(json.dumps({"all": {"children": {
            "gpu_nodes": {"hosts": dict.fromkeys(HOSTS, {}), "vars": {
                "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}},
            "k8s_control_plane": {"hosts": {"localhost": {
                "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        }}}))
        yield inv_dir
    finally:
        try:
            core.delete_namespace(NS)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        wait_namespace_gone(core)
        for host in HOSTS:
            try:
                core.delete_node(host)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        subprocess.run(["docker", "rm", "-f", *HOSTS], capture_output=True, check=False)


def wait_namespace_gone(core) -> None:
    """A namespace being deleted (pods to remove first) cannot be created again: wait until it is gone."""
    for _attempt in range(120):
        try:
            core.read_namespace(NS)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(1)
    pytest.fail(f"namespace {NS} still exists 120 s after its deletion")


def running_pods(core) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(NS, label_selector=f"app={APP}").items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp}


def wait_running(core, policy) -> dict[str, str]:
    for _attempt in range(90):
        pods = running_pods(core)
        if len(pods) == 2 and policy.read_namespaced_pod_disruption_budget(APP, NS).status.current_healthy == 2:
            return pods
        time.sleep(1)
    pytest.fail(f"Deployment {NS}/{APP} does not run 2 pods: {running_pods(core)}")


def upgrade(inv_dir: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "K8SGPU_LAB_STATE": str(LAB_STATE),
           # Each task's time, to split the driver step into apt/DKMS and the reboot.
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"}
    # Two DKMS builds one after the other: conftest.run's 600 s are too few.
    res = subprocess.run(["ansible-playbook", "-i", str(inv_dir / "hosts.yml"), "playbooks/upgrade.yml",
                          "-e", f"driver_version={TO}",
                          # No GPU in a container: the driver role installs anyway (as for an image build).
                          "-e", "driver_no_gpu=install",
                          "-e", "k8sgpu_install_container_toolkit=false"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=5400, check=False)
    return res, time.monotonic() - started


def task_seconds(out: str) -> list[tuple[str, float]]:
    """(task, seconds) in run order, from profile_tasks' line under each banner (the time of the task before it)."""
    times, previous, banner = [], None, None
    for line in out.splitlines():
        if match := re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \*+$", line):
            banner = match.group(1)
        elif match := re.search(r"\((\d+):(\d+):(\d+(?:\.\d+)?)\)\s+\d+:\d+:\d+", line):
            if previous is not None:
                times.append((previous, int(match.group(1)) * 3600 + int(match.group(2)) * 60 + float(match.group(3))))
            previous, banner = banner, None
    return times


def where_the_time_goes(out: str) -> dict[str, str]:
    """Per serial batch (one host each): the apt/DKMS install and the reboot, from task_seconds."""
    parts = {}
    for batch in out.split("PLAY [")[1:]:
        host = re.search(r"(\S+) upgraded in ", batch)
        if host is None:
            continue
        times = task_seconds(batch)
        apt = sum(t for task, t in times if task.endswith("Install the driver packages with apt"))
        reboot = sum(t for task, t in times
                     if task.endswith(("Reboot into the new driver", "Reboot the host")))
        parts[host.group(1)] = f"apt/DKMS {apt:.1f} s, reboot {reboot:.1f} s"
    return parts


def test_rolling_driver_upgrade_on_real_packages(lab, apis):
    core, _apps, policy = apis
    for host in HOSTS:
        assert sh(host, "dpkg-query -W -f='${Version}' nvidia-driver").startswith(f"{FROM}-")
        assert sh(host, "apt-mark showhold").split() == HELD
    pods_before = wait_running(core, policy)
    assert set(pods_before.values()) <= set(HOSTS), pods_before
    restarted = {host: restarts(host) for host in HOSTS}

    nodes_watch = NodeWatch(core, HOSTS)
    try:
        res, wall = upgrade(lab)
    finally:
        nodes_watch.stop()
    out = flat(res.stdout)
    assert res.returncode == 0, res.stdout[-6000:]
    steps = re.findall(r"(\S+) upgraded in (.*? s)(?= [A-Z]|$)", out)
    print(f"\nfirst run: {wall:.0f} s wall; per host: {steps}; within the driver step: {where_the_time_goes(res.stdout)}")
    assert [host for host, _times in steps] == HOSTS, out[-3000:]

    # One Node out of service at a time, each once; both back in service, without our annotation.
    assert nodes_watch.most == 1 and nodes_watch.ever == set(HOSTS), (nodes_watch.most, nodes_watch.ever)
    for host in HOSTS:
        node = core.read_node(host)
        assert not node.spec.unschedulable and ANNOTATION not in (node.metadata.annotations or {})
    # Every pod was evicted (from one Node or the other) and the Deployment runs again in full.
    pods_after = wait_running(core, policy)
    assert not set(pods_before) & set(pods_after), (pods_before, pods_after)

    for host in HOSTS:
        # The new driver from bookworm, built by DKMS, held; one "reboot" (the container restarted once).
        assert sh(host, "dpkg-query -W -f='${Version}' nvidia-driver nvidia-kernel-dkms nvidia-smi").count(f"{TO}-") == 3
        assert re.search(rf"nvidia-current/{TO}, \S+, x86_64: installed", sh(host, "dkms status")), \
            sh(host, "dkms status")
        assert sh(host, "apt-mark showhold").split() == HELD
        assert all(line.split()[1] == "hold" for line in sh(host, f"dpkg --get-selections {' '.join(HELD)}").splitlines())
        assert restarts(host) == restarted[host] + 1, f"{host} was not rebooted once"
    assert "maintenance needed: driver: packages to install or change" in out
    assert "installed_not_loaded_after_reboot" in out

    # Second run: nothing to change, no reboot: the hosts booted since the module was installed.
    again, wall2 = upgrade(lab)
    print(f"second run: {wall2:.0f} s wall")
    assert again.returncode == 0, again.stdout[-4000:]
    assert all(s["changed"] == 0 for s in recap(again.stdout).values()), recap(again.stdout)
    assert flat(again.stdout).count("nothing to change, the Node stays in service") == 2
    assert "booted since the kernel module was installed" in flat(again.stdout)
    assert {host: restarts(host) for host in HOSTS} == {host: restarted[host] + 1 for host in HOSTS}
