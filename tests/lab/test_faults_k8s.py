"""Faults in the middle of the maintenance window (issue 36): the controller killed between cordon and uncordon.

On the lab's real API server, with kwok GPU Nodes and the throwaway host container of test_maintenance_safety.py
(whose fixtures and helpers this file uses): playbooks/upgrade.yml, and host.yml's drain path
(k8sgpu_drain_before_restart), are killed with SIGKILL while the drain of a cordoned Node waits on a
PodDisruptionBudget; a plain re-run, once the budget allows, must give the Node back (the maintenance record on the
Node tells it the cordon was this collection's), while a Node a person cordoned before the run stays cordoned.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from ansible_output import recap
from conftest import LAB_STATE, ROOT
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


def start(inv, *extra: str, playbook: str, log) -> subprocess.Popen:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "K8SGPU_LAB_STATE": str(LAB_STATE)}
    with log.open("w") as out:
        return subprocess.Popen(["ansible-playbook", "-i", str(inv), playbook, "-e", "k8sgpu_install_driver=false",
                                 "-e", "k8sgpu_install_container_toolkit=false", *extra],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


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
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
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
