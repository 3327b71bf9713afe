# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_labels_by_node filter: the labels the node_labels role sets (or removes) on each GPU host's Node."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _node_labels_by_node
version_added: 1.0.0
short_description: 'Private to the node_labels role, not API: the labels the node_labels role sets, or removes, on each GPU host''s Node'
description:
  - For each inventory host, its Node's name (P(k8sgpu.nvidia.node_name#filter)) and the labels for
    M(k8sgpu.nvidia.k8s_nodes)'s C(node_labels), where V(null) removes a label.
  - O(state=present) - C(gpu=true) and C(nvidia.com/gpu.present=true) (with O(gpu)), GPU Feature Discovery's labels
    from the host's GPU facts (P(k8sgpu.nvidia.gfd_labels#filter), with O(from_facts)), O(labels), then the host
    variable C(k8sgpu_node_labels); the keys of O(remove) are removed.
  - O(state=absent) - every label O(state=present) would set is removed (with O(from_facts), every label name
    P(k8sgpu.nvidia.gfd_labels#filter) can give, since an earlier run may have set them from facts not gathered
    now), and no other; labels the role does not set stay.
  - Fails naming the host when it has no Node name, and naming the argument when it has the wrong type.
positional: _input, hostvars
options:
  _input:
    description: The inventory hosts (a group's members).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  labels:
    description: Labels for every Node; a value of V(null) removes the label.
    type: dict
    default: {}
  gpu:
    description: Set C(gpu=true) and C(nvidia.com/gpu.present=true).
    type: bool
    default: true
  from_facts:
    description: Add GPU Feature Discovery's labels from each host's GPU facts.
    type: bool
    default: true
  remove:
    description: Label keys to remove from every Node (O(state=present)).
    type: list
    elements: str
    default: []
  state:
    description: V(present) the labels to set, V(absent) the same keys, to remove.
    type: str
    choices: [present, absent]
    default: present
"""

EXAMPLES = r"""
node_labels: "{{ groups['gpu_nodes'] | k8sgpu.nvidia._node_labels_by_node(hostvars, labels={'role': 'train-gpu'}) }}"
# {"gpu-01": {"gpu": "true", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", ...,
#             "role": "train-gpu"}}
removal: "{{ groups['gpu_nodes'] | k8sgpu.nvidia._node_labels_by_node(hostvars, labels={'role': 'train-gpu'}, state='absent') }}"
# {"gpu-01": {"gpu": null, "nvidia.com/gpu.present": null, "role": null, "nvidia.com/gpu.product": null, ...}}
"""

RETURN = r"""
_value:
  description: Node name to labels (V(null) removes the label).
  type: dict
"""

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gfd_labels, _node_name

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


def _node_and_gfd(host: Any, hostvars: Any, from_facts: Any) -> tuple[str, dict]:
    """The host's Node name and, with from_facts, its GFD labels; module_utils' errors as the filter's."""
    try:
        node = _node_name.node_name(host, hostvars)
        return node, (_gfd_labels.gfd_labels(hostvars[host].get("ansible_facts") or {}) if from_facts else {})
    except (_node_name.NodeNameError, _gfd_labels.GfdLabelsError) as exc:
        raise AnsibleFilterError(str(exc)) from None


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
        node, gfd = _node_and_gfd(host, hostvars, from_facts)
        hv = hostvars[host]
        wanted = dict(GPU_LABELS) if gpu else {}
        wanted.update(gfd)
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
        return {"_node_labels_by_node": node_labels_by_node}
