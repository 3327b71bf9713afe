#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_gpu_verify
short_description: Run the cuda-vector-add workload as Kubernetes Jobs and report, per node, whether it passed
version_added: 1.0.0
description:
  - Creates one Job (or, with O(per_node), one Job pinned to each Node in O(nodes)) whose pod requests
    O(gpus) C(nvidia.com/gpu) and runs the cuda-vector-add image, waits until every Job finishes or O(timeout)
    passes, reads the container log for C(Test PASSED), and deletes what it created.
  - Each Job runs one pod that is not retried, so a Job counts as finished as soon as its pod has succeeded or failed,
    without waiting for the Job controller to record it (the API is polled about twice a second, more often at first).
  - "On failure it returns, per Job, the reason read from the pod's status and events - for example
    C(Unschedulable: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu), C(ImagePullBackOff), a CUDA
    driver too old for the image, or the timeout."
  - Where the cluster gives no container logs (kwok's simulated nodes, for example) a succeeded Job is reported as
    C(completed, logs unavailable) and never as passed; O(require_logs) decides whether that fails the task.
  - Pinned Jobs select their Node by its name, with a required node affinity on the field C(metadata.name) (as the
    DaemonSet controller pins its pods), not by C(spec.nodeName), so the scheduler still checks GPU capacity, taints
    and tolerations, and not by the C(kubernetes.io/hostname) label, which holds the kubelet's hostname and can differ
    from the Node's name.
  - Written because M(kubernetes.core.k8s) can create a Job and wait for it, but not judge its log, explain a Pending
    pod, or run and clean up one Job per Node in one task.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
attributes:
  check_mode:
    support: partial
    details: In check mode the Jobs are only validated by the API server (C(dryRun=All)); nothing runs.
  diff_mode:
    support: none
    details: The Jobs are temporary; with O(cleanup) nothing is left behind.
options:
  image:
    description:
      - The cuda-vector-add image. Its log must contain C(Test PASSED) on success.
      - The guide's C(k8s.gcr.io/cuda-vector-add:v0.1) works too; for air-gapped sites use a local registry's copy.
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
  command:
    description: Command for the container, when the image's entrypoint is not the test.
    type: list
    elements: str
  namespace:
    description: Namespace for the Jobs. It must exist.
    type: str
    default: default
  gpus:
    description: C(nvidia.com/gpu) each pod requests.
    type: int
    default: 1
  node_selector:
    description: 'Node selector for the pods, for example C({gpu: "true"}) or C({role: train-gpu}).'
    type: dict
    default: {}
  per_node:
    description: Run one Job pinned to each Node in O(nodes), instead of one Job the scheduler places.
    type: bool
    default: false
  nodes:
    description:
      - Node names (C(metadata.name), as C(kubectl get nodes) shows them) for O(per_node).
      - The filter P(k8sgpu.nvidia.node_name#filter) maps inventory hosts to them.
    type: list
    elements: str
    default: []
  tolerations:
    description: Tolerations of the pods.
    type: list
    elements: dict
    default: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  runtime_class:
    description: Runtime class of the pods, for example C(nvidia) when nvidia is not the runtime's default.
    type: str
  image_pull_secrets:
    description: Names of Secrets in O(namespace) for a private registry.
    type: list
    elements: str
    default: []
  run_as_user:
    description:
      - Run the container as this user id (not 0), with C(runAsNonRoot), for an image that works as that user (the
        GPU device files C(/dev/nvidia*) are usually mode 0666). The pods then pass Pod Security C(restricted).
      - Unset, the image's own user runs (root in NVIDIA's cuda-sample images); the pods pass C(baseline).
      - Either way the container has no capability, no privilege escalation and the C(RuntimeDefault) seccomp profile.
    type: int
  timeout:
    description: Seconds to wait for all Jobs to finish. Also the Jobs' C(activeDeadlineSeconds).
    type: int
    default: 300
  require_logs:
    description:
      - Fail when a Job succeeded but its log could not be read (status C(completed_no_logs)).
      - Set it to V(false) on clusters without container logs, such as kwok.
    type: bool
    default: true
  cleanup:
    description: Delete the Jobs and their pods at the end, passed or failed.
    type: bool
    default: true
requirements:
  - kubernetes >= 24.2.0 (Python)
notes:
  - The pods run with the least privilege the test allows - no service account token, no capability, no privilege
    escalation, the C(RuntimeDefault) seccomp profile (Pod Security C(baseline); C(restricted) with O(run_as_user)).
  - Needs RBAC C(create), C(get), C(list), C(delete) on C(jobs), C(list) on C(pods) and C(events), and C(get) on C(pods/log)
    in O(namespace).
"""

EXAMPLES = r"""
- name: One cuda-vector-add Job on any GPU node
  k8sgpu.nvidia.k8s_gpu_verify:
    node_selector:
      gpu: "true"

- name: One Job pinned to each GPU node, with the guide's image from a local registry
  k8sgpu.nvidia.k8s_gpu_verify:
    per_node: true
    nodes: "{{ groups['gpu_nodes'] | map('k8sgpu.nvidia.node_name', hostvars) | list }}"
    image: registry.local:5000/cuda-vector-add:v0.1
    timeout: 600
"""

RETURN = r"""
passed:
  description: Whether every Job printed C(Test PASSED) (or, with O(require_logs=false), succeeded without logs).
  returned: always
  type: bool
jobs:
  description:
    - One entry per Job.
    - Named C(results) before 2.0.0, the key Ansible reads as the results of a loop.
  returned: always
  type: list
  elements: dict
  contains:
    job:
      description: Job name.
      type: str
    node:
      description: The Node the Job was pinned to (O(per_node)), else the Node its pod ran on, else null.
      type: str
    status:
      description: V(passed), V(completed_no_logs), V(failed), V(running) (at the timeout) or V(pending) (at the timeout).
      type: str
    passed:
      description: True when the log has C(Test PASSED); null when the Job succeeded but the log was unavailable.
      type: bool
    reason:
      description: "Why, from the pod's status, events and log, for example C(Unschedulable: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu)."
      type: str
    duration_s:
      description: Seconds from the Job's creation until it (or its pod) finished, or until the timeout.
      type: float
    log_tail:
      description: Last lines of the container log, where available.
      type: list
      elements: str
  sample:
    - {job: k8sgpu-verify-3f2a1c-0, node: gpu-01, status: passed, passed: true, reason: Test PASSED, duration_s: 6.2,
       log_tail: ["[Vector addition of 50000 elements]", "Test PASSED", "Done"]}
elapsed_s:
  description: Seconds the whole verification took, creation to cleanup.
  returned: always
  type: float
"""

import time
import uuid

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gpu_verify import (
    RUN_LABEL,
    job_manifest,
    job_name,
    run_finished,
    verdict,
)


class Verifier:
    def __init__(self, api, namespace: str):
        self.api = api
        self.ns = namespace

    def create(self, job: dict, dry_run: bool) -> None:
        params = {"dry_run": "All"} if dry_run else {}
        self.api.request("post", f"/apis/batch/v1/namespaces/{self.ns}/jobs", body=job, serializer=raw_json, **params)

    def jobs(self, run_id: str) -> dict:
        items = self.api.request("get", f"/apis/batch/v1/namespaces/{self.ns}/jobs", label_selector=f"{RUN_LABEL}={run_id}",
                                 serializer=raw_json).get("items") or []
        return {j["metadata"]["name"]: j for j in items}

    def pods(self, run_id: str) -> dict:
        items = self.api.request("get", f"/api/v1/namespaces/{self.ns}/pods", label_selector=f"{RUN_LABEL}={run_id}",
                                 serializer=raw_json).get("items") or []
        return {(p["metadata"].get("labels") or {}).get("job-name"): p for p in items}

    def events(self, name: str) -> list:
        try:
            return self.api.request("get", f"/api/v1/namespaces/{self.ns}/events",
                                    field_selector=f"involvedObject.name={name}", serializer=raw_json).get("items") or []
        except Exception:  # events are a hint only
            return []

    def logs(self, pod: str) -> str | None:
        try:
            text = self.api.request("get", f"/api/v1/namespaces/{self.ns}/pods/{pod}/log", serialize=False,
                                    header_params={"Accept": "*/*"})
            data = getattr(text, "data", text)
            return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        except Exception:  # no kubelet behind the node (kwok), log rotated away, ...
            return None

    def delete(self, run_id: str) -> None:
        self.api.request("delete", f"/apis/batch/v1/namespaces/{self.ns}/jobs", label_selector=f"{RUN_LABEL}={run_id}",
                         propagation_policy="Background", serializer=raw_json)


def main() -> None:
    argument_spec = dict(
        image=dict(type="str", default="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"),
        command=dict(type="list", elements="str"),
        namespace=dict(type="str", default="default"),
        gpus=dict(type="int", default=1),
        node_selector=dict(type="dict", default={}),
        per_node=dict(type="bool", default=False),
        nodes=dict(type="list", elements="str", default=[]),
        tolerations=dict(type="list", elements="dict",
                         default=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        runtime_class=dict(type="str"),
        image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # Secret names, not secrets
        run_as_user=dict(type="int"),
        timeout=dict(type="int", default=300),
        require_logs=dict(type="bool", default=True),
        cleanup=dict(type="bool", default=True),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    p = module.params
    if p["per_node"] and not p["nodes"]:
        module.fail_json(msg="per_node=true needs the Node names in nodes")
    if p["gpus"] < 1:
        module.fail_json(msg=f"gpus must be at least 1, not {p['gpus']}")
    if p["run_as_user"] is not None and p["run_as_user"] < 1:
        module.fail_json(msg=f"run_as_user must be a non-root user id (1 or more), not {p['run_as_user']}; "
                             "leave it unset to run the image's own user")
    api = dynamic_client(module)

    run_id = uuid.uuid4().hex[:6]
    targets = list(p["nodes"]) if p["per_node"] else [None]
    jobs = {
        job_name(run_id, i): job_manifest(job_name(run_id, i), p["namespace"], run_id, p["image"], p["gpus"], node,
                                          p["node_selector"], p["tolerations"], p["timeout"], p["runtime_class"],
                                          p["image_pull_secrets"], p["command"], p["run_as_user"])
        for i, node in enumerate(targets)
    }
    pinned = dict(zip(jobs, targets))
    v = Verifier(api, p["namespace"])
    start = time.monotonic()
    try:
        for job in jobs.values():
            v.create(job, dry_run=module.check_mode)
    except Exception as exc:
        if not module.check_mode:
            v.delete(run_id)
        module.fail_json(msg=f"Could not create the cuda-vector-add Job in namespace {p['namespace']}: {api_error_message(exc)}")
    if module.check_mode:
        module.exit_json(changed=False, passed=True, elapsed_s=0.0, msg=f"check mode: {len(jobs)} Job(s) validated by the API server",
                         jobs=[{"job": n, "node": pinned[n], "status": "not_run", "passed": None, "reason": "check mode",
                                "duration_s": 0.0, "log_tail": []} for n in jobs])

    results: dict = {}
    polls = 0
    try:
        while True:
            live, pods = v.jobs(run_id), v.pods(run_id)
            waited = time.monotonic() - start
            timed_out = waited >= p["timeout"]
            for name in jobs:
                if name in results:
                    continue
                job, pod = live.get(name, {}), pods.get(name)
                finished = run_finished(job, pod)
                if not finished and not timed_out:
                    continue
                logs = v.logs(pod["metadata"]["name"]) if pod else None
                events = [] if finished == "succeeded" else v.events(pod["metadata"]["name"] if pod else name)
                res = verdict(job, pod, logs, events)
                if res["status"] in ("running", "pending"):
                    res["reason"] = f"timeout after {p['timeout']} s: {res['reason']}"
                res.update(job=name, node=pinned[name] or ((pod or {}).get("spec") or {}).get("nodeName"),
                           duration_s=round(waited, 2))
                res.setdefault("log_tail", [])
                results[name] = res
            if len(results) == len(jobs):
                break
            # Polled on time: often at first (a pod on an idle node ends in 1-3 s, kwok's in 0.1 s), then twice a
            # second. A Job counts as finished when its pod has (run_finished), not a second later when the Job
            # controller, which batches pod updates, marks the Job.
            time.sleep(min(0.5, 0.1 * 1.5 ** polls))
            polls += 1
    finally:
        if p["cleanup"]:
            try:
                v.delete(run_id)
            except Exception as exc:
                module.warn(f"Could not delete the verify Jobs (label {RUN_LABEL}={run_id}): {api_error_message(exc)}")
    ordered = [results[n] for n in jobs]
    ok = all(r["passed"] or (r["status"] == "completed_no_logs" and not p["require_logs"]) for r in ordered)
    out = dict(changed=not p["cleanup"], passed=ok, jobs=ordered, elapsed_s=round(time.monotonic() - start, 2))
    if not ok:
        bad = [r for r in ordered if not (r["passed"] or (r["status"] == "completed_no_logs" and not p["require_logs"]))]
        module.fail_json(msg=f"cuda-vector-add failed for {len(bad)} of {len(ordered)} Job(s): "
                             + "; ".join(f"{r['node'] or r['job']}: {r['reason']}" for r in bad), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
