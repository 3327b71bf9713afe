# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain_blockers filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: drain_blockers
version_added: 1.0.0
short_description: The pods a drain left on a Node, and why
description:
  - From a Node's pods and the cluster's PodDisruptionBudgets (the C(resources) of M(kubernetes.core.k8s_info)),
    lists each pod a drain would still have to move as C(namespace/name (why)), sorted.
  - DaemonSet pods, mirror (static) pods and finished pods are never listed, as a drain leaves or ignores them.
  - The reason is one of C(terminating), C(emptyDir data), C(no controller), the PodDisruptionBudget that selects
    the pod with the disruptions it allows now, or C(still on the node).
positional: _input, pdbs
options:
  _input:
    description: The Node's pods.
    type: list
    elements: dict
    required: true
  pdbs:
    description: PodDisruptionBudgets (of every namespace, or of the pods' namespaces).
    type: list
    elements: dict
    required: true
  delete_emptydir_data:
    description: Whether the drain may delete pods with emptyDir volumes.
    type: bool
    default: false
  force:
    description: Whether the drain may delete pods without a controller.
    type: bool
    default: false
"""

EXAMPLES = r"""
blockers: "{{ pods.resources | k8sgpu.nvidia.drain_blockers(pdbs.resources) }}"
"""

RETURN = r"""
_value:
  description: One C(namespace/name (why)) per pod still to move.
  type: list
  elements: str
"""

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


class FilterModule:
    def filters(self) -> dict:
        return {"drain_blockers": drain_blockers}
