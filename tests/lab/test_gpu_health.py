"""playbooks/health.yml and the gpu_health role (issue 39 item 2) on the lab's two GPU hosts and their Nodes.

The lab's GPU hosts have no GPU (the driver is installed, not loaded), so each host gets, under HDIR, stand-ins that the
test's own extra vars point the role at (not inventories/lab; k8sgpu_testlib/gpu_health_lab.py says what each is): an
nvidia-smi printing a gpu_health fixture XML (the H100's healthy one unless HDIR/fault names another), a GPU reset
command that clears the fault, and a CUDA driver library whose kernel adds the vectors on the CPU, so the verify role's
vectorAdd passes. No reboot on the lab's GPU hosts (driver_reboot=report): the driver reload and the reboot recoveries run
on a GPU host of their own (lab.sh node, a node container of the lab's recipe standing for GPU 1's Node, as
test_fleet_limits.py's), where a reboot restarts the container with a new /run and the role's default reload command
runs a stand-in modprobe.

The Nodes are put back as each test found them (taint, annotations, cordon), and the stand-ins' state cleared, even
when a test fails. The file: 5 passed in 5 min 48 s wall, 2 min 56 s CPU user (2026-11-29, test_faults_host beside on the same 2 CPUs).
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, LAB_NAME, LAB_STATE, ROOT, node_sh, run
from k8sgpu_testlib.gpu_health_lab import (HDIR, MAINTENANCE, RECORD, RUN_FAULT, TAINT, install_standins,
                                           remove_standins, restore, snapshot, state)
from test_upgrade import NodeWatch, flat

NS = "k8sgpu-gpu-health-test"
UUID = "GPU-3df950bc-14e1-c147-af67-d6bc91665500"
GPU1, GPU2 = GPU_NODES


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, core):
    """The stand-ins on both GPU hosts (k8sgpu_testlib.gpu_health_lab), the test namespace; removed at the end."""
    vars_file = install_standins(tmp_path_factory.mktemp("gpu-health"))
    try:
        core.create_namespace({"metadata": {"name": NS}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    try:
        yield vars_file
    finally:
        try:
            core.delete_namespace(NS, grace_period_seconds=0)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        # Gone before the next module (test_gpu_health_eda.py takes this fixture) creates it again.
        end = time.monotonic() + 120
        while time.monotonic() < end and NS in [n.metadata.name for n in core.list_namespace().items]:
            time.sleep(0.5)
        remove_standins()


@pytest.fixture
def lab(hosts, core):
    """Each test starts with no fault and leaves both Nodes as it found them (taint, annotations, cordon)."""
    before = {n: snapshot(core, n) for n in GPU_NODES}
    for host in GPU_NODES:
        node_sh(host, f"rm -f {HDIR}/fault {HDIR}/resets {HDIR}/processes {HDIR}/reset-fails")
    try:
        yield hosts
    finally:
        for name, found in before.items():
            restore(core, name, found)
        for host in GPU_NODES:
            node_sh(host, f"rm -f {HDIR}/fault {HDIR}/resets {HDIR}/processes {HDIR}/reset-fails", check=False)


def fault(host: str, fixture: str) -> None:
    node_sh(host, f"echo {fixture} > {HDIR}/fault")


def health(vars_file: Path, *extra: str, check: bool = False) -> subprocess.CompletedProcess:
    return run(["ansible-playbook", "-i", "inventories/lab", "playbooks/health.yml", "-e", f"@{vars_file}", *extra,
                *(["--check", "--diff"] if check else [])], env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


def resets(host: str) -> str:
    return node_sh(host, f"cat {HDIR}/resets 2>/dev/null || true")


def test_report_taints_and_records_nothing_cordoned_second_run_no_change(lab, core):
    fault(GPU1, "recovery-gpu-reset.xml")
    res = health(lab, check=True)
    assert res.returncode == 0, res.stdout[-4000:]
    cordoned, taints, record = state(core, GPU1)
    assert not cordoned and TAINT not in taints and record is None, "check mode changes nothing"
    assert f"+        - {TAINT}=needs_reset:NoSchedule" in res.stdout, res.stdout[-3000:]  # --diff: the taint
    assert f"+            {RECORD}: " in res.stdout, res.stdout[-3000:]  # and the annotation

    res = health(lab)
    assert res.returncode == 0, res.stdout[-4000:]
    cordoned, taints, record = state(core, GPU1)
    assert not cordoned and taints.get(TAINT) == "needs_reset:NoSchedule", taints
    assert record["state"] == "tainted" and record["policy"] == "report" and record["time"].endswith("Z")
    gpu = record["gpus"][0]
    assert (gpu["index"], gpu["uuid"], gpu["pci_bus_id"], gpu["status"]) == (0, UUID, "00000000:00:06.0", "needs_reset")
    assert gpu["findings"][0]["check"] == "recovery_action", gpu
    assert TAINT not in state(core, GPU2)[1] and state(core, GPU2)[2] is None
    assert resets(GPU1) == ""

    res = health(lab)
    assert res.returncode == 0, res.stdout[-4000:]
    assert all(stats["changed"] == 0 for stats in recap(res.stdout).values()), recap(res.stdout)
    assert state(core, GPU1)[2] == record

    # Healthy again: the taint removed, the record says returned.
    node_sh(GPU1, f"rm -f {HDIR}/fault")
    res = health(lab)
    assert res.returncode == 0, res.stdout[-4000:]
    cordoned, taints, record = state(core, GPU1)
    assert not cordoned and TAINT not in taints and record["state"] == "returned" and record["status"] == "healthy"

    # state absent: the role's annotation gone too.
    res = health(lab, "-e", "gpu_health_state=absent")
    assert res.returncode == 0, res.stdout[-4000:]
    cordoned, taints, record = state(core, GPU1)
    assert not cordoned and TAINT not in taints and record is None, record


def workload(core, node: str) -> str:
    """A Deployment's pod on the Node (no toleration); its name."""
    apps = client.AppsV1Api(core.api_client)
    labels = {"app": "gpu-work"}
    apps.create_namespaced_deployment(NS, {"metadata": {"name": "gpu-work"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}}}})
    end = time.monotonic() + 60
    while time.monotonic() < end:
        pods = [p for p in core.list_namespaced_pod(NS).items if p.status.phase == "Running"]
        if pods:
            return pods[0].metadata.name
        time.sleep(0.5)
    pytest.fail("the workload's pod is not Running")


