"""The main job, ansible-playbook site.yml -i inventories/lab, against the lab."""
from __future__ import annotations

import re

from ansible_output import recap
from conftest import GPU_NODES


def test_site_runs_and_a_second_run_changes_nothing(playbook):
    first = playbook("site.yml")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    res = playbook("site.yml")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    stats = recap(res.stdout)
    assert set(stats) == {*GPU_NODES, "localhost"}, stats
    assert all(s["failed"] == 0 and s["unreachable"] == 0 and s["changed"] == 0 for s in stats.values()), stats
    assert "Every host of group gpu_nodes has a Node" in res.stdout
    assert "0 NVIDIA GPU(s) in sysfs" in res.stdout and "driver not loaded" in res.stdout
    assert re.search(r"k8sgpu-lab-gpu-1\s+Ready\s+gpus=8", res.stdout), res.stdout[-3000:]


def test_site_in_check_mode(playbook):
    res = playbook("site.yml", "--check", "--diff")
    assert res.returncode == 0, res.stdout[-4000:]
    assert all(s["changed"] == 0 for s in recap(res.stdout).values())


def test_missing_node_fails_naming_host_and_node(playbook):
    res = playbook("site.yml", "-e", "k8sgpu_node_name=no-such-node")
    assert res.returncode != 0
    assert f"{GPU_NODES[0]} (looked for Node 'no-such-node')" in res.stdout, res.stdout[-3000:]


def test_missing_node_only_reported_when_not_required(playbook):
    res = playbook("playbooks/preflight.yml", "-e", "k8sgpu_node_name=no-such-node", "-e", "preflight_require_nodes=false")
    assert res.returncode == 0, res.stdout[-3000:]


def test_gpu_required_fails_on_hosts_without_gpus(playbook):
    res = playbook("site.yml", "-e", "preflight_gpu_required=true")
    assert res.returncode != 0
    for node in GPU_NODES:
        assert f"{node}: no NVIDIA GPU in /sys/bus/pci/devices" in res.stdout, res.stdout[-3000:]


def test_unsupported_os_fails_with_a_clear_message(playbook):
    res = playbook("site.yml", "-e", '{"preflight_supported_os": ["Debian 12"]}')
    assert res.returncode != 0
    assert f"{GPU_NODES[1]}: Debian 13 is not supported by k8sgpu.nvidia" in res.stdout, res.stdout[-3000:]
