# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (module k8s_cluster_nodes: its summaries and summary_lines).

Summarise Kubernetes Node objects for reports: readiness, GPUs, roles, taints."""
from __future__ import annotations

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import taint_str


class NodeSummaryError(ValueError):
    """Not a Node object."""


GPU_RESOURCE = "nvidia.com/gpu"
ROLE_PREFIX = "node-role.kubernetes.io/"


def _int(value) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def node_summary(node: dict) -> dict:
    """name, ready, gpus (capacity), gpus_allocatable, roles (node-role label suffixes), taints (key[=value]:Effect)."""
    if not isinstance(node, dict) or not isinstance(node.get("metadata"), dict) or "name" not in node["metadata"]:
        raise NodeSummaryError(f"node_summary expects a Node object with metadata.name, got {str(node)[:200]}")
    status = node.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "Unknown")
    labels = node["metadata"].get("labels") or {}
    return {
        "name": node["metadata"]["name"],
        "ready": ready == "True",
        "gpus": _int((status.get("capacity") or {}).get(GPU_RESOURCE, 0)),
        "gpus_allocatable": _int((status.get("allocatable") or {}).get(GPU_RESOURCE, 0)),
        "roles": sorted(key[len(ROLE_PREFIX):] for key in labels if key.startswith(ROLE_PREFIX)),
        "taints": [taint_str(t) for t in (node.get("spec") or {}).get("taints") or []],
    }


def node_summary_line(summary: dict) -> str:
    """One report line for a node_summary result."""
    return "%-28s %-9s gpus=%-3s roles=%-22s taints=%s" % (
        summary["name"],
        "Ready" if summary["ready"] else "NotReady",
        summary["gpus"],
        ",".join(summary["roles"]) or "-",
        ",".join(summary["taints"]) or "-",
    )
