from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._verify_node_result import verify_node_result
from ansible_collections.k8sgpu.nvidia.plugins.filter._verify_summary import verify_summary

UUID0 = "GPU-6f3a0b1c-2d4e-5f60-7182-93a4b5c6d7e8"
UUID1 = "GPU-00000000-1111-2222-3333-444444444444"


def gpu(index, uuid, passed=True, error=None, time_ms=0.61):
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": uuid, "pci_bus_id": f"0000:1{index}:00.0",
            "passed": passed, "error": error, "time_ms": time_ms}


# Registered results of the cuda_vector_add task, as the module returns them.
PASSED = {"changed": False, "passed": True, "gpus": [gpu(0, UUID0), gpu(1, UUID1, time_ms=0.5)]}
WRONG_RESULTS = {
    "failed": True, "passed": False,
    "msg": "vectorAdd failed on 1 of 2 GPU(s): GPU 1 (NVIDIA H100 80GB HBM3): 3 of 50000 elements wrong, first at index 7: "
           "0.5 + 0.25 gave 0.0, expected 0.75",
    "gpus": [gpu(0, UUID0), gpu(1, UUID1, passed=False, time_ms=0.7,
                                error="GPU 1 (NVIDIA H100 80GB HBM3): 3 of 50000 elements wrong, first at index 7: "
                                      "0.5 + 0.25 gave 0.0, expected 0.75")],
}
NO_DRIVER = {"failed": True, "passed": False, "gpus": [],
             "msg": "Cannot load the CUDA driver library libcuda.so.1 (libcuda.so.1: cannot open shared object file)"}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def test_node_result_passed():
    assert verify_node_result(PASSED) == {"status": "passed", "text": "passed on 2 GPU(s), 0.61/0.5 ms", "failures": []}


def test_node_result_names_each_failed_gpu_by_index_and_uuid():
    res = verify_node_result(WRONG_RESULTS)
    assert res["status"] == "failed" and res["text"] == "FAILED on 1 of 2 GPU(s)"
    assert res["failures"] == [f"GPU 1 (NVIDIA H100 80GB HBM3) {UUID1}: 3 of 50000 elements wrong, first at index 7: "
                               "0.5 + 0.25 gave 0.0, expected 0.75"]


def test_node_result_without_per_gpu_results_gives_the_modules_reason():
    res = verify_node_result(NO_DRIVER)
    assert res["status"] == "failed" and res["text"] == "FAILED"
    assert res["failures"] == [NO_DRIVER["msg"]]


def test_node_result_gpu_without_uuid_and_error():
    res = verify_node_result({"failed": True, "msg": "m", "gpus": [{"index": 2, "passed": False, "uuid": None, "error": None}]})
    assert res["failures"] == ["GPU 2: failed"]


def test_node_result_skipped():
    assert verify_node_result(SKIPPED) == {"status": "skipped", "text": "skipped (no GPU or driver)", "failures": []}


def test_node_result_rejects_other_input():
    with pytest.raises(AnsibleFilterError, match="registered result"):
        verify_node_result("passed")


def host(node_result, gpus=("NVIDIA H100 80GB HBM3",), driver="580.159.04", pci=1):
    return {"ansible_facts": {"nodename": "placeholder"}, "verify_host": {
        "gpus": list(gpus), "pci_devices": pci, "driver": driver, **_node(node_result)}}


def _node(result):
    r = verify_node_result(result)
    return {"node_test": r["text"], "node_test_status": r["status"], "node_test_failures": r["failures"]}


