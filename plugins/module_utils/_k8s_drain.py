# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: cordon, drain (as kubectl drain --ignore-daemonsets), the fleet's unavailability limit,
and the wait for a Node to be back as it was.

Not a public API; k8sgpu.nvidia.k8s_node_maintenance only. The pure functions (which pods a drain moves and why,
the limit, a Node's readiness and GPU count) have no Kubernetes dependency and are unit-tested; NodeMaintenance talks
to the API server through the dynamic client that kubernetes.core's get_api_client returns (plain-dict responses).
Every wait is measured on the monotonic clock.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import api_error_message, raw_json
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import expression_matches

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_PERCENT_RE = re.compile(r"^\s*(\d+)\s*%\s*$")
_INT_RE = re.compile(r"^\s*(\d+)\s*$")
_BUDGET_RE = re.compile(r"disruption budget ([-a-z0-9.]+)", re.IGNORECASE)


class MaintenanceError(Exception):
    """A refusal or a failure with a message a human can act on."""


# ---------------------------------------------------------------- pure functions

def controller_of(pod: dict) -> dict | None:
    """The pod's controlling owner reference (controller: true), as metav1.GetControllerOf."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def pod_name(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def has_local_storage(pod: dict) -> bool:
    return any("emptyDir" in vol for vol in (pod.get("spec") or {}).get("volumes") or [])


@dataclass
class PodAction:
    """What a drain does with one pod: skip, evict, delete (finished) or refuse, and why."""

    pod: dict
    action: str  # skip | evict | delete | refuse
    reason: str = ""

    @property
    def name(self) -> str:
        return pod_name(self.pod)


def classify(pod: dict, delete_emptydir_data: bool, force: bool,
             daemonset_exists: Callable[[str, str], bool] | None = None) -> PodAction:
    """kubectl drain --ignore-daemonsets' filters, in kubectl's order (k8s.io/kubectl/pkg/drain/filters.go).

    DaemonSet-owned pods are skipped (ownership is checked before local storage: a DaemonSet pod with an emptyDir is
    skipped, never deleted); an orphaned DaemonSet pod (its DaemonSet gone) is deleted only with force. Mirror (static)
    pods are skipped. Finished pods are deleted. Pods with emptyDir volumes are refused unless delete_emptydir_data,
    pods without a controller unless force.
    """
    meta = pod.get("metadata") or {}
    ref = controller_of(pod)
    if ref and ref.get("kind") == "DaemonSet" and not finished(pod):
        if daemonset_exists is None or daemonset_exists(meta.get("namespace", ""), ref.get("name", "")):
            return PodAction(pod, "skip", "DaemonSet")
        if not force:
            return PodAction(pod, "refuse", f"its DaemonSet {ref.get('name')} is gone: set force to delete it")
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return PodAction(pod, "skip", "mirror pod")
    if finished(pod):
        return PodAction(pod, "delete", f"finished ({(pod.get('status') or {}).get('phase')})")
    if has_local_storage(pod) and not delete_emptydir_data:
        return PodAction(pod, "refuse", "emptyDir data: set delete_emptydir_data to delete it")
    if ref is None and not force:
        return PodAction(pod, "refuse", "no controller: set force to delete it")
    return PodAction(pod, "evict")


def selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector against labels. A PodDisruptionBudget with an empty selector selects every pod of its
    namespace (policy/v1); a null selector selects none."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(expression_matches(expr, labels) for expr in selector.get("matchExpressions") or [])


def budgets_of(pod: dict, pdbs: list[dict]) -> list[dict]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return [b for b in pdbs
            if (b.get("metadata") or {}).get("namespace") == meta.get("namespace")
            and selects((b.get("spec") or {}).get("selector"), labels)]


def budget_text(budget: dict) -> str:
    meta, status = budget.get("metadata") or {}, budget.get("status") or {}
    return (f"PodDisruptionBudget {meta.get('namespace')}/{meta.get('name')} allows "
            f"{status.get('disruptionsAllowed', 0)} disruptions ({status.get('currentHealthy', 0)} healthy, "
            f"{status.get('desiredHealthy', 0)} needed)")


def eviction_refusal(exc: Exception) -> str:
    """The API server's reason for a refused eviction (HTTP 429): the budget's own message where it gives one."""
    body = getattr(exc, "body", None)
    try:
        data = json.loads(body) if body else {}
    except (TypeError, ValueError):
        data = {}
    causes = [c.get("message") for c in (data.get("details") or {}).get("causes") or [] if c.get("message")]
    return "; ".join(causes) or data.get("message") or api_error_message(exc)


def parse_max_unavailable(value: Any) -> tuple[int, bool]:
    """(number, is_percentage) from 3, '3' or '25%'; raises MaintenanceError for anything else or less than 1."""
    if isinstance(value, bool):
        raise MaintenanceError(f"max_unavailable must be a number of Nodes (1 or more) or a percentage such as 25%, "
                               f"not {value!r}")
    if isinstance(value, int):
        number, percent = value, False
    else:
        text = str(value)
        match_p, match_i = _PERCENT_RE.match(text), _INT_RE.match(text)
        if match_p:
            number, percent = int(match_p.group(1)), True
        elif match_i:
            number, percent = int(match_i.group(1)), False
        else:
            raise MaintenanceError(f"max_unavailable must be a number of Nodes (1 or more) or a percentage such as "
                                   f"25%, not {value!r}")
    if number < 1 or (percent and number > 100):
        raise MaintenanceError(f"max_unavailable must be 1 or more (a percentage: 1% to 100%), not {value!r}: "
                               "with 0 no Node could ever be taken out of service")
    return number, percent


def host_count(hosts: Any, what: str) -> int:
    """A play's host count as the maintenance filters take it (0 or more, an int or its digits); MaintenanceError
    naming ``what`` (the filter) otherwise."""
    if isinstance(hosts, bool) or not isinstance(hosts, (int, str)) or not str(hosts).strip().isdigit():
        raise MaintenanceError(f"{what}: hosts must be a count of hosts (0 or more), got {hosts!r}")
    return int(hosts)


def limit_of(value: Any, fleet_size: int) -> int:
    """The number of Nodes max_unavailable allows out at once: a percentage of the fleet rounds down, at least 1."""
    number, percent = parse_max_unavailable(value)
    if not percent:
        return number
    return max(1, fleet_size * number // 100)


def ready_condition(node: dict) -> dict:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond
    return {}


def unavailable_reason(node: dict) -> str:
    """'cordoned', 'NotReady', both, or '' for a Node in service."""
    why = []
    if (node.get("spec") or {}).get("unschedulable"):
        why.append("cordoned")
    if ready_condition(node).get("status") != "True":
        why.append("NotReady")
    return " and ".join(why)


def quantity_count(value: Any) -> int:
    """An extended resource's quantity as an integer count ('8', 8, '0'); 0 for anything else."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def gpu_count(node: dict, resource: str) -> int:
    return quantity_count(((node.get("status") or {}).get("allocatable") or {}).get(resource))


def boot_id(node: dict) -> str:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""


def fleet_check(name: str, nodes: dict, selected: set, resource: str, max_unavailable: Any) -> dict:
    """Whether taking Node `name` out keeps the fleet within max_unavailable.

    The fleet is every Node in `selected` (the label selector's) or advertising `resource` in its capacity, plus
    `name`. Nodes cordoned or NotReady count; `name` counts once whether or not it is already out. Returns
    {allowed, limit, fleet, out: {node: why}} where out excludes `name`.
    """
    fleet = {n for n, node in nodes.items()
             if n in selected or quantity_count(((node.get("status") or {}).get("capacity") or {}).get(resource)) > 0}
    fleet.add(name)
    limit = limit_of(max_unavailable, len(fleet))
    out = {n: unavailable_reason(nodes[n]) for n in sorted(fleet) if n != name and n in nodes}
    out = {n: why for n, why in out.items() if why}
    return {"allowed": len(out) + 1 <= limit, "limit": limit, "fleet": len(fleet), "out": out}


# ---------------------------------------------------------------- the API side

@dataclass
class DrainReport:
    evicted: list = field(default_factory=list)
    deleted: list = field(default_factory=list)
    left: list = field(default_factory=list)  # left on the Node by design (DaemonSet, mirror pods)
    blocked: dict = field(default_factory=dict)
    waited: float = 0.0


class NodeMaintenance:
    """The API calls of cordon, drain, wait and uncordon for one Node."""

    def __init__(self, client, name: str, check_mode: bool = False, field_manager: str = "k8sgpu.nvidia",
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.client, self.name, self.check_mode, self.field_manager = client, name, check_mode, field_manager
        self.clock, self.sleep = clock, sleep
        self._daemonsets: dict = {}

    def _get(self, path: str, **params) -> dict:
        return self.client.request("get", path, serializer=raw_json, **params)

    def read_node(self) -> dict:
        try:
            return self._get(f"/api/v1/nodes/{self.name}")
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                raise MaintenanceError(f"no Node {self.name} in the cluster (kubectl get nodes)") from None
            raise

    def list_nodes(self, label_selector: str | None = None) -> dict:
        params: dict = {"limit": 2000}
        if label_selector:
            params["label_selector"] = label_selector
        nodes, cont = {}, None
        while True:
            if cont:
                params["_continue"] = cont
            data = self._get("/api/v1/nodes", **params)
            for item in data.get("items") or []:
                nodes[item["metadata"]["name"]] = item
            cont = (data.get("metadata") or {}).get("continue")
            if not cont:
                return nodes

    def fleet(self, selector: str, resource: str, max_unavailable: Any) -> dict:
        nodes = self.list_nodes()
        selected = set(self.list_nodes(selector)) if selector else set()
        return fleet_check(self.name, nodes, selected, resource, max_unavailable)

    def patch_node(self, patch: dict) -> dict:
        params: dict = {"serializer": raw_json, "content_type": "application/merge-patch+json",
                        "field_manager": self.field_manager}
        if self.check_mode:
            params["dry_run"] = "All"
        return self.client.request("patch", f"/api/v1/nodes/{self.name}", body=patch, **params)

    # -- drain

    def node_pods(self) -> list[dict]:
        data = self._get("/api/v1/pods", field_selector=f"spec.nodeName={self.name}")
        return list(data.get("items") or [])

    def daemonset_exists(self, namespace: str, name: str) -> bool:
        key = (namespace, name)
        if key not in self._daemonsets:
            try:
                self._get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
                self._daemonsets[key] = True
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    raise
                self._daemonsets[key] = False
        return self._daemonsets[key]

    def budgets(self, namespaces: set) -> list[dict]:
        out: list = []
        for ns in sorted(namespaces):
            out += self._get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets").get("items") or []
        return out

    def plan(self, delete_emptydir_data: bool, force: bool) -> list[PodAction]:
        return [classify(p, delete_emptydir_data, force, self.daemonset_exists) for p in self.node_pods()]

    def _evict(self, pod: dict, grace_period: int | None) -> None:
        meta = pod["metadata"]
        body: dict = {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        if grace_period is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
        self.client.request("post", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction",
                            body=body, serializer=raw_json)

    def _delete(self, pod: dict, grace_period: int | None) -> None:
        meta = pod["metadata"]
        params: dict = {"serializer": raw_json}
        body: dict = {"preconditions": {"uid": meta.get("uid")}} if meta.get("uid") else {}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        self.client.request("delete", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                            body=body or None, **params)

    def _gone(self, pod: dict) -> bool:
        meta = pod["metadata"]
        try:
            now = self._get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return True
            raise
        return (now.get("metadata") or {}).get("uid") != meta.get("uid")

    def drain(self, actions: list[PodAction], timeout: float, retry_delay: float,
              grace_period: int | None = None, poll: float = 0.5) -> DrainReport:
        """Evict (or delete, for finished pods) every pod to move, retrying refused evictions every retry_delay
        seconds until timeout, and wait until each is gone. Raises MaintenanceError naming each pod left and why."""
        report = DrainReport(left=[f"{a.name} ({a.reason})" for a in actions if a.action == "skip"])
        refused = {a.name: a.reason for a in actions if a.action == "refuse"}
        if refused:
            raise MaintenanceError("cannot drain: " + "; ".join(f"{n} ({why})" for n, why in sorted(refused.items())))
        todo = {a.name: a for a in actions if a.action in ("evict", "delete")}
        if self.check_mode:
            report.evicted = sorted(n for n, a in todo.items() if a.action == "evict")
            report.deleted = sorted(n for n, a in todo.items() if a.action == "delete")
            return report
        start = self.clock()
        deadline = start + timeout
        waiting: dict = {}   # name -> pod, eviction or deletion accepted (or already terminating)
        next_try: dict = {}  # name -> clock time of the next eviction attempt
        for name, action in list(todo.items()):
            if (action.pod.get("metadata") or {}).get("deletionTimestamp"):
                waiting[name] = todo.pop(name).pod
        while True:
            now = self.clock()
            for name, action in list(todo.items()):
                if next_try.get(name, 0.0) > now:
                    continue
                try:
                    if action.action == "delete":
                        self._delete(action.pod, grace_period)
                        report.deleted.append(name)
                    else:
                        self._evict(action.pod, grace_period)
                        report.evicted.append(name)
                    waiting[name] = todo.pop(name).pod
                    report.blocked.pop(name, None)
                except Exception as exc:
                    status = getattr(exc, "status", None)
                    if status == 404:
                        todo.pop(name)
                        report.blocked.pop(name, None)
                    elif status == 429:
                        report.blocked[name] = eviction_refusal(exc)
                        next_try[name] = now + retry_delay
                    else:
                        raise MaintenanceError(f"evicting {name}: {api_error_message(exc)}") from None
            for name, pod in list(waiting.items()):
                if self._gone(pod):
                    waiting.pop(name)
            report.waited = round(self.clock() - start, 1)
            if not todo and not waiting:
                return report
            now = self.clock()
            if now >= deadline:
                self._timeout(report, todo, waiting, timeout)
            wake = min([next_try.get(n, now) for n in todo] + ([now + poll] if waiting else []))
            self.sleep(max(0.05, min(max(wake, now + 0.05), deadline) - now))

    def _timeout(self, report: DrainReport, todo: dict, waiting: dict, timeout: float) -> None:
        pods = [a.pod for a in todo.values()]
        pdbs = self.budgets({(p.get("metadata") or {}).get("namespace") for p in pods}) if pods else []
        left = []
        for name, action in sorted(todo.items()):
            found = budgets_of(action.pod, pdbs)
            why = "; ".join(budget_text(b) for b in found) if found else report.blocked.get(name, "not evicted")
            if found and name in report.blocked and not _BUDGET_RE.search(why):
                why += f" (the API server said: {report.blocked[name]})"
            left.append(f"{name} (eviction refused: {why})" if name in report.blocked else f"{name} ({why})")
        left += [f"{name} (evicted, still terminating)" for name in sorted(waiting)]
        raise MaintenanceError(f"the drain did not finish in {timeout:g} s. Pods that would not leave: "
                               + "; ".join(left))

    # -- wait

    def wait(self, resource: str, expected_gpus: int | None, timeout: float, boot_id_before: str = "",
             poll: float = 1.0) -> dict:
        """Wait until the Node is Ready, advertises exactly expected_gpus of resource and (with boot_id_before) reports
        another bootID. Returns the Node's state; raises MaintenanceError naming what is missing at the timeout."""
        start = self.clock()
        while True:
            node = self.read_node()
            state = {"ready": ready_condition(node).get("status") == "True", "gpus": gpu_count(node, resource),
                     "boot_id": boot_id(node)}
            problems = wait_problems(node, resource, expected_gpus, boot_id_before)
            state["waited"] = round(self.clock() - start, 1)
            if not problems:
                return state
            if self.clock() - start >= timeout:
                raise MaintenanceError(f"not back after {timeout:g} s: " + "; ".join(problems))
            self.sleep(poll)


def wait_problems(node: dict, resource: str, expected_gpus: int | None, boot_id_before: str = "") -> list[str]:
    """What keeps a Node from going back into service: not Ready, GPUs missing, the same bootID after a reboot."""
    problems = []
    cond = ready_condition(node)
    if cond.get("status") != "True":
        problems.append(f"not Ready ({cond.get('reason') or 'no Ready condition'}"
                        f"{': ' + cond['message'] if cond.get('message') else ''})")
    gpus = gpu_count(node, resource)
    if expected_gpus is not None and gpus != expected_gpus:
        if gpus < expected_gpus:
            problems.append(f"{expected_gpus - gpus} GPU(s) missing: {resource} allocatable {gpus}, "
                            f"{expected_gpus} expected")
        else:
            problems.append(f"{resource} allocatable {gpus}, {expected_gpus} expected")
    if boot_id_before and boot_id(node) == boot_id_before:
        problems.append(f"the Node reports the same bootID as before the reboot ({boot_id_before}): the host did "
                        "not reboot, or its kubelet has not reported since")
    return problems
