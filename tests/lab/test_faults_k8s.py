"""Faults in the middle of the Kubernetes half (issue 36): the controller killed, or the API server stopped, between
cordon and uncordon; the API server stopped during kubernetes.yml.

On the lab's real API server, with kwok GPU Nodes and the throwaway host container of test_maintenance_safety.py
(whose fixtures and helpers this file uses): playbooks/upgrade.yml, and host.yml's drain path
(k8sgpu_drain_before_restart), are killed with SIGKILL while the drain of a cordoned Node waits on a
PodDisruptionBudget; a plain re-run, once the budget allows, must give the Node back (the maintenance record on the
Node tells it the cordon was this collection's), while a Node a person cordoned before the run stays cordoned.

The API server (k8sgpu_testlib.control_plane: the lab's kube-apiserver process) is stopped two ways: paused with
SIGSTOP, so that it accepts connections and answers nothing (an overloaded server, a path that drops packets), during
upgrade.yml's drain; and killed with SIGKILL during kubernetes.yml, then started again (its supervisor's part). The
controller-manager and scheduler that lose their leader lease meanwhile exit, as on a real control plane, and are
started again after each case.

A controller killed is ansible-playbook and every one of its workers (each in a session of its own), killed with
SIGKILL (k8sgpu_testlib.faults.kill_run). Inside the maintenance window, on a GPU host of its own (lab.sh node
--gpu-host: Docker and containerd under systemd, the toolkit from the lab's repository, no driver), upgrade.yml is
killed between the container toolkit's write of containerd's drop-in and its restart handler (issue 51): the resumed
window must restart containerd (what it runs with read from containerd itself, through its CRI API) before it gives
the Node back, and refuse to give it back while containerd runs the older configuration.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, LAB_NAME, LAB_STATE, ROOT, node_sh, run
from k8sgpu_testlib.control_plane import Component, ensure_running, wait_ready
from k8sgpu_testlib.faults import DOCKER_LOADED, containerd_runtime_line, kill_run, marked_env
from test_upgrade import flat
# Fixtures (apis, lab, nodes) and helpers of test_maintenance_safety.py.
from test_maintenance_safety import (  # noqa: F401  # pylint: disable=unused-import
    ANNOTATION,
    GPUS_ANNOTATION,
    HOST_GPUS_ANNOTATION,
    NS,
    apis,
    inventory,
    lab,
    node_state,
    nodes,
    resumed,
    running,
    upgrade,
    wait_for,
    workload,
)

RECORD = {ANNOTATION, GPUS_ANNOTATION, HOST_GPUS_ANNOTATION}


def start_playbook(args: list[str], log, env: dict | None = None) -> subprocess.Popen:
    """ansible-playbook ARGS in the background, its output in log, its processes marked (``proc.marker``) for kill()."""
    env, marker = marked_env({**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                              "K8SGPU_LAB_STATE": str(LAB_STATE), "PYTHONUNBUFFERED": "1", **(env or {})})
    with log.open("w") as out:
        proc = subprocess.Popen(["ansible-playbook", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    proc.marker = marker  # type: ignore[attr-defined]
    return proc


def kill(proc: subprocess.Popen) -> None:
    """The controller killed: ansible-playbook and each of its workers (SIGKILL)."""
    kill_run(proc, proc.marker)  # type: ignore[attr-defined]


def start(inv, *extra: str, playbook: str, log, env: dict | None = None) -> subprocess.Popen:
    return start_playbook(["-i", str(inv), playbook, "-e", "k8sgpu_install_driver=false",
                           "-e", "k8sgpu_install_container_toolkit=false", *extra], log, env)


def end_with_the_control_plane_back(proc: subprocess.Popen, core) -> None:
    """The run killed if it still runs; every control-plane process running (started again where a case stopped it
    or it exited) and the API server ready."""
    if proc.poll() is None:
        kill(proc)
    ensure_running()
    wait_ready(core)


def wait_for_text(log, text: str, timeout: float, after: str = "") -> bool:
    """Whether ``text`` shows in log within ``timeout`` seconds (after the first ``after``, where given)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        now = log.read_text()
        start = now.find(after) if after else 0
        if start >= 0 and text in now[start:]:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("playbook,extra", [
    ("playbooks/upgrade.yml", ()),
    ("playbooks/host.yml", ("-e", "k8sgpu_drain_before_restart=true")),
], ids=["upgrade", "host-drain"])
def test_controller_killed_between_cordon_and_uncordon(apis, nodes, tmp_path, playbook, extra):
    core, _apps, policy = apis
    suffix = "kill-" + ("up" if "upgrade" in playbook else "host")
    # A Node this collection is to maintain (as a stopped run leaves it, still schedulable, so that the cordon runs),
    # and one a person cordoned before the run.
    target = nodes(suffix, annotations=resumed())
    by_hand = nodes(suffix + "-hand", unschedulable=True)
    app = f"guarded-{suffix}"
    workload(apis, target, app)
    policy.create_namespaced_pod_disruption_budget(NS, {"metadata": {"name": app}, "spec": {
        "maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}}})
    running(core, target, 1)
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(app, NS).status.current_healthy == 1,
             "the budget to see its pod")
    inv = inventory(tmp_path, {"host-k": target, "host-h": by_hand})
    settings = ("-e", "k8sgpu_max_unavailable=2", "-e", "node_maintenance_drain_timeout=300", *extra)

    log = tmp_path / "killed.log"
    proc = start(inv, *settings, playbook=playbook, log=log)
    try:
        # Cordoned, the drain waiting on the budget: the controller dies there.
        wait_for(lambda: proc.poll() is None and node_state(core, target)[0], f"{target} cordoned by the run",
                 timeout=240)
        time.sleep(3)
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        kill(proc)
    unschedulable, annotations = node_state(core, target)
    assert unschedulable and RECORD <= set(annotations), annotations

    # The budget lets the pod go; a plain re-run resumes the window and gives the Node back.
    policy.delete_namespaced_pod_disruption_budget(app, NS)
    res = upgrade(inv, *settings, playbook=playbook)
    assert res.returncode == 0, res.stdout[-4000:]
    unschedulable, annotations = node_state(core, target)
    assert not unschedulable and not RECORD & set(annotations), annotations
    assert node_state(core, by_hand)[0] is True, "a Node cordoned by a person was uncordoned"
    # Once more: nothing left to do.
    again = upgrade(inv, *settings, playbook=playbook)
    assert again.returncode == 0 and recap(again.stdout).get("host-k", {}).get("changed") == 0, again.stdout[-3000:]
    assert node_state(core, by_hand)[0] is True


def test_api_server_paused_between_cordon_and_uncordon(apis, nodes, tmp_path):
    """kube-apiserver paused (SIGSTOP) while upgrade.yml's drain waits on a budget: the drain's request gives up after
    request_timeout (1 s here, K8SGPU_K8S_REQUEST_TIMEOUT) and, the API server back (SIGCONT), the run fails naming
    the host, the Node and the step; the budget lifted, a plain re-run gives the Node back. Before request_timeout
    the drain's request waited for ever (the kubernetes client has no timeout)."""
    core, _apps, policy = apis
    target = nodes("pause-up", annotations=resumed())
    app = "guarded-pause"
    workload(apis, target, app)
    policy.create_namespaced_pod_disruption_budget(NS, {"metadata": {"name": app}, "spec": {
        "maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}}})
    running(core, target, 1)
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(app, NS).status.current_healthy == 1,
             "the budget to see its pod")
    inv = inventory(tmp_path, {"host-p": target})
    settings = ("-e", "k8sgpu_max_unavailable=2", "-e", "node_maintenance_drain_timeout=300",
                "-e", "node_maintenance_drain_retry_delay=1")
    apiserver = Component("kube-apiserver")
    log = tmp_path / "paused.log"
    proc = start(inv, *settings, playbook="playbooks/upgrade.yml", log=log, env={"K8SGPU_K8S_REQUEST_TIMEOUT": "1"})
    try:
        wait_for(lambda: proc.poll() is None and node_state(core, target)[0], f"{target} cordoned by the run",
                 timeout=240)
        time.sleep(2)  # the drain retries the eviction the budget refuses
        apiserver.signal(signal.SIGSTOP)
        paused = time.monotonic()
        try:
            gave_up = wait_for_text(log, "Read timed out", timeout=30)
            took = time.monotonic() - paused
        finally:
            apiserver.signal(signal.SIGCONT)
        proc.wait(timeout=120)
    finally:
        end_with_the_control_plane_back(proc, core)
    out = flat(log.read_text())
    assert gave_up, f"the drain did not give up on the paused API server in 30 s: {out[-3000:]}"
    assert took < 8, took  # one eviction (POST, 1 s) or a read retried by urllib3 (4 x 1 s), after the retry delay
    assert proc.returncode != 0, out[-3000:]
    assert f"host-p (Node {target}): step 'drain' failed" in out, out[-3000:]
    assert "Read timed out" in out and f"Node {target} now: cordoned" in out, out[-3000:]
    unschedulable, annotations = node_state(core, target)
    assert unschedulable and RECORD <= set(annotations), annotations

    policy.delete_namespaced_pod_disruption_budget(app, NS)
    res = upgrade(inv, *settings)
    assert res.returncode == 0, res.stdout[-4000:]
    unschedulable, annotations = node_state(core, target)
    assert not unschedulable and not RECORD & set(annotations), annotations


# ---------------------------------------------------------------- killed inside the window, on a GPU host

WINDOW_HOST = f"{LAB_NAME}-fault-window"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
# The host's GPUs as node_maintenance and verify read them: none (no driver can load here), so the window's check
# asks for none back; the toolkit reads the lab's PCI bus of H100s.
NO_GPUS = "/tmp/k8sgpu-no-gpus"


@pytest.fixture
def window_host():
    """A GPU host as the gpu-host image has it (Docker and containerd running, no toolkit), removed at the end."""
    subprocess.run(["docker", "rm", "-f", "-v", WINDOW_HOST], capture_output=True, check=False)
    cp = run(["lab/lab.sh", "node", "--gpu-host", WINDOW_HOST, "bookworm"], timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    node_sh(WINDOW_HOST, f"mkdir -p {NO_GPUS}/bus/pci/devices")
    try:
        yield WINDOW_HOST
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", WINDOW_HOST], capture_output=True, check=False)


def window_inventory(tmp_path, node: str):
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"hosts": {WINDOW_HOST: {
            "k8sgpu_node_name": node, "ansible_connection": "community.docker.docker",
            "ansible_python_interpreter": "/usr/bin/python3", "driver_sysfs_root": NO_GPUS}}},
        "k8s_control_plane": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
    }}}))
    return tmp_path / "hosts.yml"


