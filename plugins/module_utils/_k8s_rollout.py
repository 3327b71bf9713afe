# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: whether a DaemonSet or Deployment has rolled out, and per Node why a DaemonSet's pod is
missing (module k8s_rollout_wait, which the private role k8s_apply runs for every role that applies a workload).

Pure functions over API objects (dicts), so they are unit-tested without a cluster; the per-pod diagnosis is the
device plugin's, in _k8s_gpu.
"""
from __future__ import annotations

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_gpu import daemonset_pod_gap, node_not_ready


def daemonset_rolled_out(daemonset: dict | None) -> bool:
    """The DaemonSet's controller saw its latest spec, and every pod it schedules runs that spec and is available."""
    if not daemonset:
        return False
    status = daemonset.get("status") or {}
    desired = status.get("desiredNumberScheduled", -1)
    return (status.get("observedGeneration", 0) >= (daemonset.get("metadata") or {}).get("generation", 1)
            and status.get("updatedNumberScheduled", 0) == desired
            and status.get("numberAvailable", 0) == desired)


def deployment_rolled_out(deployment: dict | None) -> bool:
    """The Deployment's controller saw its latest spec, and every replica runs that spec and is available."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    return (status.get("observedGeneration", 0) >= (deployment.get("metadata") or {}).get("generation", 1)
            and status.get("updatedReplicas", 0) == wanted
            and status.get("availableReplicas", 0) == wanted
            and status.get("replicas", 0) == wanted)


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def _required_label(daemonset: dict) -> tuple[str, str] | None:
    """The (key, value) the DaemonSet's first required node-affinity term asks with operator In, if any."""
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In" and len(expr.get("values") or []) == 1:
                return expr["key"], expr["values"][0]
    return None


def gpu_nodes(nodes: list, daemonset: dict | None, names: list | None = None) -> list[str]:
    """The Nodes that must run the DaemonSet: those named (the inventory's GPU hosts) and those with the label its
    node affinity requires (nvidia.com/gpu.present=true)."""
    wanted = set(names or [])
    label = _required_label(daemonset or {})
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if label and labels.get(label[0]) == label[1]:
            wanted.add(_name(node))
    return sorted(n for n in wanted if n)


def gpu_nodes_outside(nodes: list, daemonset: dict | None, names: list | None = None,
                      resource: str = "nvidia.com/gpu") -> list[str]:
    """Nodes with GPU capacity that gpu_nodes leaves out (no label, not named): no exporter will run there."""
    inside = set(gpu_nodes(nodes, daemonset, names))
    return sorted(_name(n) for n in nodes if _name(n) not in inside
                  and str(((n.get("status") or {}).get("capacity") or {}).get(resource) or "0") != "0")


# Taints an autoscaler puts on a Node it is removing: no new pod goes there, and the Node is about to go.
GOING_AWAY_TAINTS = ("karpenter.sh/disrupted", "ToBeDeletedByClusterAutoscaler")


def node_going_away(node: dict) -> bool:
    """True for a Node being deleted or drained for removal by Karpenter or the cluster-autoscaler."""
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return any(t.get("key") in GOING_AWAY_TAINTS for t in (node.get("spec") or {}).get("taints") or [])


def daemonset_node_problems(nodes: list, daemonset: dict | None, pods: list, names: list | None = None,
                            what: str = "pod") -> dict[str, str]:
    """Per GPU Node (see gpu_nodes) without a Ready pod of the DaemonSet, why; {} when every one has one.

    nodes, daemonset and pods are API objects (the resources of kubernetes.core.k8s_info); pods are the
    DaemonSet's pods (any Node); what names them in the text, e.g. "dcgm-exporter pod".
    """
    by_name = {_name(n): n for n in nodes}
    by_node: dict[str, list] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
    problems = {}
    for name in gpu_nodes(nodes, daemonset, names):
        node = by_name.get(name)
        if node is None:
            problems[name] = f"no Node named {name}"
            continue
        if node_going_away(node):
            continue
        why = node_not_ready(node) or daemonset_pod_gap(node, by_node.get(name, []), daemonset or {}, what)
        if why:
            problems[name] = why
    return problems