def hostvars():
    hv = {
        "gpu-a.example.net": host(PASSED, gpus=["NVIDIA H100 80GB HBM3"] * 2),
        "gpu-b.example.net": host(WRONG_RESULTS, gpus=["NVIDIA H100 80GB HBM3"] * 2),
        "gpu-c": host(NO_DRIVER, gpus=[], driver="not loaded", pci=0),
        "gpu-d": {"k8sgpu_node_name": "node-d"},  # failed or unreachable before its node-level result
    }
    hv["gpu-a.example.net"]["ansible_facts"]["nodename"] = "gpu-a"
    hv["gpu-b.example.net"]["ansible_facts"]["nodename"] = "GPU-B"
    hv["gpu-c"]["ansible_facts"]["nodename"] = "gpu-c"
    return hv


CLUSTER_OK = {"changed": False, "passed": True, "jobs": [
    {"node": "gpu-a", "status": "passed", "reason": "Test PASSED"},
    {"node": "gpu-b", "status": "passed", "reason": "Test PASSED"},
    {"node": "gpu-c", "status": "passed", "reason": "Test PASSED"},
]}


def test_summary_rows_and_failures():
    out = verify_summary(["gpu-a.example.net", "gpu-b.example.net", "gpu-c", "gpu-d"], hostvars(), CLUSTER_OK)
    lines = out["text"].splitlines()
    assert lines[0].split() == ["HOST", "NODE", "GPUS", "DRIVER", "NODE", "TEST", "IN", "CLUSTER"]
    row = {line.split()[0]: line for line in lines[1:] if not line.startswith(" ")}
    assert "2 x NVIDIA H100 80GB HBM3" in row["gpu-a.example.net"] and "passed on 2 GPU(s)" in row["gpu-a.example.net"]
    assert row["gpu-a.example.net"].rstrip().endswith("passed: Test PASSED")
    assert " gpu-b " in row["gpu-b.example.net"] and "FAILED on 1 of 2 GPU(s)" in row["gpu-b.example.net"]
    assert "0 in sysfs, no driver" in row["gpu-c"] and " FAILED " in row["gpu-c"]
    assert "not run (host failed or unreachable)" in row["gpu-d"] and " node-d " in row["gpu-d"]
    assert row["gpu-d"].rstrip().endswith("no result")
    # The reasons, one line per failed GPU under its host's row.
    assert f"    gpu-b.example.net: GPU 1 (NVIDIA H100 80GB HBM3) {UUID1}: 3 of 50000 elements wrong" in out["text"]
    assert f"    gpu-c: {NO_DRIVER['msg']}" in out["text"]
    assert out["failures"] == [
        f"gpu-b.example.net: node test FAILED: GPU 1 (NVIDIA H100 80GB HBM3) {UUID1}: 3 of 50000 elements wrong, "
        "first at index 7: 0.5 + 0.25 gave 0.0, expected 0.75",
        f"gpu-c: node test FAILED: {NO_DRIVER['msg']}",
    ]


def test_summary_cluster_failure_and_skip():
    failed = {"failed": True, "msg": "cuda-vector-add failed for 1 of 1 Job(s): gpu-a: timeout after 15 s: Unschedulable",
              "jobs": [{"node": "gpu-a", "status": "pending", "reason": "timeout after 15 s: Unschedulable: 0/5 nodes"}]}
    out = verify_summary(["gpu-a.example.net"], hostvars(), failed)
    assert "pending: timeout after 15 s: Unschedulable" in out["text"]
    assert out["failures"] == [f"in cluster: {failed['msg']}"]

    no_results = {"failed": True, "msg": "Could not create the cuda-vector-add Job in namespace default: forbidden"}
    out = verify_summary(["gpu-a.example.net"], hostvars(), no_results)
    assert "FAILED: Could not create the cuda-vector-add Job" in out["text"]

    skipped = {"skipped": True, "changed": False}
    out = verify_summary(["gpu-a.example.net"], hostvars(), skipped)
    assert out["text"].splitlines()[1].rstrip().endswith("not run") and out["failures"] == []


def test_summary_host_without_node_name():
    out = verify_summary(["gpu-x"], {"gpu-x": {}}, {"skipped": True})
    assert "gpu-x" in out["text"] and " ? " in out["text"]