def test_controller_killed_in_the_window_between_containerds_drop_in_and_its_restart(
        apis, nodes, window_host, tmp_path):
    """upgrade.yml (the toolkit only) on a fresh GPU host: the window cordons its Node and the toolkit writes
    daemon.json and containerd's drop-in; the controller dies there, before the restart handler. A resumed window
    with restarts off (container_toolkit_restart=false) fails at the check, naming the host, containerd.service, the
    drop-in and the fix, and the Node stays cordoned; a plain re-run restarts Docker and containerd and gives the
    Node back with both on the nvidia runtime (as they say themselves); once more changes nothing. Today's code gave
    the Node back at once, containerd on runc."""
    core = apis[0]
    target = nodes("fault-window")
    inv = window_inventory(tmp_path, target)
    settings = ("-e", "k8sgpu_install_driver=false", "-e", "k8sgpu_max_unavailable=2")
    assert containerd_runtime_line(WINDOW_HOST).startswith("default=runc "), containerd_runtime_line(WINDOW_HOST)

    log = tmp_path / "killed.log"
    proc = start_playbook(["-i", str(inv), "playbooks/upgrade.yml", *settings], log)
    try:
        # The window's own pass of the toolkit (its plan ran the same tasks in check mode before the drain): the
        # banner of the task after the drop-in's.
        reached = wait_for_text(log, "TASK [k8sgpu.nvidia.container_toolkit : Set GPU isolation in the NVIDIA runtime's",
                                timeout=300, after="TASK [Step - container toolkit]")
    finally:
        kill(proc)
    text = log.read_text()
    assert reached, text[-3000:]
    unschedulable, annotations = node_state(core, target)
    assert unschedulable and RECORD <= set(annotations), annotations
    assert "nvidia" in node_sh(WINDOW_HOST, f"cat {DROP_IN}")
    assert containerd_runtime_line(WINDOW_HOST).startswith("default=runc "), containerd_runtime_line(WINDOW_HOST)

    def window(*extra: str) -> subprocess.CompletedProcess:
        return run(["ansible-playbook", "-i", str(inv), "playbooks/upgrade.yml", *settings, *extra],
                   env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})

    held = window("-e", "container_toolkit_restart=false")
    out = flat(held.stdout)
    assert held.returncode != 0, out[-3000:]
    assert f"{WINDOW_HOST} (Node {target}): step 'check the host (driver, vectorAdd on each GPU)' failed" in out, \
        out[-3000:]
    assert re.search(rf"containerd\.service \(started [^)]+\) runs an older configuration than [^;]*{DROP_IN}", out), \
        out[-3000:]
    assert "The Node stays cordoned" in out and "container_toolkit_restart: true" in out, out[-3000:]
    assert node_state(core, target)[0] is True
    assert containerd_runtime_line(WINDOW_HOST).startswith("default=runc ")

    res = window()
    assert res.returncode == 0, flat(res.stdout)[-4000:]
    unschedulable, annotations = node_state(core, target)
    assert not unschedulable and not RECORD & set(annotations), annotations
    assert containerd_runtime_line(WINDOW_HOST).startswith("default=nvidia "), containerd_runtime_line(WINDOW_HOST)
    assert node_sh(WINDOW_HOST, DOCKER_LOADED).startswith("nvidia "), node_sh(WINDOW_HOST, DOCKER_LOADED)
    again = window()
    assert again.returncode == 0 and recap(again.stdout).get(WINDOW_HOST, {}).get("changed") == 0, \
        flat(again.stdout)[-3000:]
    assert node_state(core, target)[0] is False


