# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: batched, concurrent Node label and taint updates.

Not a public API; modules of this collection only. The pure functions
(validation, planning) have no Kubernetes dependency and are unit-tested; the
NodeBatch class talks to the API server through the dynamic client that
kubernetes.core's get_api_client returns, so authentication options behave as
in kubernetes.core's own modules.
"""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import api_error_message, raw_json

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_NAME_RE = re.compile(rf"^{_NAME}$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RETRIES = 6


def _retry_after(exc: Exception, attempt: int) -> float:
    """Seconds to wait before retrying a throttled request: the server's Retry-After, else backoff."""
    headers = getattr(exc, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After")), 10.0)
    except (TypeError, ValueError):
        return min(0.2 * 2 ** attempt, 5.0)


class NodeSpecError(ValueError):
    """Bad labels or taints in the module's arguments."""


def expression_matches(expr: dict, labels: dict, unknown: bool = False) -> bool:
    """Whether labels satisfy one matchExpressions entry (In, NotIn, Exists, DoesNotExist).

    Other operators (a node selector's Gt and Lt) give ``unknown``.
    """
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return unknown


def check_selection(names: list | None, node_labels: dict, label_selector: str | None, all_nodes: bool) -> None:
    """Raise NodeSpecError unless the Nodes to act on are said explicitly.

    names (even an empty list) or node_labels select those Nodes only; a label_selector alone selects the Nodes that
    match it; every Node of the cluster only with all_nodes. An empty names list therefore touches no Node.
    """
    named = names is not None or bool(node_labels)
    if all_nodes and named:
        raise NodeSpecError("all_nodes: true selects every Node; give it without names and node_labels")
    if not all_nodes and not named and not label_selector:
        raise NodeSpecError("No Node selected: give names (or node_labels), a label_selector, or all_nodes: true to "
                            "act on every Node of the cluster")


def validate_label_key(key: str) -> None:
    """Raise NodeSpecError unless key is a valid label (or taint) key: [prefix/]name."""
    prefix, name = key.rsplit("/", 1) if "/" in key else ("", key)
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        raise NodeSpecError(f"'{key}': the prefix must be a DNS subdomain (lower case, dots, at most 253 characters)")
    if not name or len(name) > 63 or not _LABEL_NAME_RE.match(name):
        raise NodeSpecError(
            f"'{key}': the name part must be 1-63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
        )


def label_value(key: str, value: Any) -> str | None:
    """Return a label value as the API wants it (a string), or None to remove the label."""
    if value is None:
        return None
    if isinstance(value, bool):
        value = str(value).lower()
    value = str(value)
    if len(value) > 63 or (value and not _LABEL_NAME_RE.match(value)):
        raise NodeSpecError(
            f"{key}={value!r}: values must be at most 63 characters of [A-Za-z0-9-_.],"
            " starting and ending alphanumeric"
        )
    return value


@dataclass(frozen=True)
class TaintSpec:
    """A wanted taint. For state=absent, value and effect None match any."""

    key: str
    value: str | None = None
    effect: str | None = None
    state: str = "present"

    @classmethod
    def from_param(cls, item: dict) -> "TaintSpec":
        key = item.get("key")
        if not key:
            raise NodeSpecError(f"taint {item!r} has no key")
        validate_label_key(key)
        state = item.get("state") or "present"
        effect = item.get("effect")
        if effect is not None and effect not in TAINT_EFFECTS:
            raise NodeSpecError(f"taint {key}: effect must be one of {', '.join(TAINT_EFFECTS)}, not {effect!r}")
        if state == "present" and effect is None:
            raise NodeSpecError(f"taint {key}: an effect is required to add a taint")
        value = item.get("value")
        if value is not None:
            value = label_value(f"taint {key}", value) or None
        return cls(key=key, value=value, effect=effect, state=state)

    def matches(self, taint: dict) -> bool:
        return (
            taint.get("key") == self.key
            and (self.effect is None or taint.get("effect") == self.effect)
            and (self.state == "present" or self.value is None or taint.get("value") == self.value)
        )

    def as_taint(self) -> dict:
        taint = {"key": self.key, "effect": self.effect}
        if self.value:
            taint["value"] = self.value
        return taint


def taint_str(taint: dict) -> str:
    """A taint as key[=value]:Effect, the form kubectl taint takes."""
    value = taint.get("value")
    return f"{taint['key']}{'=' + value if value else ''}:{taint['effect']}"


def _same_taint(a: dict, b: dict) -> bool:
    return (a.get("key"), a.get("value") or None, a.get("effect")) == (b.get("key"), b.get("value") or None, b.get("effect"))


@dataclass
class NodePlan:
    """What must change on one Node, as a JSON merge patch."""

    name: str
    labels_set: dict = field(default_factory=dict)
    labels_removed: list = field(default_factory=list)
    taints_added: list = field(default_factory=list)
    taints_removed: list = field(default_factory=list)
    patch: dict = field(default_factory=dict)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.patch)

    def result(self) -> dict:
        return {
            "name": self.name,
            "labels_set": self.labels_set,
            "labels_removed": self.labels_removed,
            "taints_added": self.taints_added,
            "taints_removed": self.taints_removed,
        }