def test_a_node_cordoned_by_a_person_stays_cordoned_and_a_busy_gpu_is_not_reset(lab, core):
    """GPU 1's Node cordoned by hand: recovered, taint removed, still cordoned. GPU 2's GPU used by a process: not
    reset, its Node stays cordoned and tainted, the record naming the process. (The limit 2: GPU 1 counts as out.)"""
    core.patch_node(GPU1, {"spec": {"unschedulable": True}})
    fault(GPU1, "recovery-gpu-reset.xml")
    fault(GPU2, "reset-status-drain-and-reset.xml")
    node_sh(GPU2, f"echo '4242, python3' > {HDIR}/processes")
    res = health(lab, "-e", "gpu_health_policy=recover", "-e", "k8sgpu_max_unavailable=2")
    assert res.returncode == 0, res.stdout[-5000:]
    assert resets(GPU1).split() == ["-i", "0"]
    cordoned, taints, record = state(core, GPU1)
    assert cordoned and TAINT not in taints, (cordoned, taints)
    assert record["state"] == "returned" and "cordoned by someone else and stays cordoned" in record["reason"], record
    assert "was cordoned before this run" in flat(res.stdout)
    assert resets(GPU2) == ""
    cordoned, taints, record = state(core, GPU2)
    assert cordoned and taints.get(TAINT) == "needs_reset:NoSchedule", (cordoned, taints)
    assert record["state"] == "out" and record["cordoned"], record
    assert "GPU(s) 0 used by processes (4242, python3): not reset" in record["reason"], record["reason"]


