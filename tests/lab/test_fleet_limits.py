"""Never the whole fleet by default, and one Node per GPU host (issue 34 items 5 and 8), on the lab.

- A run that asks for a batch larger than k8sgpu_max_unavailable, where it may take hosts out of service
  (driver_reboot=reboot, k8sgpu_drain_before_restart, playbooks/upgrade.yml), is refused before any host is touched:
  the lab's GPU hosts keep their boot and their runtimes' processes, no Node is cordoned.
- playbooks/host.yml without the drain, every host at once (its default): the container runtime restarts go one host
  at a time (k8sgpu_max_unavailable 1). The change rolled is the lab GPU hosts' runtime setting that
  tests/lab/test_upgrade.py rolls (container_toolkit_set_as_default=false rewrites containerd's drop-in and Docker's
  daemon.json), then rolled back; a systemd drop-in on the runtimes' units records when each stopped and was started
  again (its start held 2 s, so that two restarts at once would overlap for certain).
- The node_maintenance role's reboot, asked of two hosts in one play: one host at a time. Two node containers of the
  lab's recipe (lab/lab.sh node; a reboot is a container restart) are rebooted; Docker's record of each container's
  stop and start gives the time each was down.
- Two GPU hosts on one Node (a second inventory name reaching the lab's first GPU host: its uname -n is that Node) are
  refused before anything is changed, by playbooks/upgrade.yml (no Node cordoned) and playbooks/kubernetes.yml (no
  Node labelled).
"""
from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client, config

from ansible_output import recap
from conftest import GPU_NODES, LAB_NAME, LAB_STATE, ROOT, node_sh, run

G1, G2 = GPU_NODES  # the lab's GPU hosts: inventory name = container = uname -n = Node
RUNTIMES = ("containerd", "docker")
RECORD = "/var/lib/k8sgpu-test-restarts.log"
DROP_IN = "zz-k8sgpu-test-restarts.conf"
REBOOT_HOSTS = {f"{LAB_NAME}-fleet-1": ("bookworm", G1), f"{LAB_NAME}-fleet-2": ("trixie", G2)}


def flat(out: str) -> str:
    return " ".join(out.split())


@pytest.fixture(scope="module")
def core(kubeconfig):
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))


