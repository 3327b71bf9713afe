"""node_maintenance's plan (playbooks/upgrade.yml's first step) on a host without the container toolkit (issue 12).

The plan asks the driver and container_toolkit roles what they would change, through each role's entry point `plan`
(tasks/plan.yml), which runs the role with `apply: check_mode: true`. Under that, ansible_check_mode stays false (it is the command line's --check only), so a
role that reads it acts as if it were applying: container_toolkit ran its apt install in check mode against a
repository its own check-mode pass had not written, and the plan (so the whole upgrade) failed on any host that did
not have the toolkit yet.

A fresh node container of the lab's recipe (lab/lab.sh node, Debian 12, no toolkit, no NVIDIA repository) and a kwok
Node of the same name (lab/topology.py's shape) are created for the test and removed at the end. The plan entry point
runs without --check, as upgrade.yml runs it; it must succeed, say the host needs maintenance because the toolkit is
to be installed, and leave the host as it was: no repository, no keyring, no package, /etc and dpkg's status alike.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run

sys.path.insert(0, str(ROOT / "lab"))
from topology import node as kwok_node  # noqa: E402  # pylint: disable=wrong-import-position

HOST = f"{LAB_NAME}-plan-1"
SOURCE = "/etc/apt/sources.list.d/k8sgpu-nvidia-container-toolkit.sources"
KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
PLAYBOOK = ROOT / "tests/lab/playbooks/maintenance_plan.yml"


def sh(cmd: str) -> str:
    return node_sh(HOST, cmd)


def host_state() -> dict[str, str]:
    """What a plan must not change: every file under /etc (path, size, mode, mtime) and dpkg's package list."""
    return {
        "etc": sh("find /etc -xdev -printf '%p %s %m %T@\\n' | sort"),
        "dpkg": sh("dpkg-query -W -f '${Package} ${Version} ${Status}\\n' | sort"),
    }


@pytest.fixture(scope="module")
def plan_host(tmp_path_factory, core: client.CoreV1Api):
    """The node container, its kwok Node and an inventory naming it; all removed at the end."""
    inv_dir = tmp_path_factory.mktemp("plan-inventory")
    try:
        cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", HOST, "bookworm"], capture_output=True, text=True,
                            check=False)
        assert cp.returncode == 0, cp.stderr
        try:
            core.delete_node(HOST)  # left by an interrupted run
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        core.create_node(kwok_node(HOST, {}, [], {"nvidia.com/gpu": "8"}))
        (inv_dir / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
        (inv_dir / "hosts.yml").write_text(json.dumps({"all": {"children": {
            "gpu_nodes": {"hosts": {HOST: {"k8sgpu_node_name": HOST}},
                          "vars": {"ansible_connection": "community.docker.docker",
                                   "ansible_python_interpreter": "/usr/bin/python3"}},
            "k8s_control_plane": {"hosts": {"localhost": {
                "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        }}}))
        (inv_dir / "plan.yml").write_text(PLAYBOOK.read_text(encoding="utf-8"))
        yield inv_dir
    finally:
        try:
            core.delete_node(HOST)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        subprocess.run(["docker", "rm", "-f", HOST], capture_output=True, check=False)


def test_plan_on_a_host_without_the_toolkit(plan_host: Path):
    """The plan runs the toolkit's install in check mode only, reports it, and changes nothing on the host."""
    assert sh(f"test ! -e {SOURCE} && test ! -e {KEYRING} && echo absent").strip() == "absent"
    before = host_state()
    plan_file = plan_host / "plan.json"
    res = run(["ansible-playbook", "-i", str(plan_host / "hosts.yml"), str(plan_host / "plan.yml"),
               "-e", f"plan_file={plan_file}"], env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    plan = json.loads(plan_file.read_text())
    assert plan["needed"] is True, plan
    assert "container toolkit: to install" in plan["reasons"], plan
    assert f"{HOST} (Node {HOST}): maintenance needed: container toolkit: to install" in " ".join(res.stdout.split())
    # Nothing written: the repository, its keyring, a package, any file under /etc.
    assert sh(f"test ! -e {SOURCE} && test ! -e {KEYRING} && echo absent").strip() == "absent"
    after = host_state()
    assert after["dpkg"] == before["dpkg"]
    assert after["etc"] == before["etc"]
    assert "nvidia-container-toolkit" not in after["dpkg"]