def test_recover_two_unhealthy_hosts_one_out_at_a_time(lab, core):
    """needs_reset on both hosts, policy recover, k8sgpu_max_unavailable 1: each cordoned in turn (never both),
    drained (GPU 1's workload pod evicted), its GPU reset, the health read healthy, vectorAdd passed, taint removed,
    uncordoned, node_maintenance's annotations gone. The cluster is reached through gpu_health_kubeconfig alone
    (k8sgpu_kubeconfig names no file): node_maintenance's steps take the role's connection."""
    fault(GPU1, "recovery-gpu-reset.xml")
    fault(GPU2, "reset-status-drain-and-reset.xml")
    pod = workload(core, GPU1)
    watch = NodeWatch(core, GPU_NODES)
    try:
        res = health(lab, "-e", "gpu_health_policy=recover", "-e", "k8sgpu_max_unavailable=1",
                     "-e", "k8sgpu_kubeconfig=/nonexistent/kubeconfig", "-e", f"gpu_health_kubeconfig={LAB_STATE}/kubeconfig")
    finally:
        watch.stop()
        client.AppsV1Api(core.api_client).delete_namespaced_deployment("gpu-work", NS)
    assert res.returncode == 0, res.stdout[-5000:]
    assert watch.most == 1 and watch.ever == {GPU1, GPU2}, (watch.most, watch.ever)
    assert pod not in [p.metadata.name for p in core.list_namespaced_pod(NS).items if not p.metadata.deletion_timestamp]
    assert flat(res.stdout).count("vectorAdd passed on 1 GPU(s)") >= 2, flat(res.stdout)[-3000:]
    for host in GPU_NODES:
        assert resets(host).split() == ["-i", "0"], (host, resets(host))
        cordoned, taints, record = state(core, host)
        assert not cordoned and TAINT not in taints, (host, cordoned, taints)
        assert record["state"] == "returned" and record["reason"].startswith("recovered by reset"), (host, record)
        assert record["recovered"].endswith("Z")
        assert not {*MAINTENANCE} & set(core.read_node(host).metadata.annotations or {})


def test_replace_stays_out_and_the_next_host_waits_for_the_limit(lab, core):
    fault(GPU1, "remapped-rows-failure.xml")
    fault(GPU2, "recovery-gpu-reset.xml")
    res = health(lab, "-e", "gpu_health_policy=recover", "-e", "k8sgpu_max_unavailable=1")
    assert res.returncode == 0, res.stdout[-5000:]
    cordoned, taints, record = state(core, GPU1)
    assert cordoned and taints.get(TAINT) == "replace:NoSchedule", (cordoned, taints)
    assert record["state"] == "quarantined" and record["status"] == "replace" and record["cordoned"]
    assert "the GPU must be replaced: no recovery is tried" in record["reason"], record["reason"]
    assert resets(GPU1) == ""
    cordoned, taints, record = state(core, GPU2)
    assert not cordoned and taints.get(TAINT) == "needs_reset:NoSchedule", (cordoned, taints)
    assert record["state"] == "waiting" and "k8sgpu_max_unavailable" in record["reason"], record
    assert resets(GPU2) == ""
    # Again: nothing changes (GPU 1 stays out, GPU 2 still waits).
    res = health(lab, "-e", "gpu_health_policy=recover", "-e", "k8sgpu_max_unavailable=1")
    assert res.returncode == 0, res.stdout[-5000:]
    assert all(stats["changed"] == 0 for stats in recap(res.stdout).values()), recap(res.stdout)