# ---------------------------------------------------------------- kube-apiserver killed during kubernetes.yml

SITE_LABEL = ("example.com/owner", "ml-platform")  # the site's own label on a GPU Node: never lost


def cluster_digest(core, apps) -> dict:
    """What kubernetes.yml manages, as the API server holds it: each lab Node's labels, taints, annotations and
    unschedulable flag; the device plugin's DaemonSet (spec) and ConfigMap (data) in kube-system."""
    digest = {}
    for node in core.list_node().items:
        if node.metadata.name.startswith(GPU_NODES[0].rsplit("-gpu-", 1)[0]):
            digest[f"node/{node.metadata.name}"] = {
                "labels": node.metadata.labels, "annotations": node.metadata.annotations,
                "taints": sorted(f"{t.key}={t.value}:{t.effect}" for t in node.spec.taints or []),
                "unschedulable": bool(node.spec.unschedulable)}
    for ds in apps.list_namespaced_daemon_set("kube-system").items:
        digest[f"daemonset/{ds.metadata.name}"] = client.ApiClient().sanitize_for_serialization(ds.spec)
    for cm in core.list_namespaced_config_map("kube-system").items:
        if cm.metadata.name.startswith("nvidia-device-plugin"):
            digest[f"configmap/{cm.metadata.name}"] = cm.data
    return digest


