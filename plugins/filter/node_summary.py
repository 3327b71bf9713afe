# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Summarise Kubernetes Node objects for reports: readiness, GPUs, roles, taints."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: node_summary
version_added: 1.0.0
short_description: Summarise a Kubernetes Node for a report
description:
  - Turns a Node object (as M(kubernetes.core.k8s_info) returns it) into a small dict - C(name); C(ready) (its
    C(Ready) condition is C(True)); C(gpus) and C(gpus_allocatable) (C(status.capacity) and C(status.allocatable)
    of C(nvidia.com/gpu), 0 when absent); C(roles) (the suffixes of its C(node-role.kubernetes.io/*) labels);
    C(taints) (each as C(key[=value]:Effect)).
  - The same file has C(node_summary_line), which writes such a dict as one aligned report line.
positional: _input
options:
  _input:
    description: A Node object.
    type: dict
    required: true
"""

EXAMPLES = r"""
nodes: "{{ k8s_info_result.resources | map('k8sgpu.nvidia.node_summary') | list }}"
report: "{{ nodes | map('k8sgpu.nvidia.node_summary_line') | list }}"
"""

RETURN = r"""
_value:
  description: The summary.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import taint_str

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
        raise AnsibleFilterError(f"node_summary expects a Node object with metadata.name, got {str(node)[:200]}")
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


class FilterModule:
    def filters(self) -> dict:
        return {"node_summary": node_summary}
