"""playbooks/upgrade.yml, the rolling upgrade (issue 12), on the lab with a change CI can afford.

Two node containers of the lab's recipe (lab/lab.sh node: Debian 12 and 13, systemd, Docker's restart policy) run
Debian's containerd, and map to the kwok Nodes k8sgpu-lab-gpu-1 and -2 (k8sgpu_node_name). The change rolled is a
container runtime setting (containerd's default runtime, container_toolkit_set_as_default), which rewrites the
containerd drop-in and restarts containerd. A Deployment with a PodDisruptionBudget runs on those Nodes; a watch of
the Nodes, started before each run, records how many were unschedulable at once. The containers, the Deployment and
the budget are removed at the end, and the Nodes given back as site.yml leaves them.
"""
from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from ansible_output import recap
from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run

HOSTS = {f"{LAB_NAME}-upgrade-1": ("bookworm", f"{LAB_NAME}-gpu-1"),
         f"{LAB_NAME}-upgrade-2": ("trixie", f"{LAB_NAME}-gpu-2")}
NODES = [node for _suite, node in HOSTS.values()]
H1, H2 = HOSTS
N1, N2 = NODES
NS, APP = "default", "k8sgpu-upgrade-test"
ANNOTATION = "k8sgpu.nvidia/cordoned-for-maintenance"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"


def sh(host: str, cmd: str, check: bool = True) -> str:
    return node_sh(host, cmd, check).strip()


def flat(out: str) -> str:
    """ansible-playbook's output with its YAML line wrapping undone."""
    return " ".join(out.split())


def containerd_start(host: str) -> str:
    return sh(host, "systemctl show -p ExecMainStartTimestampMonotonic --value containerd")


@pytest.fixture(scope="module")
def apis(kubeconfig):
    api = config.new_client_from_config(config_file=kubeconfig)
    return client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)


def give_back(core: client.CoreV1Api) -> None:
    for node in NODES:
        core.patch_node(node, {"spec": {"unschedulable": False}, "metadata": {"annotations": {ANNOTATION: None}}})


def delete_workload(apis) -> None:
    core, apps, policy = apis
    for call in (lambda: apps.delete_namespaced_deployment(APP, NS),
                 lambda: policy.delete_namespaced_pod_disruption_budget(APP, NS)):
        try:
            call()
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    for _attempt in range(60):
        if not core.list_namespaced_pod(NS, label_selector=f"app={APP}").items:
            return
        time.sleep(1)


@pytest.fixture(scope="module")
def inventory(tmp_path_factory, apis):
    """The two containers with containerd, the toolkit installed and configured (host.yml) as the baseline."""
    for host, (suite, _node) in HOSTS.items():
        cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", host, suite], capture_output=True, text=True,
                            check=False)
        assert cp.returncode == 0, cp.stderr
    proxy = (LAB_STATE / "apt-proxy-url").read_text().strip()
    installs = [subprocess.Popen(["docker", "exec", host, "sh", "-c",
                                  f"apt-get -q -o Acquire::http::Proxy={proxy} update >/dev/null && "
                                  f"DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::http::Proxy={proxy} "
                                  "install -y --no-install-recommends containerd >/dev/null"]) for host in HOSTS]
    assert [p.wait(timeout=600) for p in installs] == [0, 0]
    inv_dir = tmp_path_factory.mktemp("upgrade-inventory")
    (inv_dir / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
    hosts = {host: {"k8sgpu_node_name": node} for host, (_suite, node) in HOSTS.items()}
    (inv_dir / "hosts.yml").write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"hosts": hosts, "vars": {"ansible_connection": "community.docker.docker",
                                               "ansible_python_interpreter": "/usr/bin/python3"}},
        "k8s_control_plane": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
    }}}))
    res = playbook(inv_dir, "playbooks/host.yml")
    assert res.returncode == 0, res.stdout[-4000:]
    for host in HOSTS:
        assert 'default_runtime_name = "nvidia"' in sh(host, f"cat {DROP_IN}")
    yield inv_dir
    delete_workload(apis)
    give_back(apis[0])
    subprocess.run(["docker", "rm", "-f", *HOSTS], capture_output=True, check=False)