def plan_node(node: dict, labels: dict, taints: list) -> NodePlan:
    """Compare a Node (as the API returns it) with the wanted labels and taints.

    labels maps key to a string value, or to None to remove the label.
    Taints are replaced as a whole list in the patch (Node spec.taints has no
    merge key), so the patch then carries metadata.resourceVersion and the API
    server refuses it if the Node changed since it was read.
    """
    meta = node.get("metadata") or {}
    name = meta.get("name", "")
    plan = NodePlan(name=name)
    current = meta.get("labels") or {}
    label_patch: dict = {}
    for key, value in labels.items():
        if value is None:
            if key in current:
                label_patch[key] = None
                plan.labels_removed.append(key)
        elif current.get(key) != value:
            label_patch[key] = value
            plan.labels_set[key] = value

    old_taints = list((node.get("spec") or {}).get("taints") or [])
    new_taints = list(old_taints)
    for spec in taints:
        if spec.state == "absent":
            kept = [t for t in new_taints if not spec.matches(t)]
            plan.taints_removed += [taint_str(t) for t in new_taints if spec.matches(t)]
            new_taints = kept
            continue
        want = spec.as_taint()
        same_slot = [i for i, t in enumerate(new_taints) if t.get("key") == spec.key and t.get("effect") == spec.effect]
        if len(same_slot) == 1 and _same_taint(new_taints[same_slot[0]], want):
            continue
        plan.taints_removed += [taint_str(new_taints[i]) for i in same_slot]
        new_taints = [t for i, t in enumerate(new_taints) if i not in same_slot] + [want]
        plan.taints_added.append(taint_str(want))

    if label_patch:
        plan.patch["metadata"] = {"labels": label_patch}
    if plan.taints_added or plan.taints_removed:
        plan.patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
        plan.patch["spec"] = {"taints": new_taints or None}
    if plan.changed:
        plan.before = {
            "labels": {k: current[k] for k in sorted(set(plan.labels_set) | set(plan.labels_removed)) if k in current},
            "taints": [taint_str(t) for t in old_taints],
        }
        plan.after = {
            "labels": dict(sorted(plan.labels_set.items())),
            "taints": [taint_str(t) for t in new_taints],
        }
    return plan


class NodeBatch:
    """Read Nodes in one LIST call and patch the ones that differ, concurrently."""

    def __init__(self, dynamic_client, workers: int = 64, dry_run: bool = False, field_manager: str = "k8sgpu.nvidia"):
        self.client = dynamic_client
        self.workers = max(1, workers)
        self.dry_run = dry_run
        self.field_manager = field_manager
        self._size_pool(self.workers)

    def _size_pool(self, size: int) -> None:
        # One keep-alive connection per worker. kubernetes.core builds the
        # ApiClient with the client's default pool (5 x CPUs); urllib3 creates
        # pools lazily, so raising the pool size before the first request is
        # enough and avoids a TLS handshake per request beyond the default.
        pool_manager = getattr(getattr(getattr(self.client, "client", None), "rest_client", None), "pool_manager", None)
        kw = getattr(pool_manager, "connection_pool_kw", None)
        if isinstance(kw, dict):
            kw["maxsize"] = max(kw.get("maxsize") or 0, size)

    def list_nodes(self, label_selector: str | None = None) -> dict:
        params: dict = {"serializer": raw_json}
        if label_selector:
            params["label_selector"] = label_selector
        nodes: dict = {}
        cont = None
        while True:
            if cont:
                params["_continue"] = cont
            data = self.client.request("get", "/api/v1/nodes", limit=2000, **params)
            for item in data.get("items") or []:
                nodes[item["metadata"]["name"]] = item
            cont = (data.get("metadata") or {}).get("continue")
            if not cont:
                return nodes

    def _read(self, name: str) -> dict:
        return self.client.request("get", f"/api/v1/nodes/{name}", serializer=raw_json)

    def _patch(self, name: str, patch: dict) -> None:
        params: dict = {"serializer": raw_json, "content_type": "application/merge-patch+json",
                        "field_manager": self.field_manager}
        if self.dry_run:
            params["dry_run"] = "All"
        self.client.request("patch", f"/api/v1/nodes/{name}", body=patch, **params)

    def apply_one(self, plan: NodePlan, planner: Callable[[dict], NodePlan]) -> NodePlan:
        """Patch one Node.

        On a conflict (the Node changed since it was read) read it again and re-plan;
        on 429 (API Priority and Fairness) or 503 wait as the server asks, then retry.
        """
        for attempt in range(_RETRIES):
            if not plan.changed:
                return plan
            try:
                self._patch(plan.name, plan.patch)
                return plan
            except Exception as exc:  # the dynamic client raises its own exception classes
                status = getattr(exc, "status", None)
                if status not in (409, 429, 503) or attempt == _RETRIES - 1:
                    raise
                if status == 409:
                    plan = planner(self._read(plan.name))
                else:
                    time.sleep(_retry_after(exc, attempt))
        return plan

    def apply(self, nodes: list, planner: Callable[[dict], NodePlan]) -> tuple[list, dict]:
        """Plan every node and patch those that differ, concurrently.

        Returns the plans (as applied) and the API error message per node whose patch failed.
        """
        plans = [planner(node) for node in nodes]
        todo = [p for p in plans if p.changed]
        done = [p for p in plans if not p.changed]
        errors: dict = {}
        if not todo:
            return done, errors
        with ThreadPoolExecutor(max_workers=min(self.workers, len(todo))) as pool:
            futures = [(plan.name, pool.submit(self.apply_one, plan, planner)) for plan in todo]
            for name, future in futures:
                try:
                    done.append(future.result())
                except Exception as exc:  # reported per node; the task fails after all are tried
                    errors[name] = api_error_message(exc)
        return done, errors
