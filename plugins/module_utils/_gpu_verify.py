# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the in-cluster cuda-vector-add check as Kubernetes Jobs.

Pure functions (manifests, verdicts from pod status, events and logs) for unit
tests; the module does the API calls.
"""
from __future__ import annotations

import re

PASSED_MARK = "Test PASSED"
MANAGED_BY = "k8sgpu.nvidia"
RUN_LABEL = "k8sgpu.nvidia/verify-run"
NODE_LABEL = "k8sgpu.nvidia/verify-node"

# A vectorAdd binary built for a newer CUDA than the driver supports prints this.
_DRIVER_TOO_OLD = re.compile(r"CUDA driver version is insufficient|cudaErrorInsufficientDriver|forward compatibility", re.I)


def job_name(run_id: str, index: int) -> str:
    return f"k8sgpu-verify-{run_id}-{index}"


def job_manifest(name: str, namespace: str, run_id: str, image: str, gpus: int, node: str | None,
                 node_selector: dict, tolerations: list, timeout: int, runtime_class: str | None,
                 image_pull_secrets: list, command: list | None, run_as_user: int | None = None) -> dict:
    """A Job running one cuda-vector-add pod that asks for `gpus` nvidia.com/gpu.

    Least privilege: no capability, no privilege escalation, the runtime's default seccomp profile, no service
    account token (Pod Security baseline). With run_as_user (an image that runs as that user; /dev/nvidia* are
    0666) also non-root, which makes it Pod Security restricted."""
    selector = dict(node_selector or {})
    labels = {"app.kubernetes.io/name": "cuda-vector-add", "app.kubernetes.io/managed-by": MANAGED_BY, RUN_LABEL: run_id}
    if node:
        labels[NODE_LABEL] = node[:63]
    container = {
        "name": "cuda-vector-add",
        "image": image,
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if command:
        container["command"] = list(command)
    pod_security = {"seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is not None:
        pod_security.update(runAsNonRoot=True, runAsUser=int(run_as_user))
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": pod_security,
        "containers": [container],
        "tolerations": tolerations,
    }
    if selector:
        pod_spec["nodeSelector"] = selector
    if node:
        # Pinned by the Node's name, as the DaemonSet controller pins its pods: not by spec.nodeName, so the real
        # scheduler still checks GPU capacity and taints; not by the kubernetes.io/hostname label, which is the
        # kubelet's hostname and differs from the Node name under --hostname-override or a cloud provider.
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            # A safety net behind the module's own timeout, which reports the pod's state and deletes the Job first.
            "activeDeadlineSeconds": max(1, int(timeout)) + 60,
            # Removed by the TTL controller even if the task is interrupted before its own cleanup.
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def job_finished(job: dict) -> str | None:
    """"succeeded", "failed", or None while the Job runs."""
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if cond.get("status") == "True" and cond.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    if status.get("succeeded"):
        return "succeeded"
    if status.get("failed"):
        return "failed"
    return None


def run_finished(job: dict, pod: dict | None) -> str | None:
    """"succeeded", "failed", or None while the test runs: the Job's own conditions or, before the Job controller
    records them (it batches pod updates, about a second), the terminal phase of the Job's pod. The Jobs run one pod
    with restartPolicy Never and backoffLimit 0, so that pod's end is the Job's end."""
    done = job_finished(job)
    if done:
        return done
    phase = ((pod or {}).get("status") or {}).get("phase")
    return {"Succeeded": "succeeded", "Failed": "failed"}.get(phase)


def _job_failure_reason(job: dict) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".rstrip(": ")
    return ""


def _pod_failure_reason(pod_status: dict) -> str:
    """Why a pod failed without a terminated container (evicted, its node lost, ...), from the pod's status."""
    if pod_status.get("phase") != "Failed" or not (pod_status.get("reason") or pod_status.get("message")):
        return ""
    return f"{pod_status.get('reason') or 'Failed'}: {pod_status.get('message') or ''}".rstrip(": ")


def pending_reason(pod: dict | None, events: list) -> str:
    """Why a pod has not run: unschedulable (e.g. Insufficient nvidia.com/gpu), image pull, ..."""
    if pod is None:
        msgs = [e.get("message") for e in events if e.get("reason") in ("FailedCreate",)]
        return f"no pod created{': ' + msgs[-1] if msgs else ''}"
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return f"{waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": ")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"Unschedulable: {cond.get('message') or cond.get('reason') or ''}".rstrip(": ")
    failed = [e.get("message") for e in events if e.get("reason") == "FailedScheduling"]
    if failed:
        return f"Unschedulable: {failed[-1]}"
    return f"pod {pod['metadata']['name']} is {status.get('phase', 'Pending')}"


def verdict(job: dict, pod: dict | None, logs: str | None, events: list) -> dict:
    """The result for one Job: status passed | completed_no_logs | failed | running | pending."""
    done = run_finished(job, pod)
    pod_status = (pod or {}).get("status") or {}
    terminated = next(((cs.get("state") or {}).get("terminated") for cs in pod_status.get("containerStatuses") or []
                       if (cs.get("state") or {}).get("terminated")), None)
    tail = (logs or "").strip().splitlines()[-5:] if logs else []
    if done == "succeeded":
        if logs is None:
            return {"status": "completed_no_logs", "passed": None,
                    "reason": "completed, logs unavailable: the Job succeeded but its container log could not be read"}
        if PASSED_MARK in logs:
            return {"status": "passed", "passed": True, "reason": PASSED_MARK, "log_tail": tail}
        return {"status": "failed", "passed": False, "log_tail": tail,
                "reason": f"the Job succeeded but its log has no '{PASSED_MARK}'"}
    if done == "failed":
        if logs and _DRIVER_TOO_OLD.search(logs):
            reason = "CUDA driver version is insufficient for the image's CUDA runtime: upgrade the driver or use an older image"
        elif terminated:
            reason = f"container exited {terminated.get('exitCode')}: {terminated.get('reason') or ''} {terminated.get('message') or ''}".strip()
        else:
            # The Job gave up (for example DeadlineExceeded) before its pod ran: say why the pod did not run.
            reason = "; ".join(r for r in (_job_failure_reason(job), _pod_failure_reason(pod_status),
                                           pending_reason(pod, events)) if r)
        return {"status": "failed", "passed": False, "reason": reason, "log_tail": tail}
    if pod_status.get("phase") == "Running":
        return {"status": "running", "passed": False, "reason": f"still running ({pod['metadata']['name']})"}
    return {"status": "pending", "passed": False, "reason": pending_reason(pod, events)}
