"""k8s_gpu_verify and playbooks/verify.yml against the lab's real scheduler and Job controller (kwok nodes)."""
from __future__ import annotations

import json

from kubernetes import client

from conftest import GPU_NODES, LAB_NAME, LAB_STATE, run


def verify(args: dict, *extra: str) -> tuple[int, dict]:
    """Run the module ad hoc on localhost; returns (rc, module result)."""
    res = run(["ansible", "localhost", "-i", "inventories/lab", "-m", "k8sgpu.nvidia.k8s_gpu_verify",
               "-a", json.dumps({"kubeconfig": str(LAB_STATE / "kubeconfig"), **args}), *extra],
              env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    data = json.loads(res.stdout)
    return res.returncode, data["plays"][0]["tasks"][0]["hosts"]["localhost"]


def _leftover_jobs(core) -> list:
    batch = client.BatchV1Api(core.api_client)
    return [j.metadata.name for j in batch.list_namespaced_job("default", label_selector="k8sgpu.nvidia/verify-run").items
            if not j.metadata.deletion_timestamp]


def test_jobs_complete_on_each_gpu_node_but_never_claim_passed_without_logs(core):
    rc, out = verify({"per_node": True, "nodes": GPU_NODES, "require_logs": False, "timeout": 60})
    assert rc == 0, out.get("msg")
    assert out["passed"] is True and not out["changed"]
    assert [r["node"] for r in out["results"]] == GPU_NODES
    for r in out["results"]:
        assert r["status"] == "completed_no_logs" and r["passed"] is None
        assert r["reason"].startswith("completed, logs unavailable")
        assert "Test PASSED" not in json.dumps(r)
    assert _leftover_jobs(core) == []


def test_missing_logs_fail_when_required():
    rc, out = verify({"per_node": True, "nodes": GPU_NODES[:1], "timeout": 60})
    assert rc != 0
    assert "completed, logs unavailable" in out["msg"]


def test_node_without_gpus_stays_pending_as_insufficient_gpu(core):
    rc, out = verify({"per_node": True, "nodes": [f"{LAB_NAME}-cpu-1", GPU_NODES[0]], "require_logs": False, "timeout": 15})
    assert rc != 0
    bad, good = out["results"]
    assert bad["status"] == "pending" and "Insufficient nvidia.com/gpu" in bad["reason"], bad
    assert bad["reason"].startswith("timeout after 15 s")
    assert good["status"] == "completed_no_logs"
    assert f"{LAB_NAME}-cpu-1: timeout after 15 s: Unschedulable" in out["msg"]
    assert _leftover_jobs(core) == []


def test_more_gpus_than_any_node_has():
    rc, out = verify({"gpus": 1000, "node_selector": {"gpu": "true"}, "require_logs": False, "timeout": 10})
    assert rc != 0
    assert "Insufficient nvidia.com/gpu" in out["results"][0]["reason"] or "didn't match" in out["results"][0]["reason"], out


def test_check_mode_creates_nothing(core):
    rc, out = verify({"per_node": True, "nodes": GPU_NODES, "timeout": 60}, "--check")
    assert rc == 0 and out["results"][0]["status"] == "not_run"
    assert _leftover_jobs(core) == []


def test_verify_playbook_prints_one_summary(playbook):
    res = playbook("playbooks/verify.yml")
    assert res.returncode == 0, res.stdout[-4000:]
    assert "NODE TEST" in res.stdout and "IN CLUSTER" in res.stdout
    for node in GPU_NODES:
        assert f"{node}" in res.stdout
    assert "skipped (no GPU or driver)" in res.stdout
    assert "completed_no_logs: completed, logs unavailable" in res.stdout