def playbook(inv_dir: Path, path: str, *extra: str) -> subprocess.CompletedProcess:
    # No GPU in the lab: the driver role would skip the toolkit (as host.yml does on hosts without a GPU).
    return run(["ansible-playbook", "-i", str(inv_dir / "hosts.yml"), path, "-e", "k8sgpu_install_driver=false",
                *extra], env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


class NodeWatch:
    """Unschedulable GPU Nodes over time, from the API's watch of the Nodes (started before a run)."""

    def __init__(self, core: client.CoreV1Api, nodes: list[str] | None = None):
        self.core, self.watch, self.nodes = core, watch.Watch(), nodes or NODES
        self.now: set[str] = {n.metadata.name for n in core.list_node().items
                              if n.metadata.name in self.nodes and n.spec.unschedulable}
        self.cordoned_before = set(self.now)
        self.ever: set[str] = set(self.now)
        self.most = len(self.now)
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        time.sleep(1)

    def _run(self) -> None:
        try:
            self._follow()
        except Exception:  # pylint: disable=broad-exception-caught # the stream ends when stop() closes it
            if not self.stopped:
                raise

    def _follow(self) -> None:
        # A stream ends after timeout_seconds: the next one resumes from the last resourceVersion seen (no gap).
        version = None
        while not self.stopped:
            for event in self.watch.stream(self.core.list_node, timeout_seconds=600, resource_version=version):
                node = event["object"]
                version = node.metadata.resource_version
                if node.metadata.name not in self.nodes:
                    continue
                if node.spec.unschedulable:
                    self.now.add(node.metadata.name)
                    self.ever.add(node.metadata.name)
                else:
                    self.now.discard(node.metadata.name)
                self.most = max(self.most, len(self.now))

    def stop(self) -> None:
        time.sleep(1)
        self.stopped = True
        self.watch.stop()


def deploy(apis, max_unavailable: int) -> None:
    core, apps, policy = apis
    labels = {"app": APP}
    apps.create_namespaced_deployment(NS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": NODES}]}]}}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                               "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": labels}}],
            }}}})
    policy.create_namespaced_pod_disruption_budget(NS, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": APP},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": labels}}})
    for _attempt in range(60):
        pods = running_pods(core)
        pdb = policy.read_namespaced_pod_disruption_budget(APP, NS)
        if len(pods) == 2 and pdb.status.current_healthy == 2:
            return
        time.sleep(1)
    pytest.fail(f"Deployment {APP} did not run 2 pods: {running_pods(core)}")


def running_pods(core) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(NS, label_selector=f"app={APP}").items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp}


def test_lab_node_reboot_is_a_container_restart(inventory):
    """The inventory's driver_reboot_boot_time_command and driver_reboot_command reboot a node container."""
    def count() -> str:
        return subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", H1], capture_output=True, text=True,
                              check=True).stdout.strip()

    before = count()
    res = run(["ansible", "-i", str(inventory / "hosts.yml"), H1, "-m", "ansible.builtin.reboot", "-a",
               "boot_time_command={{ driver_reboot_boot_time_command }} reboot_command={{ driver_reboot_command }} "
               "reboot_timeout=120"], env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})
    assert res.returncode == 0 and '"rebooted": true' in res.stdout.replace("rebooted: true", '"rebooted": true'), \
        res.stdout[-2000:]
    assert int(count()) == int(before) + 1
    assert sh(H1, "systemctl is-active containerd") == "active"


