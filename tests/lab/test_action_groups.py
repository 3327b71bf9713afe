"""The action group k8sgpu.nvidia.k8s (meta/runtime.yml) against the lab's real API server.

A playbook sets the connection once, `module_defaults: group/k8sgpu.nvidia.k8s: {kubeconfig: ...}`, and both
kubernetes.core's modules (the group extends kubernetes.core.k8s) and the collection's own Kubernetes modules reach
the cluster with it. The control: the same play without module_defaults fails, so the kubeconfig can only have come
from the group (no KUBECONFIG, K8S_AUTH_* or ~/.kube/config in the environment the playbook runs in).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from conftest import GPU_NODES, ROOT

TASKS = [
    {"name": "kubernetes.core's module, through the group the collection's extends",
     "kubernetes.core.k8s_info": {"kind": "Node"}, "register": "nodes"},
    {"name": "The collection's modules (reads only)",
     "k8sgpu.nvidia.k8s_gpu_allocatable": {"names": GPU_NODES, "timeout": 0}, "register": "alloc"},
    {"k8sgpu.nvidia.k8s_nodes": {"names": GPU_NODES}, "check_mode": True, "register": "labels"},
    {"ansible.builtin.assert": {"that": [
        "nodes.resources | map(attribute='metadata.name') | intersect(gpu_nodes) | length == gpu_nodes | length",
        "alloc.allocatable.keys() | list | sort == gpu_nodes | sort",
        "labels is not changed"]}},
]


def _play(tmp_path: Path, kubeconfig: str | None) -> subprocess.CompletedProcess:
    play = {"name": "Connection through the action group", "hosts": "localhost", "connection": "local",
            "gather_facts": False, "tasks": TASKS,
            "vars": {"gpu_nodes": GPU_NODES, "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}
    if kubeconfig:
        play["module_defaults"] = {"group/k8sgpu.nvidia.k8s": {"kubeconfig": kubeconfig}}
    path = tmp_path / f"play-{'group' if kubeconfig else 'none'}.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("K8S_AUTH_")}
    env.update(HOME=str(home), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCAL_TEMP=str(home / "tmp"))
    return subprocess.run(["ansible-playbook", "-i", "localhost,", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_module_defaults_over_the_group_reach_every_kubernetes_module(kubeconfig, tmp_path):
    res = _play(tmp_path, kubeconfig)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "failed=0" in res.stdout


def test_without_module_defaults_the_same_play_finds_no_cluster(kubeconfig, tmp_path):
    res = _play(tmp_path, None)
    assert res.returncode != 0, "the play reached the cluster without the group's kubeconfig: the control is void"
    assert "No configuration found" in res.stdout and "failed=1" in res.stdout, res.stdout[-3000:]