def test_a_reset_the_driver_refuses_keeps_the_node_out_with_its_message(lab, core):
    fault(GPU1, "remapped-rows-pending.xml")
    node_sh(GPU1, f"touch {HDIR}/reset-fails")
    res = health(lab, "-e", "gpu_health_policy=recover", "--limit", GPU1)
    assert res.returncode == 0, res.stdout[-5000:]
    assert resets(GPU1).split() == ["-i", "0"]
    cordoned, taints, record = state(core, GPU1)
    assert cordoned and taints.get(TAINT) == "needs_reset:NoSchedule", (cordoned, taints)
    assert record["state"] == "out" and record["cordoned"] and record["recovered"], record
    assert "the reset of GPU(s) 0 failed (Unable to reset this GPU because it's being used by some other process)" \
        in record["reason"], record["reason"]


def test_a_host_without_a_node_fails_named_before_anything_is_read_or_changed(lab, core):
    """k8sgpu_node_name naming a Node the cluster does not have: the run fails at the Node read, naming the host, the
    Node and the fix (filter node_of_host); no health read, no taint, the Nodes as they were."""
    fault(GPU1, "recovery-gpu-reset.xml")
    before = snapshot(core, GPU1)
    res = health(lab, "-e", "gpu_health_policy=recover", "-e", "k8sgpu_node_name=no-such-node", "--limit", GPU1)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert (f"{GPU1}: no Node no-such-node in the cluster (kubectl get nodes). Set k8sgpu_node_name for the host to "
            "its Node's name, or leave the host out of the run.") in flat(out), out[-3000:]
    assert "TASK [k8sgpu.nvidia.gpu_health : Read the GPUs' health]" not in out, out[-3000:]
    assert snapshot(core, GPU1) == before


# ---------------------------------------------------------------- the driver reload and the reboot, on a host of their own

SPARE = f"{LAB_NAME}-gpu-health-1"
# Before /usr/sbin/modprobe on PATH: records its arguments; loading nvidia clears the fault (the reload recovered).
MODPROBE = f"""#!/bin/sh
echo "$*" >> {HDIR}/modprobe
case "$1" in -r) ;; *) rm -f {HDIR}/fault ;; esac
"""


