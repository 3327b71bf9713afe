"""k8s_gpu_verify and playbooks/verify.yml against the lab's real scheduler and Job controller (kwok nodes)."""
from __future__ import annotations

import json

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, LAB_NAME, LAB_STATE, run

SUMMARY_COLUMNS = ["HOST", "NODE", "GPUS", "DRIVER", "NODE TEST", "IN CLUSTER"]


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
    assert [r["node"] for r in out["jobs"]] == GPU_NODES
    for r in out["jobs"]:
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
    bad, good = out["jobs"]
    assert bad["status"] == "pending" and "Insufficient nvidia.com/gpu" in bad["reason"], bad
    assert bad["reason"].startswith("timeout after 15 s")
    assert good["status"] == "completed_no_logs"
    assert f"{LAB_NAME}-cpu-1: timeout after 15 s: Unschedulable" in out["msg"]
    assert _leftover_jobs(core) == []


@pytest.fixture
def only_gpu_nodes_labelled(core):
    """A label on the lab's GPU nodes alone, so the scheduler's message has known counts."""
    key = "k8sgpu-test/verify-more-gpus"
    for n in GPU_NODES:
        core.patch_node(n, {"metadata": {"labels": {key: "true"}}})
    yield {key: "true"}
    for n in GPU_NODES:
        core.patch_node(n, {"metadata": {"labels": {key: None}}})


def test_more_gpus_than_any_node_has(only_gpu_nodes_labelled):
    rc, out = verify({"gpus": 1000, "node_selector": only_gpu_nodes_labelled, "require_logs": False, "timeout": 10})
    assert rc != 0
    res = out["jobs"][0]
    assert res["status"] == "pending" and res["reason"].startswith("timeout after 10 s: Unschedulable: "), res
    # Both GPU nodes match the selector and have too few GPUs; every other node is rejected by the selector.
    assert f"{len(GPU_NODES)} Insufficient nvidia.com/gpu" in res["reason"], res


def test_check_mode_creates_nothing(core):
    rc, out = verify({"per_node": True, "nodes": GPU_NODES, "timeout": 60}, "--check")
    assert rc == 0 and out["jobs"][0]["status"] == "not_run"
    assert _leftover_jobs(core) == []


def summary_table(stdout: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The verify summary printed by the play: {host: {column: value}} and the reason lines under the rows."""
    lines = stdout.splitlines()
    headers = [i for i, line in enumerate(lines) if line.split()[:3] == ["HOST", "NODE", "GPUS"]]
    assert len(headers) == 1, f"expected one summary table, found {len(headers)}: {stdout[-3000:]}"
    header = lines[headers[0]]
    indent = len(header) - len(header.lstrip())
    starts, pos = [], 0
    for title in SUMMARY_COLUMNS:
        pos = header.index(title, pos)
        starts.append(pos)
        pos += len(title)
    rows, details = {}, []
    for line in lines[headers[0] + 1:]:
        if not line.strip() or len(line) - len(line.lstrip()) < indent or line.strip() == "Not proven:":
            break
        if line[indent:indent + 4] == "    ":
            details.append(line.strip())
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows[cells[0]] = dict(zip(SUMMARY_COLUMNS, cells))
    return rows, details


def not_proven(stdout: str) -> list[str]:
    """The lines of the summary's "Not proven:" section."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Not proven:"]
    if not starts:
        return []
    indent = len(lines[starts[0]]) - len(lines[starts[0]].lstrip()) + 4
    out = []
    for line in lines[starts[0] + 1:]:
        if len(line) - len(line.lstrip()) < indent or not line.strip():
            break
        out.append(line.strip())
    return out


def test_verify_playbook_prints_one_summary(playbook):
    res = playbook("playbooks/verify.yml")
    assert res.returncode == 0, res.stdout[-4000:]
    rows, details = summary_table(res.stdout)
    assert sorted(rows) == sorted(GPU_NODES) and details == []
    for node in GPU_NODES:
        row = rows[node]
        assert row["NODE"] == node
        # The lab's GPU hosts have eight GPUs on their PCI bus (lab.sh's sysfs tree) and no driver that could load.
        assert row["GPUS"] == "8 in sysfs, no driver" and row["DRIVER"] == "not loaded", row
        assert row["NODE TEST"] == "skipped (no GPU or driver)"
        assert row["IN CLUSTER"].startswith("completed_no_logs: completed, logs unavailable"), row
    # What the lab could not prove is said plainly under the table, and is no failure.
    hosts = ", ".join(GPU_NODES)
    unproven = not_proven(res.stdout)
    assert len(unproven) == 2, res.stdout[-3000:]
    assert unproven[0].startswith(f"{hosts}: 8 GPU(s) on the PCI bus, but no NVIDIA driver loaded: no vectorAdd ran "
                                  "on them, so neither the driver nor the GPUs are proven to work"), unproven
    assert unproven[1].startswith(f"{hosts}: in cluster, the Job's pod completed but its log"), unproven


def test_failed_node_test_shows_failed_with_its_reason_and_fails_the_play_after_the_summary(playbook):
    # The lab's nodes have no NVIDIA driver: told to test GPU 0, cuda_vector_add fails to load libcuda.so.1.
    res = playbook("playbooks/verify.yml", "-e", json.dumps({"verify_node_devices": [0], "verify_in_cluster": False}))
    assert res.returncode != 0
    rows, details = summary_table(res.stdout)
    for node in GPU_NODES:
        assert rows[node]["NODE TEST"] == "FAILED", rows[node]
        assert rows[node]["IN CLUSTER"] == "not run"
        assert any(d.startswith(f"{node}: Cannot load the CUDA driver library libcuda.so.1") for d in details), details
    # The summary first, then the play fails naming each failure.
    summary_at = res.stdout.index("IN CLUSTER")
    failed_at = res.stdout.index("GPU verification failed: ")
    assert summary_at < failed_at
    message = " ".join(res.stdout[failed_at:].split())
    for node in GPU_NODES:
        assert f"{node}: node test FAILED: Cannot load the CUDA driver library libcuda.so.1" in message
    assert recap(res.stdout)["localhost"]["failed"] == 1
