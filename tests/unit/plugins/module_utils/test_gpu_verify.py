from __future__ import annotations

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gpu_verify import job_manifest, run_finished, verdict

LOG_OK = "[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA device\nTest PASSED\nDone\n"
DONE = {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
FAILED = {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                                  "message": "Job has reached the specified backoff limit"}]}}
RUNNING: dict = {"status": {"active": 1}}


def pod(phase="Pending", waiting=None, terminated=None, scheduled=None):
    cs = []
    if waiting:
        cs = [{"state": {"waiting": waiting}}]
    if terminated:
        cs = [{"state": {"terminated": terminated}}]
    conds = [scheduled] if scheduled else []
    return {"metadata": {"name": "p1"}, "status": {"phase": phase, "containerStatuses": cs, "conditions": conds}}


def test_manifest_pins_by_node_name_and_requests_gpus():
    job = job_manifest("j", "default", "r1", "img:1", 2, "gpu-1", {"gpu": "true"}, [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                       120, "nvidia", ["regcred"], None)
    spec = job["spec"]["template"]["spec"]
    # Pinned by the Node's name (metadata.name), as the DaemonSet controller does: the kubernetes.io/hostname label
    # is the kubelet's hostname, which differs from the Node name under --hostname-override or a cloud provider.
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}}
    assert spec["nodeSelector"] == {"gpu": "true"}
    assert "nodeName" not in spec  # the scheduler must still check capacity and taints
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert spec["runtimeClassName"] == "nvidia" and spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 180
    assert job["spec"]["template"]["metadata"]["labels"]["k8sgpu.nvidia/verify-run"] == "r1"


def test_manifest_unpinned_has_no_affinity():
    spec = job_manifest("j", "default", "r1", "img:1", 1, None, {}, [], 60, None, [], None)["spec"]["template"]["spec"]
    assert "affinity" not in spec and "nodeSelector" not in spec


def test_passed_needs_the_mark_in_the_log():
    assert verdict(DONE, pod("Succeeded"), LOG_OK, [])["status"] == "passed"
    res = verdict(DONE, pod("Succeeded"), "Done\n", [])
    assert res["status"] == "failed" and "no 'Test PASSED'" in res["reason"]


def test_no_logs_is_never_passed():
    res = verdict(DONE, pod("Succeeded"), None, [])
    assert res["status"] == "completed_no_logs" and res["passed"] is None
    assert res["reason"].startswith("completed, logs unavailable")


def test_insufficient_gpu_from_pod_condition():
    sched = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."}
    res = verdict(RUNNING, pod(scheduled=sched), None, [])
    assert res["status"] == "pending" and "Insufficient nvidia.com/gpu" in res["reason"]


def test_insufficient_gpu_from_events():
    ev = [{"reason": "FailedScheduling", "message": "0/5 nodes are available: 3 Insufficient nvidia.com/gpu."}]
    assert "Insufficient nvidia.com/gpu" in verdict(RUNNING, pod(), None, ev)["reason"]


def test_image_pull_backoff():
    res = verdict(RUNNING, pod(waiting={"reason": "ImagePullBackOff", "message": "Back-off pulling image"}), None, [])
    assert res["reason"] == "ImagePullBackOff: Back-off pulling image"


def test_driver_too_old():
    log = "Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime version)!\n"
    res = verdict(FAILED, pod("Failed", terminated={"exitCode": 1, "reason": "Error"}), log, [])
    assert res["status"] == "failed" and "CUDA driver version is insufficient" in res["reason"]


def test_container_exit_code():
    res = verdict(FAILED, pod("Failed", terminated={"exitCode": 139, "reason": "Error"}), "Segmentation fault", [])
    assert res["reason"] == "container exited 139: Error"


def test_job_past_its_deadline_still_says_why_the_pod_never_ran():
    deadline = {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                                        "message": "Job was active longer than specified deadline"}]}}
    sched = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."}
    res = verdict(deadline, pod(scheduled=sched), None, [])
    assert res["status"] == "failed"
    assert res["reason"].startswith("DeadlineExceeded") and "Insufficient nvidia.com/gpu" in res["reason"]


def test_a_job_is_finished_when_its_pod_has_ended_before_the_job_controller_says_so():
    # The Job controller batches pod updates (about 1 s): the pod's terminal phase decides first.
    assert run_finished(RUNNING, pod("Running")) is None
    assert run_finished(RUNNING, pod("Pending")) is None
    assert run_finished(RUNNING, None) is None
    assert run_finished(RUNNING, pod("Succeeded")) == "succeeded"
    assert run_finished(RUNNING, pod("Failed", terminated={"exitCode": 1})) == "failed"
    assert run_finished(DONE, None) == "succeeded"
    assert run_finished(FAILED, pod("Running")) == "failed"


def test_pod_ended_before_the_job_is_judged_as_the_job():
    assert verdict(RUNNING, pod("Succeeded"), LOG_OK, [])["status"] == "passed"
    assert verdict(RUNNING, pod("Succeeded"), None, [])["status"] == "completed_no_logs"
    res = verdict(RUNNING, pod("Succeeded"), "Done\n", [])
    assert res["status"] == "failed" and res["passed"] is False
    res = verdict(RUNNING, pod("Failed", terminated={"exitCode": 139, "reason": "Error"}), "Segmentation fault", [])
    assert res["status"] == "failed" and "exited 139" in res["reason"]


def test_pod_failed_without_a_terminated_container_says_why():
    evicted = pod("Failed")
    evicted["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    res = verdict(RUNNING, evicted, None, [])
    assert res["status"] == "failed"
    assert res["reason"].startswith("Evicted: The node was low on resource: memory.")