def test_rolling_runtime_change_one_node_at_a_time(inventory, apis):
    core = apis[0]
    deploy(apis, max_unavailable=1)
    pods_before = running_pods(core)
    started = {host: containerd_start(host) for host in HOSTS}
    nodes_watch = NodeWatch(core)
    try:
        res = playbook(inventory, "playbooks/upgrade.yml", "-e", "container_toolkit_set_as_default=false")
    finally:
        nodes_watch.stop()
    assert res.returncode == 0, res.stdout[-5000:]
    # One Node out of service at a time, each of them once, both back in service.
    assert nodes_watch.most == 1, (nodes_watch.most, nodes_watch.ever)
    assert nodes_watch.ever == set(NODES)
    assert not any(n.spec.unschedulable for n in core.list_node().items if n.metadata.name in NODES)
    assert not any(ANNOTATION in (n.metadata.annotations or {}) for n in core.list_node().items)
    # The change and its restart, on every host.
    for host in HOSTS:
        assert 'default_runtime_name = "nvidia"' not in sh(host, f"cat {DROP_IN}")
        assert containerd_start(host) != started[host], f"{host}: containerd was not restarted"
    # Every pod that ran on the Nodes was evicted, and the Deployment runs again in full.
    pods_after = running_pods(core)
    assert len(pods_after) == 2 and not set(pods_before) & set(pods_after), (pods_before, pods_after)
    assert "maintenance needed: container toolkit: /etc/containerd/conf.d/99-nvidia.toml would change" in flat(res.stdout)
    assert f"{H1} upgraded in drain " in flat(res.stdout), res.stdout[-3000:]
    print(re.findall(r"\S+ upgraded in .*? s(?=,? [A-Z])", flat(res.stdout)))

    started = {host: containerd_start(host) for host in HOSTS}
    again = playbook(inventory, "playbooks/upgrade.yml", "-e", "container_toolkit_set_as_default=false")
    assert again.returncode == 0, again.stdout[-4000:]
    assert all(s["changed"] == 0 for s in recap(again.stdout).values()), recap(again.stdout)
    assert "nothing to change, the Node stays in service" in flat(again.stdout)
    assert {host: containerd_start(host) for host in HOSTS} == started


def test_a_drain_that_times_out_stops_the_rollout(inventory, apis):
    core = apis[0]
    delete_workload(apis)
    deploy(apis, max_unavailable=0)
    nodes_watch = NodeWatch(core)
    try:
        res = playbook(inventory, "playbooks/upgrade.yml", "-e", "node_maintenance_drain_timeout=10",
                       "-e", "node_maintenance_drain_retry_delay=2")
    finally:
        nodes_watch.stop()
    assert res.returncode != 0
    assert f"{H1} (Node {N1}): step 'drain' failed" in flat(res.stdout), res.stdout[-4000:]
    assert f"PodDisruptionBudget {NS}/{APP} allows 0 disruptions" in flat(res.stdout), res.stdout[-4000:]
    assert "The Node stays cordoned and the rollout stops here" in flat(res.stdout)
    # The failed Node stays cordoned; the next batch was never started.
    assert core.read_node(N1).spec.unschedulable is True
    assert nodes_watch.ever == {N1}, nodes_watch.ever
    # H2 took part only in the play that checks the fleet's limit and each host's Node (1.1.0), changing nothing; the
    # batches never reached it.
    assert recap(res.stdout)[H2]["changed"] == 0 and recap(res.stdout)[H2]["failed"] == 0, recap(res.stdout)
    batches = res.stdout.split("PLAY [Upgrade - GPU nodes, one batch at a time]", 1)[1]
    assert f"[{H2}]" not in batches, batches[-4000:]
    assert 'default_runtime_name = "nvidia"' not in sh(H2, f"cat {DROP_IN}")

    # Fixed (the budget is gone), with N2 cordoned by someone else: the next run resumes N1 and leaves N2 cordoned.
    delete_workload(apis)
    core.patch_node(N2, {"spec": {"unschedulable": True}})
    resumed = playbook(inventory, "playbooks/upgrade.yml")
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    assert core.read_node(N1).spec.unschedulable is not True
    assert core.read_node(N2).spec.unschedulable is True
    assert f"{H2} (Node {N2}) was cordoned before this run (not by k8sgpu.nvidia) and stays cordoned" in flat(resumed.stdout)
    for host in HOSTS:
        assert 'default_runtime_name = "nvidia"' in sh(host, f"cat {DROP_IN}")