def lab_playbook(*args: str, inventory: str = "inventories/lab") -> subprocess.CompletedProcess:
    # No GPU driver work: the subject is the runtimes and the limit (the driver role is molecule's and test_driver_*).
    return run(["ansible-playbook", "-i", inventory, *args, "-e", "k8sgpu_install_driver=false"],
               env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


def host_state(host: str) -> dict:
    """The host's boot (PID 1's start) and each runtime's main process and start."""
    state = {"boot": node_sh(host, "cut -d' ' -f22 /proc/1/stat").strip()}
    for unit in RUNTIMES:
        state[unit] = node_sh(host, f"systemctl show -p MainPID -p ExecMainStartTimestampMonotonic --value {unit}").split()
    return state


def unschedulable(core) -> dict:
    return {n: bool(core.read_node(n).spec.unschedulable) for n in GPU_NODES}


# ---------------------------------------------------------------- a batch over the limit, refused

@pytest.mark.parametrize("args,why", [
    (["playbooks/host.yml", "-e", "driver_reboot=reboot", "-e", "k8sgpu_serial=2"], "driver_reboot is reboot"),
    (["playbooks/host.yml", "-e", "k8sgpu_drain_before_restart=true", "-e", "k8sgpu_serial=100%"],
     "k8sgpu_drain_before_restart is on"),
    (["playbooks/upgrade.yml", "-e", "k8sgpu_serial=2"], "every batch is drained, and rebooted where the driver needs it"),
], ids=["host-reboot", "host-drain", "upgrade"])
def test_a_batch_over_the_limit_is_refused_before_any_host_is_touched(core, args, why):
    before = {h: host_state(h) for h in GPU_NODES}
    cordoned = unschedulable(core)
    res = lab_playbook(*args)
    out = flat(res.stdout)
    assert res.returncode != 0, out[-3000:]
    serial = args[-1].split("=", 1)[1]
    assert (f"k8sgpu_serial is {serial} and k8sgpu_max_unavailable is 1: of the 2 GPU host(s) of this run a batch of 2 "
            f"could be rebooted or have its container runtimes restarted at once ({why}), where k8sgpu_max_unavailable "
            "allows 1. Set k8sgpu_serial to at most 1, or raise k8sgpu_max_unavailable to") in out, out[-3000:]
    assert "Nothing was changed." in out
    # The play that changes the hosts never started: no task ran on them, nothing changed on them.
    assert "PLAY [Host - NVIDIA driver" not in out and "PLAY [Upgrade - GPU nodes" not in out, out[-3000:]
    assert all(stats["changed"] == 0 for stats in recap(res.stdout).values()), recap(res.stdout)
    assert {h: host_state(h) for h in GPU_NODES} == before
    assert unschedulable(core) == cordoned


# ---------------------------------------------------------------- runtime restarts, one host at a time

def record_restarts(host: str) -> None:
    """A drop-in on each runtime's unit: the time it stopped and the time it was started again, in RECORD."""
    for unit in RUNTIMES:
        node_sh(host, f"mkdir -p /etc/systemd/system/{unit}.service.d && cat > /etc/systemd/system/{unit}.service.d/{DROP_IN} "
                      "<<'EOF'\n[Service]\n"
                      # %% and $$: systemd's escapes of % and $
                      f"ExecStopPost=/bin/sh -c 'echo {unit} stopped $$(date +%%s.%%N) >> {RECORD}'\n"
                      "ExecStartPre=/bin/sleep 2\n"
                      f"ExecStartPost=/bin/sh -c 'echo {unit} started $$(date +%%s.%%N) >> {RECORD}'\n"
                      "EOF")
    node_sh(host, f"rm -f {RECORD}; systemctl daemon-reload")


def forget_restarts(host: str) -> None:
    files = " ".join(f"/etc/systemd/system/{unit}.service.d/{DROP_IN}" for unit in RUNTIMES)
    node_sh(host, f"rm -f {files} {RECORD}; systemctl daemon-reload", check=False)


def down_times(host: str) -> list[tuple[float, float, str]]:
    """(stopped, started, unit) of each restart recorded on the host."""
    lines = [line.split() for line in node_sh(host, f"cat {RECORD} 2>/dev/null || true").splitlines() if line.strip()]
    out, stopped = [], {}
    for unit, what, when in lines:
        if what == "stopped":
            stopped[unit] = float(when)
        elif unit in stopped:
            out.append((stopped.pop(unit), float(when), unit))
    return out


def overlaps(a: list, b: list) -> list:
    return [(x, y) for x in a for y in b if x[0] < y[1] and y[0] < x[1]]


@pytest.fixture
def restarts_recorded():
    for host in GPU_NODES:
        record_restarts(host)
    try:
        yield
    finally:
        for host in GPU_NODES:
            forget_restarts(host)


def test_runtime_restarts_go_one_host_at_a_time(restarts_recorded):
    try:
        res = lab_playbook("playbooks/host.yml", "-e", "container_toolkit_set_as_default=false")
        assert res.returncode == 0, res.stdout[-4000:]
        changed = {h: down_times(h) for h in GPU_NODES}
        assert all(changed.values()), f"each host restarts a runtime: {changed}"
        assert not overlaps(changed[G1], changed[G2]), f"two hosts had a runtime restarting at once: {changed}"
    finally:
        for host in GPU_NODES:
            node_sh(host, f"rm -f {RECORD}")
        back = lab_playbook("playbooks/host.yml")
    # Rolled back: the same again, and the lab's GPU hosts as site.yml leaves them.
    assert back.returncode == 0, back.stdout[-4000:]
    restored = {h: down_times(h) for h in GPU_NODES}
    assert all(restored.values()) and not overlaps(restored[G1], restored[G2]), restored
    for host in GPU_NODES:
        assert 'default_runtime_name = "nvidia"' in node_sh(host, "cat /etc/containerd/conf.d/99-nvidia.toml")


# ---------------------------------------------------------------- the maintenance reboot, one host at a time

REBOOT_PLAY = """\
- name: The node_maintenance role's reboot on every host at once (serial 100%)
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Reboot
      ansible.builtin.include_role:
        name: k8sgpu.nvidia.node_maintenance
        tasks_from: reboot
"""


@pytest.fixture(scope="module")
def reboot_hosts(tmp_path_factory):
    """Two node containers of the lab's recipe (a reboot restarts the container), each mapped to a lab GPU Node."""
    for host, (suite, _node) in REBOOT_HOSTS.items():
        cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", host, suite], capture_output=True, text=True, check=False)
        assert cp.returncode == 0, cp.stderr
    work = tmp_path_factory.mktemp("fleet-reboot")
    (work / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
    (work / "hosts.yml").write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"hosts": {h: {"k8sgpu_node_name": node} for h, (_s, node) in REBOOT_HOSTS.items()},
                      "vars": {"ansible_connection": "community.docker.docker",
                               "ansible_python_interpreter": "/usr/bin/python3"}},
        "k8s_control_plane": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
    }}}))
    (work / "reboot.yml").write_text(REBOOT_PLAY)
    yield work
    subprocess.run(["docker", "rm", "-f", *REBOOT_HOSTS], capture_output=True, check=False)