def test_summary_says_what_a_host_without_a_loaded_driver_could_not_prove():
    """GPUs in sysfs, no driver loaded (the lab's node containers, a host waiting for its reboot): the node test is
    skipped, which is no failure, and the summary says plainly what was not proven; Jobs that completed without a log
    too."""
    hv = {name: host(SKIPPED, gpus=[], driver="not loaded", pci=8) for name in ("lab-1", "lab-2")}
    hv["lab-3"] = host(SKIPPED, gpus=[], driver="not loaded", pci=4)
    hv["ok"] = host(PASSED)
    for name, vars_ in hv.items():
        vars_["ansible_facts"]["nodename"] = name
    cluster = {"changed": False, "passed": True, "jobs": [
        {"node": "lab-1", "status": "completed_no_logs", "reason": "completed, logs unavailable"},
        {"node": "lab-2", "status": "completed_no_logs", "reason": "completed, logs unavailable"},
        {"node": "ok", "status": "passed", "reason": "Test PASSED"},
    ]}
    out = verify_summary(["lab-1", "lab-2", "lab-3", "ok"], hv, cluster)
    assert out["failures"] == []
    assert out["unproven"] == [
        "lab-3: 4 GPU(s) on the PCI bus, but no NVIDIA driver loaded: no vectorAdd ran on them, so neither the driver "
        "nor the GPUs are proven to work (the driver loads after a reboot; a host with no real GPU, as the lab's node "
        "containers, never loads it)",
        "lab-1, lab-2: 8 GPU(s) on the PCI bus, but no NVIDIA driver loaded: no vectorAdd ran on them, so neither the "
        "driver nor the GPUs are proven to work (the driver loads after a reboot; a host with no real GPU, as the "
        "lab's node containers, never loads it)",
        "lab-1, lab-2: in cluster, the Job's pod completed but its log, where cuda-vector-add writes 'Test PASSED', "
        "could not be read: the GPU was allocated and the pod ran, its result is not proven (a Node that runs no "
        "containers, as the lab's kwok Nodes, gives no logs)",
    ]
    lines = out["text"].splitlines()
    assert lines[-4] == "Not proven:" and lines[-3:] == [f"    {u}" for u in out["unproven"]]


def test_summary_with_everything_proven_has_no_not_proven_section():
    out = verify_summary(["gpu-a.example.net"], hostvars(), CLUSTER_OK)
    assert out["unproven"] == [] and "Not proven" not in out["text"]
    # A failed node test is a failure, not something unproven.
    out = verify_summary(["gpu-c"], hostvars(), CLUSTER_OK)
    assert out["unproven"] == [] and out["failures"]


def test_summary_shows_the_nvidia_module_of_every_installed_kernel():
    """Issue 45: the driver role's driver_result.kernels (one line per installed kernel) under the host's row."""
    hv = hostvars()
    hv["gpu-a.example.net"]["verify_host"]["kernels"] = [
        "6.1.0-50-amd64: ok - module nvidia-current 535.261.03 installed (running)",
        "6.12.57+deb12-amd64: no_headers - no headers, so DKMS cannot build the NVIDIA module of branch 535 (boots next)"]
    out = verify_summary(["gpu-a.example.net", "gpu-c"], hv, CLUSTER_OK)
    assert ("    gpu-a.example.net: NVIDIA module per kernel: 6.1.0-50-amd64 ok, 6.12.57+deb12-amd64 no_headers (no "
            "headers, so DKMS cannot build the NVIDIA module of branch 535 (boots next))") in out["text"].splitlines()
    # Reported, not a failure of verify (the driver role's reboot refusal is where it stops).
    assert "gpu-c: NVIDIA module per kernel" not in out["text"]
    assert out["failures"] == verify_summary(["gpu-a.example.net", "gpu-c"], hostvars(), CLUSTER_OK)["failures"]
