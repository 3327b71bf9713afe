# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: why a Node does (not) advertise an extended resource such as nvidia.com/gpu.

Functions over the API's JSON (dicts), so they are unit-tested without a cluster; wait_allocatable polls through
the function it is given.
"""
from __future__ import annotations

import time
from typing import Callable

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import expression_matches, taint_str


def _quantity(value) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def allocatable(node: dict, resource: str) -> int:
    return _quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource))


def wait_allocatable(list_nodes: Callable[[], list], names: list, resource: str, timeout: float, sleep: float,
                     start: float, nodes: list | None = None) -> tuple[dict, dict, float]:
    """Poll until every Node in names advertises allocatable resource, or timeout seconds pass on the monotonic clock
    since start. list_nodes() returns the Nodes' items; nodes, when given, is a first list already read. Returns the
    counts per name (0 for a missing Node), the last Nodes read by name, and the seconds waited."""
    while True:
        if nodes is None:
            nodes = list_nodes()
        by_name = {n["metadata"]["name"]: n for n in nodes}
        counts = {name: allocatable(by_name[name], resource) if name in by_name else 0 for name in names}
        waited = round(time.monotonic() - start, 1)
        if all(counts.values()) or waited >= timeout:
            return counts, by_name, waited
        time.sleep(max(1, sleep))
        nodes = None


def _ready_condition(node: dict) -> dict:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond
    return {}


def _tolerates(tolerations: list, taint: dict) -> bool:
    for tol in tolerations or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _affinity_mismatch(pod_spec: dict, node: dict) -> str:
    """The first required node-affinity or nodeSelector term the node fails, as text; '' if it matches."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"the node lacks label {key}={value} (DaemonSet nodeSelector)"
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return ""
    failures = []
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if not expression_matches(expr, labels, unknown=True):
                key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
                failures.append(f"the node does not match {key} {op} {','.join(values)} (DaemonSet node affinity)")
                break
        else:
            return ""
    return failures[0] if failures else ""


def _pod_problem(pod: dict, what: str = "device plugin pod") -> str:
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "?")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            last = ((cs.get("lastState") or {}).get("terminated") or {})
            extra = f"; last exit: {last.get('reason')} {last.get('message') or ''}".rstrip() if last else ""
            return f"{what} {name} is waiting: {waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": ") + extra
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            return f"{what} {name} terminated: {terminated.get('reason')} {terminated.get('message') or ''}".rstrip()
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("type") in ("PodScheduled", "Ready"):
            detail = f"{cond.get('type')}={cond.get('status')} {cond.get('reason') or ''} {cond.get('message') or ''}"
            return f"{what} {name} is {status.get('phase', 'Pending')}: {detail.rstrip()}"
    return f"{what} {name} is {status.get('phase', 'Pending')}"


def _pod_ready(pod: dict) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def diagnose(name: str, node: dict | None, resource: str, plugin_pods: list | None = None,
             daemonset: dict | None = None) -> str:
    """Why the node advertises no allocatable resource; '' when it does.

    plugin_pods are the device plugin DaemonSet's pods on this node; daemonset is
    that DaemonSet (for its tolerations and node affinity), when known.
    """
    if node is None:
        return f"no Node named {name}"
    if allocatable(node, resource) > 0:
        return ""
    not_ready = node_not_ready(node)
    if not_ready:
        return not_ready
    if (node.get("spec") or {}).get("unschedulable"):
        return "Node is cordoned (spec.unschedulable); the DaemonSet still runs there, but check the node"
    gap = daemonset_pod_gap(node, plugin_pods, daemonset)
    if gap:
        return gap
    pods = plugin_pods or []
    if pods:
        return (f"device plugin pod {pods[0]['metadata']['name']} is Ready but the node advertises no {resource}: "
                "the plugin found no GPU (check the driver and the container runtime on the host, and the plugin's log)")
    return f"the node advertises no {resource}"


def node_not_ready(node: dict) -> str:
    """Why the Node is not Ready, from its Ready condition; '' when it is."""
    ready = _ready_condition(node)
    if ready.get("status") == "True":
        return ""
    return (f"Node is not Ready ({ready.get('reason') or 'no Ready condition'}"
            f"{': ' + ready['message'] if ready.get('message') else ''})")


def daemonset_pod_gap(node: dict, pods: list | None, daemonset: dict | None, what: str = "device plugin pod") -> str:
    """Why no Ready pod of a DaemonSet runs on the node; '' when every one of its pods there is Ready.

    pods are the DaemonSet's pods on this node; daemonset (for its tolerations and node affinity), when known,
    explains a node without a pod; what names the pods in the text (e.g. "dcgm-exporter pod").
    """
    if daemonset is not None and not pods:
        pod_spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
        mismatch = _affinity_mismatch(pod_spec, node)
        if mismatch:
            return f"no {what} on this node: {mismatch}"
        untolerated = [t for t in (node.get("spec") or {}).get("taints") or []
                       if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod_spec.get("tolerations"), t)]
        if untolerated:
            return f"no {what} on this node: untolerated taint(s) {', '.join(map(taint_str, untolerated))}"
        return f"no {what} on this node yet"
    not_ready = [p for p in pods or [] if not _pod_ready(p)]
    if not_ready:
        return _pod_problem(not_ready[0], what)
    return ""