def docker_times(host: str) -> tuple[float, float, int]:
    """When the container last stopped (FinishedAt) and started (StartedAt), and its restart count."""
    text = subprocess.run(["docker", "inspect", "-f", "{{.State.FinishedAt}} {{.State.StartedAt}} {{.RestartCount}}",
                           host], capture_output=True, text=True, check=True).stdout.split()

    def stamp(value: str) -> float:
        return datetime.fromisoformat(value[:26].rstrip("Z") + "+00:00").timestamp()

    return stamp(text[0]), stamp(text[1]), int(text[2])


def test_the_maintenance_reboot_goes_one_host_at_a_time(reboot_hosts):
    before = {h: docker_times(h)[2] for h in REBOOT_HOSTS}
    res = run(["ansible-playbook", "-i", str(reboot_hosts / "hosts.yml"), str(reboot_hosts / "reboot.yml")],
              env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})
    assert res.returncode == 0, res.stdout[-4000:]
    after = {h: docker_times(h) for h in REBOOT_HOSTS}
    assert all(after[h][2] == before[h] + 1 for h in REBOOT_HOSTS), (before, after)  # each rebooted once
    (down1, up1, _unused1), (down2, up2, _unused2) = after.values()
    assert up1 <= down2 or up2 <= down1, f"both hosts were down at once: {after}"


# ---------------------------------------------------------------- two hosts on one Node

def two_names_for_one_host(tmp_path: Path) -> Path:
    """The lab's first GPU host twice: as itself and as another inventory name reaching it (its uname -n is G1)."""
    (tmp_path / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"hosts": {G1: {}, "gpu-b.example.net": {"ansible_host": G1}},
                      "vars": {"ansible_connection": "community.docker.docker",
                               "ansible_python_interpreter": "/usr/bin/python3"}},
        "k8s_control_plane": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
    }}}))
    return tmp_path / "hosts.yml"


def test_two_gpu_hosts_on_one_node_are_refused_before_anything_changes(core, tmp_path):
    inv = str(two_names_for_one_host(tmp_path))
    label = "k8sgpu-test/fleet-names"
    before = unschedulable(core)
    for args in (["playbooks/upgrade.yml", "-e", "k8sgpu_install_container_toolkit=false"],
                 ["playbooks/kubernetes.yml", "-e",
                  json.dumps({"k8sgpu_deploy_device_plugin": False, "node_labels_labels": {label: "x"}})]):
        res = lab_playbook(*args, inventory=inv)
        out = flat(res.stdout)
        assert res.returncode != 0, out[-3000:]
        assert (f"Hosts {G1} and gpu-b.example.net map to one Kubernetes Node, {G1} ({G1}: uname -n, lowercased; "
                "gpu-b.example.net: uname -n, lowercased)") in out, out[-3000:]
        assert "Nothing was changed. Give each host its own Node: set k8sgpu_node_name" in out
        assert all(stats["changed"] == 0 for stats in recap(res.stdout).values()), recap(res.stdout)
    assert unschedulable(core) == before
    assert all(label not in (core.read_node(n).metadata.labels or {}) for n in GPU_NODES)
