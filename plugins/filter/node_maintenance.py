# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_maintenance role's decisions: which pods keep a drained Node busy, and whether a host needs maintenance."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import MaintenanceError, limit_of, parse_max_unavailable
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


def _positive_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def maintenance_settings(settings: Any) -> list[str]:
    """What is wrong with the maintenance settings, one sentence per variable ([] when all are good).

    ``settings`` maps variable names to values. Variables ending in ``_serial`` must be a number of hosts (1 or more)
    or a percentage (1% to 100%); ``_max_unavailable`` the same (of the GPU Nodes); ``_retry_delay`` more than 0
    seconds; ``_timeout`` 1 second or more; ``_expected_gpus`` 0 or more. Checked before any Node is touched.
    """
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"maintenance_settings expects a mapping of variable names to values, got {settings!r}")
    problems = []
    for name, value in settings.items():
        if name.endswith(("_serial", "_max_unavailable")):
            try:
                parse_max_unavailable(value)
            except MaintenanceError:
                what = "hosts per batch" if name.endswith("_serial") else "GPU Nodes out of service at once"
                problems.append(f"{name} is {value}: it must be a number of {what} (1 or more) or a percentage "
                                "(1% to 100%), as 1 or '25%'")
        elif name.endswith("_retry_delay"):
            number = _positive_number(value)
            if number is None or number <= 0:
                problems.append(f"{name} is {value}: it must be a number of seconds more than 0")
        elif name.endswith("_timeout"):
            number = _positive_number(value)
            if number is None or number < 1 or number != int(number):
                problems.append(f"{name} is {value}: it must be a whole number of seconds, 1 or more")
        elif name.endswith("_expected_gpus"):
            number = _positive_number(value)
            if number is None or number < 0 or number != int(number):
                problems.append(f"{name} is {value}: it must be a whole number of GPUs, 0 or more "
                                "(0: the count the Node advertised before the drain)")
    return problems


def _host_count(hosts: Any, what: str) -> int:
    if isinstance(hosts, bool) or not isinstance(hosts, (int, str)) or not str(hosts).strip().isdigit():
        raise AnsibleFilterError(f"{what}: hosts must be a count of hosts (0 or more), got {hosts!r}")
    return int(hosts)


def maintenance_throttle(max_unavailable: Any, hosts: Any) -> int:
    """How many hosts of a play may be disrupted (rebooted, a container runtime restarted) at once: the count
    ``max_unavailable`` (k8sgpu_max_unavailable) allows of ``hosts`` (the play's host count), a percentage rounded
    down, at least 1; for a task's ``throttle``.
    """
    count = _host_count(hosts, "maintenance_throttle")
    try:
        return limit_of(max_unavailable, count)
    except MaintenanceError:
        raise AnsibleFilterError(f"k8sgpu_max_unavailable is {max_unavailable}: it must be a number of GPU hosts "
                                 "(1 or more) or a percentage (1% to 100%), as 1 or '25%'") from None


def _batch(serial: Any, hosts: int) -> int:
    """The largest batch ``serial`` makes of ``hosts`` hosts, as ansible-core's serial does (pct_to_int)."""
    number, percent = parse_max_unavailable(serial)
    return min(hosts, max(1, hosts * number // 100) if percent else number)


def maintenance_batch(serial: Any, max_unavailable: Any, hosts: Any, reason: str = "",
                      serial_name: str = "k8sgpu_serial", limit_name: str = "k8sgpu_max_unavailable") -> list[str]:
    """What is wrong with a batch size that would disrupt more hosts at once than the fleet's limit ([] if nothing).

    In a play of ``hosts`` hosts that may reboot them or restart their container runtimes (``reason`` says why: the
    drain, a reboot asked for), a whole batch of ``serial`` hosts can be out of service at once; it must not be larger
    than what ``max_unavailable`` allows of them. A percentage rounds down, at least 1, for both (ansible-core's serial,
    the collection's limit). Bad values are maintenance_settings' to report, not this filter's.
    """
    count = _host_count(hosts, "maintenance_batch")
    if count == 0:
        return []
    try:
        batch, limit = _batch(serial, count), limit_of(max_unavailable, count)
    except MaintenanceError:
        return []
    if batch <= limit:
        return []
    why = f" ({reason})" if reason else ""
    return [f"{serial_name} is {serial} and {limit_name} is {max_unavailable}: of the {count} GPU host(s) of this run "
            f"a batch of {batch} could be rebooted or have its container runtimes restarted at once{why}, where "
            f"{limit_name} allows {limit}. Set {serial_name} to at most {max_unavailable}, or raise {limit_name} to "
            f"{serial} if that many GPU hosts may be out of service at once"]


def maintenance_health(facts: Any, verify_host: Any, host_gpus_before: Any) -> list[str]:
    """What keeps a host from going back into service after its maintenance window ([] when nothing does).

    ``facts`` are the host's GPU facts read after the window (k8sgpu.nvidia.gpu_facts: nvidia_pci_devices,
    nvidia_driver_loaded, nvidia_gpus), ``verify_host`` the verify role's node-level result (vectorAdd), and
    ``host_gpus_before`` the GPUs the host had on its PCI bus before the drain. On a host that had GPUs, each must be
    on the PCI bus again, the driver loaded, the driver seeing each, and vectorAdd passed on each: a skipped vectorAdd
    is a failure there.
    """
    if not isinstance(facts, Mapping) or not isinstance(verify_host, Mapping):
        raise AnsibleFilterError("maintenance_health expects the host's GPU facts and verify_host (mappings)")
    try:
        before = int(host_gpus_before or 0)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"maintenance_health: host_gpus_before must be a count, not {host_gpus_before!r}") from None
    if before <= 0:
        return []
    problems = []
    on_bus = len([d for d in facts.get("nvidia_pci_devices") or [] if isinstance(d, Mapping) and d.get("gpu")])
    if on_bus < before:
        problems.append(f"{before - on_bus} of {before} GPU(s) missing from the PCI bus")
    if not facts.get("nvidia_driver_loaded"):
        problems.append("the NVIDIA driver is not loaded")
    seen = len(facts.get("nvidia_gpus") or [])
    if facts.get("nvidia_driver_loaded") and seen < before:
        problems.append(f"the driver sees {seen} of {before} GPU(s)")
    status = verify_host.get("node_test_status")
    if status == "skipped":
        problems.append(f"vectorAdd did not run (skipped) on a host that had {before} GPU(s)")
    elif status != "passed":
        failures = "; ".join(str(f) for f in verify_host.get("node_test_failures") or [])
        problems.append(f"vectorAdd {verify_host.get('node_test', 'failed')}{': ' + failures if failures else ''}")
    elif len(verify_host.get("gpus") or []) < before:
        problems.append(f"vectorAdd ran on {len(verify_host.get('gpus') or [])} of {before} GPU(s)")
    return problems


class FilterModule:
    def filters(self) -> dict:
        return {"drain_blockers": drain_blockers, "maintenance_plan": maintenance_plan, "step_times": step_times,
                "maintenance_settings": maintenance_settings, "maintenance_health": maintenance_health,
                "maintenance_throttle": maintenance_throttle, "maintenance_batch": maintenance_batch}
