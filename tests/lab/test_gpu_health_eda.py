"""The rulebook k8sgpu.nvidia.gpu_health (extensions/eda/rulebooks/gpu_health.yml, issue 39 item 3) end to end in the
lab: GPU alerts that act.

    DCGM stand-in (an Xid series on one GPU of one Node) -> real Prometheus evaluating the gpu_alerts role's rules ->
    real Alertmanager (built from the Go module proxy) with the receiver the rulebook documents -> ansible-rulebook
    (PyPI, requirements-eda.txt) with ansible.eda's alertmanager source (../shared/collections) -> ansible-playbook
    k8sgpu.nvidia.health on the lab's GPU hosts and Nodes

The fault is injected on both sides, as a real one shows: the Xid series in the exporter's metrics, and on the lab GPU
host the kernel-log line the driver writes (Xid 79, the GPU fallen off the bus; the host's nvidia-smi stand-in still
shows the H100's healthy output). Clearing it: the series back to 0 and the kernel log emptied (what a reboot does).
The policy is quarantine, k8sgpu_max_unavailable 1, set in the inventory the rulebook is given (group_vars), with the
stand-ins of test_gpu_health.py (its fixture `hosts`).

One test, in order: GPU 1's fault -> its Node tainted, then cordoned and drained (its pod evicted); GPU 2's fault while
GPU 1 is out -> tainted, waiting (not cordoned); GPU 1's fault cleared -> the resolved alert's run returns GPU 1
(vectorAdd through the CUDA stand-in, uncordoned) and, in the same run, takes GPU 2 out; GPU 2's fault cleared -> back.
Throughout: never two Nodes out at once, never two playbook runs at once, and the two GPUs of GPU 1 that fail
together start one run. The times from injection to taint and to drain, beside the floor (the alert's `for`,
Prometheus's scrape and evaluation intervals, Alertmanager's group_wait), are printed and appended to
$K8SGPU_LAB_STATE/eda-figures.jsonl (docs/benchmarks.md); nothing is asserted on them.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, node_sh
from k8sgpu_testlib.gpu_health_lab import HDIR, TAINT, AlertChain, is_state, missing, state
from k8sgpu_testlib.monitoring_lab import http, wait_for
# hosts and lab: test_gpu_health's fixtures, used by name.
from test_gpu_health import NS, hosts, lab, workload  # noqa: F401 # pylint: disable=unused-import
from test_upgrade import NodeWatch

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "-")

GPU1, GPU2 = GPU_NODES


@pytest.fixture(scope="module")
def chain(hosts, core, tmp_path_factory):  # noqa: F811 (hosts: the fixture imported above)
    """The chain (k8sgpu_testlib.gpu_health_lab.AlertChain) with the site's settings: the stand-ins' variables,
    policy quarantine, k8sgpu_max_unavailable 1. Alertmanager and Prometheus: LATE_BUILDS in conftest.py."""
    site = {**json.loads(Path(hosts).read_text()), "gpu_health_policy": "quarantine", "k8sgpu_max_unavailable": 1}
    alerts = AlertChain(tmp_path_factory.mktemp("gpu-health-eda"), site, core)
    try:
        yield alerts.start()
    finally:
        alerts.stop()


def test_gpu_alerts_take_a_node_out_and_bring_it_back_one_at_a_time(chain, lab, core):  # noqa: F811
    # A forged alert straight to the source (it has no authentication), whose node label is a template or not a Node
    # name: no run (the label would reach the playbook as an extra variable, which Ansible renders).
    forged = [{"status": "firing", "labels": {"alertname": "GPUXidError", "node": node}}
              for node in ("{{ lookup('ansible.builtin.pipe', 'touch /tmp/k8sgpu-eda-forged') }}", "GPU_1", "-gpu")]
    http(f"http://127.0.0.1:{chain.eda_port}/alerts", {"alerts": forged})
    time.sleep(3)
    assert not chain.runs(), chain.rulebook.log.read_text()[-3000:]

    pod = workload(core, GPU1)
    watch = NodeWatch(core, GPU_NODES)
    try:
        # GPU 1: two of its GPUs fail together (two alerts in one notification): tainted, then drained.
        chain.inject(GPU1, gpus=(0, 1))
        wait_for("GPU 1's Node tainted", lambda: TAINT in state(core, GPU1)[1], 300, interval=0.2)
        wait_for("GPU 1's Node cordoned and drained, recorded quarantined", lambda: is_state(core, GPU1, "quarantined"), 300, interval=0.2)
        assert state(core, GPU1)[1][TAINT] == "needs_reboot:NoSchedule"
        assert pod not in [p.metadata.name for p in core.list_namespaced_pod(NS).items
                           if not p.metadata.deletion_timestamp]
        wait_for("the run to end", chain.idle, 120)
        assert len(chain.runs()) == 1, chain.rulebook.log.read_text()[-4000:]

        # GPU 2 fails while GPU 1 is out: tainted at once, waits for the fleet's limit (not cordoned).
        chain.inject(GPU2)
        wait_for("GPU 2's Node tainted and recorded waiting", lambda: is_state(core, GPU2, "waiting", cordoned=False), 300, interval=0.2)
        assert not state(core, GPU2)[0], "GPU 2's Node is not cordoned while GPU 1's is out"

        # GPU 1's fault cleared: the resolved alert's run returns it, then takes GPU 2 out in the same run.
        chain.clear(GPU1, gpus=(0, 1))
        wait_for("GPU 1's Node back in service", lambda: is_state(core, GPU1, "returned", cordoned=False, tainted=False), 300, interval=0.2)
        wait_for("GPU 2's Node cordoned and drained, recorded quarantined", lambda: is_state(core, GPU2, "quarantined"), 300, interval=0.2)

        # GPU 2's fault cleared: back in service.
        chain.clear(GPU2)
        wait_for("GPU 2's Node back in service", lambda: is_state(core, GPU2, "returned", cordoned=False, tainted=False), 300, interval=0.2)
        wait_for("the runs to end", chain.idle, 120)
    finally:
        watch.stop()
        client.AppsV1Api(core.api_client).delete_namespaced_deployment("gpu-work", NS)
        chain.standin.reset()
        for node in GPU_NODES:
            node_sh(node, f": > {HDIR}/kernel.log", check=False)

    assert watch.most == 1 and watch.ever == {GPU1, GPU2}, (watch.most, watch.ever)
    runs = chain.runs()
    assert all(rc == "0" for _start, _end, rc in runs), chain.rulebook.log.read_text()[-6000:]
    # One run at a time: each starts after the one before it ended.
    assert all(later[0] >= earlier[1] for earlier, later in zip(runs, runs[1:])), runs
    # GPU 1 firing, GPU 2 firing, GPU 1 resolved, GPU 2 resolved: four runs (a repeat would be a fifth).
    assert len(runs) == 4, runs
    # The last run (GPU 2 resolved) read GPU 1 again, returned by the run before: left as it is.
    last = chain.rulebook.log.read_text().rsplit("Calling Ansible runner", 1)[1]
    assert recap(last)[GPU1]["changed"] == 0, last[-3000:]
