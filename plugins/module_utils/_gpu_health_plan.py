# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the gpu_health role does with one host's health read and its Node (private to this collection).

Used by the filters k8sgpu.nvidia._gpu_health_plan and k8sgpu.nvidia._gpu_health_record. No Ansible or Kubernetes
import: the filters load it in every task that uses them.

The Node carries two things of the role: the taint ``<taint_key>=<status>:NoSchedule`` and the annotation
``<annotation_key>``, a JSON record::

    {"status": "needs_reset", "state": "tainted", "policy": "report", "since": "2026-11-29T05:00:00Z",
     "time": "2026-11-29T05:00:00Z", "reason": "...", "cordoned": false, "recovered": "",
     "gpus": [{"index": 0, "uuid": "GPU-...", "pci_bus_id": "00000000:3B:00.0", "status": "needs_reset",
               "findings": [{"check": "recovery_action", "status": "needs_reset", "detail": "..."}]}]}

``state``: tainted (report policy), waiting (the fleet's limit let no more Nodes out: tainted, not drained),
quarantined (cordoned and drained, no recovery asked or possible), out (a recovery ran and did not cure it, or the
check after it failed), returned (healthy again: taint removed, the Node uncordoned when this collection cordoned it).
``cordoned``: this collection cordoned the Node for the finding (a Node cordoned by a person is never uncordoned).
``recovered``: when the last recovery finished; the next health read looks at kernel-log events after it only.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

STATUSES = ("healthy", "degraded", "needs_reset", "needs_reboot", "replace")
POLICIES = ("report", "quarantine", "recover")
TAINT_KEY = "nvidia.com/gpu-health"
ANNOTATION_KEY = "k8sgpu.nvidia/gpu-health"
MAINTENANCE_ANNOTATION = "k8sgpu.nvidia/cordoned-for-maintenance"
STATES = ("tainted", "waiting", "quarantined", "out", "returned")
# Keys compared to tell whether the record changed; time and since are not (a second run changes nothing).
_COMPARED = ("status", "state", "policy", "reason", "cordoned", "recovered", "gpus")


class GpuHealthPlanError(ValueError):
    """A value the filters cannot work with (unknown status, policy or state)."""


def rank(status: str) -> int:
    try:
        return STATUSES.index(status)
    except ValueError:
        raise GpuHealthPlanError(f"unknown GPU health status {status!r}: one of {', '.join(STATUSES)}") from None


def _node_parts(node: Any) -> tuple[dict, list, bool]:
    node = node or {}
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return dict(meta.get("annotations") or {}), list(spec.get("taints") or []), bool(spec.get("unschedulable"))


def previous_record(node: Any, annotation_key: str = ANNOTATION_KEY) -> dict | None:
    """The role's record on the Node, or None (none, or not JSON: then it is rewritten)."""
    annotations, _taints, _unschedulable = _node_parts(node)
    text = annotations.get(annotation_key)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def unhealthy_gpus(health: dict, taint_from: str) -> list[dict]:
    """The GPUs at taint_from or worse, each with the findings that make its status."""
    floor = rank(taint_from)
    out = []
    for gpu in (health or {}).get("gpus") or []:
        status = gpu.get("status") or "healthy"
        if rank(status) < floor:
            continue
        findings = [{"check": f.get("check"), "status": f.get("status"), "detail": f.get("detail")}
                    for f in gpu.get("findings") or [] if rank(f.get("status") or "healthy") >= floor]
        out.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
                    "status": status, "findings": findings})
    return out


def host_status(gpus: list[dict]) -> str:
    return max((g["status"] for g in gpus), key=rank, default="healthy")


def describe(gpus: list[dict]) -> str:
    """GPU 0 (GPU-..., 00000000:3B:00.0) needs_reset: detail; detail; GPU 1 ..."""
    parts = []
    for gpu in gpus:
        details = "; ".join(f["detail"] or f["check"] for f in gpu["findings"] if f["status"] == gpu["status"])
        parts.append(f"GPU {gpu['index']} ({gpu['uuid'] or 'no UUID'}, {gpu['pci_bus_id'] or 'no PCI address'}) "
                     f"{gpu['status']}: {details or 'no finding named'}")
    return "; ".join(parts)


