# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_maintenance role's decisions: which pods keep a drained Node busy, and whether a host needs maintenance."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import expression_matches

_MIRROR = "kubernetes.io/config.mirror"


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against a pod's labels; an empty selector selects every pod."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(expression_matches(expr, labels) for expr in selector.get("matchExpressions") or [])


def _why(pod: dict, pdbs: list[dict], delete_emptydir_data: bool, force: bool) -> str:
    meta = _meta(pod)
    if meta.get("deletionTimestamp"):
        return "terminating"
    if any("emptyDir" in vol for vol in (pod.get("spec") or {}).get("volumes") or []) and not delete_emptydir_data:
        return "emptyDir data: set node_maintenance_delete_emptydir_data to delete it"
    if not meta.get("ownerReferences") and not force:
        return "no controller: set node_maintenance_drain_force to delete it"
    labels = meta.get("labels") or {}
    for budget in pdbs:
        bmeta = _meta(budget)
        if bmeta.get("namespace") != meta.get("namespace"):
            continue
        if _selects((budget.get("spec") or {}).get("selector") or {}, labels):
            allowed = (budget.get("status") or {}).get("disruptionsAllowed", 0)
            return f"PodDisruptionBudget {bmeta.get('namespace')}/{bmeta.get('name')} allows {allowed} disruptions"
    return "still on the node"


def drain_blockers(pods: Any, pdbs: Any, delete_emptydir_data: bool = False, force: bool = False) -> list[str]:
    """The pods a drain leaves on a Node, each as "namespace/name (why)", sorted.

    Pods that a drain never moves are not listed: DaemonSet pods (ignored), mirror pods (static, the kubelet's), and
    finished pods (Succeeded or Failed). ``pods`` are the Node's pods and ``pdbs`` the PodDisruptionBudgets, as
    kubernetes.core.k8s_info returns them (``resources``).
    """
    if not isinstance(pods, list) or not isinstance(pdbs, list):
        raise AnsibleFilterError("drain_blockers expects a list of Pods and a list of PodDisruptionBudgets "
                                 "(the resources of kubernetes.core.k8s_info)")
    blockers = []
    for pod in pods:
        meta = _meta(pod)
        if _MIRROR in (meta.get("annotations") or {}):
            continue
        if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        why = _why(pod, pdbs, bool(delete_emptydir_data), bool(force))
        blockers.append(f"{meta.get('namespace')}/{meta.get('name')} ({why})")
    return sorted(blockers)


def maintenance_plan(driver_result: Any, toolkit_result: Any, toolkit_version: str = "",
                     resume: bool = False) -> dict:
    """Whether a host needs a maintenance window, from the driver and container_toolkit roles' results in check mode.

    ``driver_result`` and ``toolkit_result`` are the roles' result facts after a check-mode pass (None when a role
    did not run); ``toolkit_version`` is container_toolkit_version; ``resume`` is true when an earlier run cordoned
    the Node and did not uncordon it. Returns {needed: bool, reasons: [text]}.
    """
    reasons = []
    if resume:
        reasons.append("an earlier run cordoned the Node and did not finish")
    status = (driver_result or {}).get("status", "")
    if status == "would_install":
        reasons.append("driver: packages to install or change")
    elif status == "installed_reboot_required":
        reasons.append("driver: installed, not loaded (reboot)")
    if toolkit_result:
        installed = str(toolkit_result.get("version") or "")
        if not installed:
            reasons.append("container toolkit: to install")
        elif toolkit_version and not installed.startswith(str(toolkit_version)):
            reasons.append(f"container toolkit: {installed} installed, {toolkit_version} wanted")
        reasons.extend(f"container toolkit: {path} would change" for path in toolkit_result.get("changed_files") or [])
    return {"needed": bool(reasons), "reasons": reasons}


def step_times(marks: Any, end: float) -> str:
    """Wall time per step from [[step, start], ...] (seconds since the epoch) and the end: "drain 3.1 s, ...".

    A step named twice (a resumed step) adds up.
    """
    if not isinstance(marks, list) or any(not isinstance(m, (list, tuple)) or len(m) != 2 for m in marks):
        raise AnsibleFilterError("step_times expects a list of [step, start time] pairs")
    totals: dict[str, float] = {}
    for (step, start), nxt in zip(marks, [*marks[1:], [None, end]]):
        totals[str(step)] = totals.get(str(step), 0.0) + max(0.0, float(nxt[1]) - float(start))
    return ", ".join(f"{step} {seconds:.1f} s" for step, seconds in totals.items())


class FilterModule:
    def filters(self) -> dict:
        return {"drain_blockers": drain_blockers, "maintenance_plan": maintenance_plan, "step_times": step_times}
