#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_nodes
short_description: Set labels and taints on many Kubernetes Nodes in one task
version_added: 1.0.0
description:
  - Reads the selected Nodes with one LIST call, computes for each what differs from the wanted labels and
    taints, and patches only the Nodes that differ, with concurrent API calls.
  - Written because M(kubernetes.core.k8s) and C(kubectl) change one object per call, which at fleet scale
    means one task or process per Node, and because C(kubectl taint) fails when a taint is already gone.
    Authentication is kubernetes.core's own (C(kubeconfig), C(context), C(host), ... and the C(K8S_AUTH_*)
    environment variables).
  - Labels are sent as a JSON merge patch of C(metadata.labels), so other labels are never touched. Taints
    replace C(spec.taints) as a whole (the API has no merge key for them), so those patches carry the Node's
    C(resourceVersion); if the Node changed since it was read, it is read again and the change re-planned.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
attributes:
  check_mode:
    support: full
    details: Patches are sent with C(dryRun=All), so the API server validates them without storing anything.
  diff_mode:
    support: full
    details: Per changed Node, the affected labels and the taint list before and after.
options:
  names:
    description:
      - Names of the Nodes to act on. Combined with the keys of O(node_labels).
      - An empty list (and no O(node_labels)) selects no Node, so the task changes nothing.
    type: list
    elements: str
  all_nodes:
    description:
      - Act on every Node of the cluster (that matches O(label_selector), if given). Refused together with O(names)
        or O(node_labels).
      - Without it, neither O(names) nor O(node_labels) given and no O(label_selector) fails the task rather than
        touch every Node.
    type: bool
    default: false
  label_selector:
    description:
      - Select Nodes by label, as C(kubectl get nodes -l) does, for example C(node-role.kubernetes.io/control-plane).
      - With O(names), a Node must match both.
    type: str
  labels:
    description:
      - Labels to set on every selected Node. A value of V(null) removes the label.
      - Values that are not strings (numbers, booleans) are written as strings (booleans as V(true)/V(false)).
    type: dict
    default: {}
  node_labels:
    description:
      - Labels per Node, by Node name, applied over O(labels). Use it for values that differ per Node,
        such as the GPU model. A value of V(null) removes the label.
    type: dict
    default: {}
  taints:
    description: Taints to add or remove on every selected Node.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: Taint key.
        type: str
        required: true
      value:
        description:
          - Taint value. For O(taints[].state=absent), only taints with this value are removed; omit it to remove
            any value.
        type: str
      effect:
        description:
          - Taint effect. Required for O(taints[].state=present). For O(taints[].state=absent), omit it to remove
            the key with every effect.
        type: str
        choices: [NoSchedule, PreferNoSchedule, NoExecute]
      state:
        description:
          - V(present) adds the taint, or changes the value of the taint with the same key and effect.
          - V(absent) removes it; no error when it is not there.
        type: str
        choices: [present, absent]
        default: present
  missing:
    description:
      - What to do when a Node in O(names) or O(node_labels) does not exist.
      - V(fail) fails the task, naming every missing Node, before changing anything.
      - V(ignore) leaves them out and lists them in RV(missing).
    type: str
    choices: [fail, ignore]
    default: fail
  workers:
    description:
      - How many PATCH calls run at once. Throughput grows with it because the API server and etcd batch
        concurrent writes; throttled requests (HTTP 429 from API Priority and Fairness, or 503) are retried after
        the server's C(Retry-After).
    type: int
    default: 64
  field_manager:
    description: Field manager name recorded on the Nodes' managed fields.
    type: str
    default: k8sgpu.nvidia
requirements:
  - kubernetes >= 24.2.0 (Python)
notes:
  - Needs RBAC C(get), C(list) and C(patch) on C(nodes).
seealso:
  - module: kubernetes.core.k8s
  - name: Taints and tolerations
    description: Kubernetes documentation.
    link: https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/
"""

EXAMPLES = r"""
- name: Label GPU nodes and taint them for GPU workloads only
  k8sgpu.nvidia.k8s_nodes:
    kubeconfig: ~/.kube/config
    names: [gpu-01, gpu-02]
    labels:
      gpu: "true"
      nvidia.com/gpu.present: "true"
      role: train-gpu
    taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule

- name: Remove the control-plane NoSchedule taints from every Node that has them
  k8sgpu.nvidia.k8s_nodes:
    all_nodes: true
    taints:
      - key: node-role.kubernetes.io/control-plane
        effect: NoSchedule
        state: absent
      - key: node-role.kubernetes.io/master
        effect: NoSchedule
        state: absent

- name: Per-node labels from GPU facts, and remove a label everywhere
  k8sgpu.nvidia.k8s_nodes:
    node_labels:
      gpu-01: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: 8}
      gpu-02: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB, nvidia.com/gpu.count: 4}
    labels:
      legacy-label: null