def recovery_for(status: str, reset: bool, reload: bool, reboot: bool) -> tuple[str, str]:
    """(action, why) for a host whose worst GPU has this status: reset, reload, reboot or none."""
    if status == "needs_reset":
        if reset:
            return "reset", "the driver asks for a GPU reset"
        if reload:
            return "reload", "the driver asks for a GPU reset; GPU resets are off (gpu_health_reset), the driver is reloaded"
        if reboot:
            return "reboot", "the driver asks for a GPU reset; GPU resets and driver reloads are off, the host is rebooted"
        return "none", "the driver asks for a GPU reset, and GPU resets, driver reloads and reboots are all off"
    if status == "needs_reboot":
        if reboot:
            return "reboot", "the GPU needs the host rebooted"
        return "none", "the GPU needs the host rebooted, and reboots are off (gpu_health_reboot)"
    if status == "replace":
        return "none", "the GPU must be replaced: no recovery is tried"
    if status == "degraded":
        return "none", "no recovery for a degraded GPU (slowdown, unknown event): it stays out until the finding clears"
    return "none", "healthy"


def make_record(previous: dict | None, *, status: str, state: str, policy: str, reason: str, cordoned: bool,
                gpus: list[dict], now: str, recovered: str = "") -> tuple[dict, bool]:
    """(the record to write, whether it differs from previous). A record equal but for the times is kept as it is."""
    if state not in STATES:
        raise GpuHealthPlanError(f"unknown record state {state!r}: one of {', '.join(STATES)}")
    previous = previous or {}
    record = {"status": status, "state": state, "policy": policy, "reason": reason, "cordoned": bool(cordoned),
              "recovered": recovered or previous.get("recovered", ""), "gpus": gpus,
              "since": previous.get("since") if previous.get("status") == status and previous.get("since") else now,
              "time": now}
    if previous and all(previous.get(k) == record[k] for k in _COMPARED):
        return dict(previous), False
    return record, True


def encode(record: dict) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def plan(health: dict, node: Any, *, policy: str = "report", taint_from: str = "needs_reset", reset: bool = True,
         reload: bool = False, reboot: bool = False, now: str = "", state: str = "present",
         taint_key: str = TAINT_KEY, annotation_key: str = ANNOTATION_KEY,
         maintenance_annotation: str = MAINTENANCE_ANNOTATION) -> dict:
    """What to do with one host after its health read.

    Returns action (none, record, quarantine, recover, return, return_verify, remove), window (whether the host needs
    the serial play: drain, recovery, or a check before the uncordon), the taint to set or remove (as
    k8sgpu.nvidia.k8s_nodes takes it), the annotation value (None: remove it) and whether it changes, the recovery and
    the GPUs it is for, the reason, and the Node's cordon: cordoned, cordoned_by_us, cordoned_by_person.
    """
    if policy not in POLICIES:
        raise GpuHealthPlanError(f"gpu_health_policy is {policy!r}: one of {', '.join(POLICIES)}")
    rank(taint_from)
    annotations, taints, unschedulable = _node_parts(node)
    previous = previous_record(node, annotation_key)
    ours_cordon = maintenance_annotation in annotations and bool((previous or {}).get("cordoned"))
    tainted = [t.get("value") for t in taints if t.get("key") == taint_key]
    gpus = unhealthy_gpus(health, taint_from)
    status = host_status(gpus)
    result: dict[str, Any] = {
        "status": status, "out": bool(gpus), "gpus": gpus, "previous": previous, "tainted": bool(tainted),
        "cordoned": unschedulable, "cordoned_by_us": unschedulable and ours_cordon,
        "cordoned_by_person": unschedulable and maintenance_annotation not in annotations,
        "recovery": "none", "recovery_gpus": [], "window": False, "annotation_changed": False,
        "annotation": annotations.get(annotation_key), "record": previous, "findings": describe(gpus),
        "taint_key": taint_key,
    }
    if state == "absent":
        result.update(action="remove" if previous is not None or tainted else "none",
                      taint={"key": taint_key, "state": "absent"}, annotation=None,
                      annotation_changed=annotation_key in annotations,
                      reason="the role's taint and record removed" + (
                          "; the Node stays cordoned (kubectl uncordon it when it may take work)" if unschedulable else ""))
        return result
    if state != "present":
        raise GpuHealthPlanError(f"gpu_health_state is {state!r}: present or absent")

    if gpus:
        findings = describe(gpus)
        action, why = recovery_for(status, reset, reload, reboot)
        if policy == "report":
            quarantine_reason = ""
        elif policy == "quarantine" or action == "none":
            quarantine_reason = f"{findings}. Policy {policy}: cordoned and drained" + (f"; {why}" if policy == "recover" else "")
        else:
            quarantine_reason = f"{findings}. Policy recover: cordoned and drained for the recovery ({action}: {why})"
        if policy == "recover":
            result["recovery"] = action
            result["recovery_why"] = why
            result["recovery_gpus"] = [g["index"] for g in gpus if g["status"] == "needs_reset"] if action == "reset" else []
        result["quarantine_reason"] = quarantine_reason
        cordoned = bool((previous or {}).get("cordoned")) and ours_cordon
        if policy == "report":
            reason = f"{findings}. Policy report: tainted {taint_key}={status}:NoSchedule, not drained"
            record, changed = make_record(previous, status=status, state="tainted", policy=policy, reason=reason,
                                          cordoned=cordoned, gpus=gpus, now=now)
        elif (previous and previous.get("status") == status and previous.get("gpus") == gpus
              and previous.get("policy") == policy and previous.get("state") in ("quarantined", "out", "waiting")):
            # As the serial play of an earlier run left it: that play writes it again if anything changes.
            reason, record, changed = previous.get("reason", ""), dict(previous), False
        else:
            reason = f"{findings}. Policy {policy}: tainted {taint_key}={status}:NoSchedule, to be cordoned and drained in its batch"
            record, changed = make_record(previous, status=status, state="tainted", policy=policy, reason=reason,
                                          cordoned=cordoned, gpus=gpus, now=now)
        result.update(action=policy if policy != "report" else "record", window=policy != "report",
                      taint={"key": taint_key, "value": status, "effect": "NoSchedule", "state": "present"},
                      reason=reason, record=record, annotation=encode(record), annotation_changed=changed)
        return result

    # Healthy (or below taint_from): back into service when an earlier run took it out.
    result["taint"] = {"key": taint_key, "state": "absent"}
    result["reason"] = "healthy"
    if previous is None and not tainted:
        result["action"] = "none"
        return result
    if unschedulable and ours_cordon:
        # Cordoned for a finding by an earlier run: vectorAdd on each GPU before the uncordon (the serial play).
        # The taint stays until the check passed (return.yml removes it).
        result.update(action="return_verify", window=True, taint=None,
                      reason="healthy again; an earlier run cordoned the Node: vectorAdd on each GPU, then uncordon")
        return result
    if previous is not None and previous.get("state") == "returned" and previous.get("status") == "healthy" \
            and not tainted:
        # Returned by an earlier run (this record, from its serial play or from here): kept as it is, so a later run
        # on the healthy host changes nothing.
        result.update(action="none", reason=previous.get("reason") or "healthy", record=previous)
        return result
    reason = "healthy again: taint removed" + (
        "; the Node was cordoned by someone else and stays cordoned" if unschedulable and not ours_cordon else "")
    record, changed = make_record(previous, status="healthy", state="returned", policy=policy, reason=reason,
                                  cordoned=False, gpus=[], now=now)
    result.update(action="return" if tainted or changed else "none", reason=reason, record=record,
                  annotation=encode(record), annotation_changed=changed)
    return result


