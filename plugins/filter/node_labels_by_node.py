# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_labels_by_node filter: the labels the node_labels role sets (or removes) on each GPU host's Node."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.gfd_labels import gfd_labels
from ansible_collections.k8sgpu.nvidia.plugins.filter.node_name import node_name

# The labels gpu=true and nvidia.com/gpu.present=true (the device plugin's and the exporter's node affinity).
GPU_LABELS = {"gpu": "true", "nvidia.com/gpu.present": "true"}
# Every label gfd_labels can give: what state=absent removes with from_facts, whatever the facts of this run say (an
# earlier run may have set them from facts this one has not gathered).
GFD_KEYS = (
    "nvidia.com/gpu.count", "nvidia.com/gpu.product", "nvidia.com/gpu.memory",
    "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor",
    "nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor", "nvidia.com/cuda.driver-version.revision",
    "nvidia.com/cuda.runtime-version.full", "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
)


def _mapping(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"node_labels_by_node: {what} must be a dict of labels, got {value!r}")
    return dict(value)


def node_labels_by_node(hosts: Any, hostvars: Any, labels: Any = None, gpu: Any = True, from_facts: Any = True,
                        remove: Any = None, state: str = "present") -> dict:
    """Per Node (k8sgpu.nvidia.node_name), the labels for the module k8sgpu.nvidia.k8s_nodes (None removes one).

    state=present: gpu=true and nvidia.com/gpu.present=true (with `gpu`), GPU Feature Discovery's labels from the
    host's GPU facts (with `from_facts`), `labels`, then the host variable k8sgpu_node_labels; the keys of `remove`
    are removed. state=absent: every label present would set is removed (with `from_facts`, every GFD label name),
    and nothing else: other labels stay.
    """
    if isinstance(hosts, (str, Mapping)) or not isinstance(hosts, Sequence):
        raise AnsibleFilterError(f"node_labels_by_node expects a list of inventory hosts, got {hosts!r}")
    if state not in ("present", "absent"):
        raise AnsibleFilterError(f"node_labels_by_node: state must be present or absent, got {state!r}")
    common = _mapping(labels, "labels")
    removed = remove or []
    if isinstance(removed, str) or not isinstance(removed, Sequence):
        raise AnsibleFilterError(f"node_labels_by_node: remove must be a list of label keys, got {remove!r}")
    out: dict = {}
    for host in hosts:
        node = node_name(host, hostvars)
        hv = hostvars[host]
        wanted = dict(GPU_LABELS) if gpu else {}
        if from_facts:
            wanted.update(gfd_labels(hv.get("ansible_facts") or {}))
        wanted.update(common)
        wanted.update(_mapping(hv.get("k8sgpu_node_labels"), f"k8sgpu_node_labels of {host}"))
        if state == "present":
            wanted.update(dict.fromkeys(removed))
            out[node] = wanted
        else:
            keys = [key for key, value in wanted.items() if value is not None]
            out[node] = dict.fromkeys([*keys, *(GFD_KEYS if from_facts else ())])
    return out


class FilterModule:
    def filters(self) -> dict:
        return {"node_labels_by_node": node_labels_by_node}