@pytest.fixture(scope="module")
def spare(hosts, tmp_path_factory):
    """A node container of the lab's recipe (lab.sh node: a reboot restarts it, /run new) standing for GPU 1's Node,
    with the stand-ins and /usr/local/sbin/modprobe; an inventory of it alone. (hosts: the test namespace.)"""
    cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", SPARE, "bookworm"], capture_output=True, text=True,
                        check=False)
    assert cp.returncode == 0, cp.stderr
    work = tmp_path_factory.mktemp("gpu-health-spare")
    try:
        vars_file = install_standins(work, [SPARE])
        (work / "modprobe").write_text(MODPROBE)
        subprocess.run(["docker", "cp", str(work / "modprobe"), f"{SPARE}:/usr/local/sbin/modprobe"], check=True)
        node_sh(SPARE, "chmod 755 /usr/local/sbin/modprobe && [ \"$(command -v modprobe)\" = /usr/local/sbin/modprobe ]")
        (work / "inventory").mkdir()
        (work / "inventory" / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
        (work / "inventory" / "hosts.yml").write_text(json.dumps({"all": {"children": {
            "gpu_nodes": {"hosts": {SPARE: {"k8sgpu_node_name": GPU_NODES[0]}},
                          "vars": {"ansible_connection": "community.docker.docker",
                                   "ansible_python_interpreter": "/usr/bin/python3"}},
            "k8s_control_plane": {"hosts": {"localhost": {
                "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        }}}))
        yield work / "inventory", vars_file
    finally:
        subprocess.run(["docker", "rm", "-f", SPARE], capture_output=True, check=False)


def spare_health(spare_files: tuple[Path, Path], *extra: str) -> subprocess.CompletedProcess:
    inventory, vars_file = spare_files
    return run(["ansible-playbook", "-i", str(inventory), "playbooks/health.yml", "-e", f"@{vars_file}",
                "-e", "gpu_health_policy=recover", *extra], env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


def restarts(host: str) -> tuple[int, str]:
    """Docker's restart count of the container and when it last started."""
    out = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}} {{.State.StartedAt}}", host],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), out[1]


class BootIDs:
    """The kubelet's part that kwok does not play: the Node's status.nodeInfo.bootID, a new one each time the host's
    container starts (Docker's StartedAt), checked every 0.2 s."""

    def __init__(self, core, node: str, host: str):
        self.core, self.node, self.host, self.stopped = core, node, host, False
        self.started = restarts(host)[1]
        self._set(self.started)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _set(self, started: str) -> None:
        self.core.patch_node_status(self.node, {"status": {"nodeInfo": {"bootID": f"lab-boot-{started}"}}})

    def _run(self) -> None:
        while not self.stopped:
            try:
                started = restarts(self.host)[1]
            except subprocess.CalledProcessError:  # Docker busy with the restart: look again
                started = self.started
            if started != self.started:
                self.started = started
                self._set(started)
            time.sleep(0.2)

    def stop(self) -> None:
        self.stopped = True
        self.thread.join()
        self.core.patch_node_status(self.node, {"status": {"nodeInfo": {"bootID": ""}}})


def test_driver_reload_recovers_with_the_default_command(lab, core, spare):
    """GPU resets off, reloads on: the role's default reload command (modprobe -r the four modules, then modprobe
    nvidia) runs once; the fault cleared by it, the Node is checked and returned. (A second run after a recovery
    changes nothing: the reboot's test and test_gpu_health_eda.py.)"""
    node_sh(SPARE, f"echo recovery-gpu-reset.xml > {HDIR}/fault && rm -f {HDIR}/modprobe {HDIR}/resets")
    res = spare_health(spare, "-e", "gpu_health_reset=false", "-e", "gpu_health_driver_reload=true")
    assert res.returncode == 0, res.stdout[-5000:]
    assert node_sh(SPARE, f"cat {HDIR}/modprobe").splitlines() == ["-r nvidia_uvm nvidia_drm nvidia_modeset nvidia",
                                                                   "nvidia"]
    assert node_sh(SPARE, f"cat {HDIR}/resets 2>/dev/null || true") == ""
    cordoned, taints, record = state(core, GPU1)
    assert not cordoned and TAINT not in taints, (cordoned, taints)
    assert record["state"] == "returned" and record["reason"].startswith("recovered by reload"), record
    assert "vectorAdd passed on 1 GPU(s)" in flat(res.stdout)


def test_reboot_recovers_a_gpu_the_driver_says_needs_one(lab, core, spare):
    """recovery action Node Reboot, the fault on /run (a reboot clears it): the host rebooted once (the container
    restarted), the Node waited for with a new bootID, checked, returned; a second run reboots nothing."""
    node_sh(SPARE, f"echo recovery-node-reboot.xml > {RUN_FAULT} && rm -f {HDIR}/fault")
    count, _started = restarts(SPARE)
    boots = BootIDs(core, GPU1, SPARE)
    try:
        res = spare_health(spare, "-e", "gpu_health_reboot=true")
        assert res.returncode == 0, res.stdout[-5000:]
        assert restarts(SPARE)[0] == count + 1
        assert core.read_node(GPU1).status.node_info.boot_id == f"lab-boot-{boots.started}"
        cordoned, taints, record = state(core, GPU1)
        assert not cordoned and TAINT not in taints, (cordoned, taints)
        assert record["state"] == "returned" and record["reason"].startswith("recovered by reboot"), record
        assert record["recovered"].endswith("Z")
        assert "vectorAdd passed on 1 GPU(s)" in flat(res.stdout)
        again = spare_health(spare, "-e", "gpu_health_reboot=true")
        assert again.returncode == 0, again.stdout[-5000:]
        assert all(stats["changed"] == 0 for stats in recap(again.stdout).values()), recap(again.stdout)
        assert restarts(SPARE)[0] == count + 1
    finally:
        boots.stop()