def kubernetes_yml(*extra: str) -> subprocess.CompletedProcess:
    return run(["ansible-playbook", "-i", "inventories/lab", "playbooks/kubernetes.yml", *extra],
               env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


def test_api_server_killed_during_kubernetes_yml(apis):
    """kubernetes.yml from a cluster without the device plugin: kube-apiserver killed when the run reaches the
    device plugin (the Nodes labelled already), so the run fails there, naming the task and the API server; started
    again, a plain re-run converges to the state of a run without the fault (cluster_digest), the site's own label
    kept. (kubernetes.yml's second run changing nothing: test_site.py.)"""
    core, apps, _policy = apis
    core.patch_node(GPU_NODES[0], {"metadata": {"labels": {SITE_LABEL[0]: SITE_LABEL[1]}}})
    try:
        reference = kubernetes_yml()
        assert reference.returncode == 0, reference.stdout[-4000:]
        expected = cluster_digest(core, apps)
        assert "daemonset/nvidia-device-plugin-daemonset" in expected, sorted(expected)

        apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
        apiserver = Component("kube-apiserver")
        log = LAB_STATE / "faults-k8s-apiserver-killed.log"
        proc = start_playbook(["-i", "inventories/lab", "playbooks/kubernetes.yml"], log)
        try:
            reached = wait_for_text(log, "TASK [k8sgpu.nvidia.device_plugin : ", timeout=120)
            apiserver.stop()
            proc.wait(timeout=120)
        finally:
            end_with_the_control_plane_back(proc, core)
        text = log.read_text()
        assert reached, text[-3000:]
        assert proc.returncode != 0, text[-3000:]
        failed = text[text.rfind("TASK [", 0, text.find("fatal: [")):]
        # The device plugin's task, or the private role k8s_apply's that applies its objects, names the host, the object
        # and the API server.
        assert failed.startswith(("TASK [k8sgpu.nvidia.device_plugin : ", "TASK [k8sgpu.nvidia.k8s_apply : ")), failed[:3000]
        assert "fatal: [localhost]" in failed and "nvidia-device-plugin" in failed, failed[:3000]
        assert "Connection refused" in failed and "127.0.0.1" in failed, failed[:3000]

        again = kubernetes_yml()
        assert again.returncode == 0, again.stdout[-4000:]
        assert cluster_digest(core, apps) == expected
        assert core.read_node(GPU_NODES[0]).metadata.labels.get(SITE_LABEL[0]) == SITE_LABEL[1]
    finally:
        ensure_running()
        core.patch_node(GPU_NODES[0], {"metadata": {"labels": {SITE_LABEL[0]: None}}})