"""

RETURN = r"""
nodes:
  description: The Nodes that changed (or would change, in check mode), and how.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    labels_set:
      description: Labels added or given a new value.
      type: dict
    labels_removed:
      description: Keys of labels removed.
      type: list
      elements: str
    taints_added:
      description: Taints added, as C(key[=value]:Effect).
      type: list
      elements: str
    taints_removed:
      description: Taints removed (or replaced by a new value), as C(key[=value]:Effect).
      type: list
      elements: str
  sample:
    - name: gpu-01
      labels_set: {gpu: "true"}
      labels_removed: []
      taints_added: ["nvidia.com/gpu=present:NoSchedule"]
      taints_removed: []
matched:
  description: Number of Nodes selected.
  returned: always
  type: int
  sample: 1000
unchanged:
  description: Number of selected Nodes that already matched.
  returned: always
  type: int
  sample: 998
missing:
  description: Names given in O(names) or O(node_labels) that have no Node (with O(missing=ignore)).
  returned: always
  type: list
  elements: str
  sample: []
errors:
  description: Per Node, the API server's message for a patch that failed. The task fails when this is not empty.
  returned: failure
  type: dict
  sample: {gpu-07: 'nodes "gpu-07" is forbidden: User "ci" cannot patch resource "nodes"'}
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import (
    NodeBatch,
    NodeSpecError,
    TaintSpec,
    check_selection,
    label_value,
    plan_node,
    validate_label_key,
)


def _wanted_labels(params: dict) -> tuple[dict, dict]:
    def clean(labels: dict, where: str) -> dict:
        out = {}
        for key, value in (labels or {}).items():
            try:
                validate_label_key(key)
                out[key] = label_value(key, value)
            except NodeSpecError as exc:
                raise NodeSpecError(f"{where}: invalid label {exc}") from None
        return out

    common = clean(params["labels"], "labels")
    per_node = {name: clean(labels, f"node_labels[{name}]") for name, labels in (params["node_labels"] or {}).items()}
    return common, per_node


def main() -> None:
    argument_spec = dict(
        names=dict(type="list", elements="str"),
        all_nodes=dict(type="bool", default=False),
        label_selector=dict(type="str"),
        labels=dict(type="dict", default={}),
        node_labels=dict(type="dict", default={}),
        taints=dict(
            type="list", elements="dict", default=[],
            options=dict(
                key=dict(type="str", required=True, no_log=False),
                value=dict(type="str"),
                effect=dict(type="str", choices=["NoSchedule", "PreferNoSchedule", "NoExecute"]),
                state=dict(type="str", choices=["present", "absent"], default="present"),
            ),
        ),
        missing=dict(type="str", choices=["fail", "ignore"], default="fail"),
        workers=dict(type="int", default=64),
        field_manager=dict(type="str", default="k8sgpu.nvidia"),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    params = module.params

    try:
        common, per_node = _wanted_labels(params)
        taints = [TaintSpec.from_param(t) for t in params["taints"]]
    except NodeSpecError as exc:
        module.fail_json(msg=str(exc))
    if params["workers"] < 1:
        module.fail_json(msg=f"workers must be at least 1, not {params['workers']}")
    try:
        check_selection(params["names"], per_node, params["label_selector"], params["all_nodes"])
    except NodeSpecError as exc:
        module.fail_json(msg=str(exc))

    batch = NodeBatch(dynamic_client(module), workers=params["workers"], dry_run=module.check_mode,
                      field_manager=params["field_manager"])

    try:
        nodes = batch.list_nodes(params["label_selector"])
    except Exception as exc:
        module.fail_json(msg=f"Could not list Nodes: {api_error_message(exc)}")

    wanted = list(dict.fromkeys((params["names"] or []) + list(per_node)))
    named = params["names"] is not None or bool(per_node)
    missing = [name for name in wanted if name not in nodes]
    if missing and params["missing"] == "fail":
        sel = f" matching label selector '{params['label_selector']}'" if params["label_selector"] else ""
        module.fail_json(
            msg=f"No Node{sel} named {', '.join(missing)}. Check the names (inventory variable k8sgpu_node_name "
                "maps a host to its Node), or use missing=ignore.",
            missing=missing,
        )
    # An empty names list selects nothing: only all_nodes or a label_selector alone select every (matching) Node.
    selected = list(nodes.values()) if not named else [nodes[n] for n in wanted if n in nodes]

    def planner(node: dict):
        labels = {**common, **per_node.get(node["metadata"]["name"], {})}
        return plan_node(node, labels, taints)

    plans, errors = batch.apply(selected, planner)
    changed = sorted((p for p in plans if p.changed), key=lambda p: p.name)
    result = dict(
        changed=bool(changed),
        nodes=[p.result() for p in changed],
        matched=len(selected),
        unchanged=len(selected) - len(changed) - len(errors),
        missing=missing,
    )
    if module._diff:
        result["diff"] = dict(
            before={p.name: p.before for p in changed},
            after={p.name: p.after for p in changed},
        )
    if errors:
        result["errors"] = errors
        module.fail_json(
            msg=f"Could not update {len(errors)} of {len(selected)} Node(s): "
                + "; ".join(f"{name}: {msg}" for name, msg in sorted(errors.items())),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