def record_after(plan_result: dict, *, state: str, reason: str, now: str, health: dict | None = None,
                 taint_from: str = "needs_reset", cordoned: bool | None = None, recovered: str = "",
                 policy: str | None = None) -> dict:
    """The record after the serial play's window (waiting, quarantined, out, returned), from the plan it started with
    and, where a health read followed the recovery, that read. Returns {record, annotation, changed}."""
    previous = plan_result.get("previous")
    gpus = unhealthy_gpus(health, taint_from) if health is not None else plan_result.get("gpus") or []
    status = host_status(gpus) if state != "returned" else "healthy"
    current = plan_result.get("record") or {}
    record, changed = make_record(
        previous, status=status, state=state, policy=policy or current.get("policy") or (previous or {}).get("policy", ""),
        reason=reason, cordoned=bool(current.get("cordoned")) if cordoned is None else cordoned,
        gpus=[] if state == "returned" else gpus, now=now, recovered=recovered)
    return {"record": record, "annotation": encode(record), "differs": changed, "status": status, "gpus": gpus}


def window_hosts(hosts: Any, hostvars: Any, plan_var: str = "_gpu_health_plan") -> list[str]:
    """The hosts of ``hosts`` whose plan (host variable plan_var) needs the serial play: those healthy again to check
    and return (action return_verify) first, then the others, each part in the order of ``hosts`` (the play's, that is
    the inventory's). A host without a plan (its run ended before one, or it failed) is left out.

    The play's order decides which Node takes the fleet's limit when two wait for it; a group built with group_by
    holds its hosts in the order their results came back, which differs from run to run."""
    if isinstance(hosts, (str, Mapping)) or not isinstance(hosts, Sequence):
        raise GpuHealthPlanError(f"gpu_health_window_hosts expects a list of inventory hosts, got {hosts!r}")
    returning, others = [], []
    for host in hosts:
        try:
            found = hostvars[host].get(plan_var)
        except KeyError:
            raise GpuHealthPlanError(f"gpu_health_window_hosts: {host} is not in the inventory") from None
        if not isinstance(found, Mapping) or not found.get("window"):
            continue
        (returning if found.get("action") == "return_verify" else others).append(host)
    return returning + others
