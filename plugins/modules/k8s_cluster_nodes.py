#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_cluster_nodes
short_description: Read the API server's version and its Nodes in one task
version_added: 1.1.0
description:
  - Reads the API server's version (C(GET /version)) and lists the Nodes (C(GET /api/v1/nodes)) over one connection,
    and returns both as the API server answered them.
  - Why not M(kubernetes.core.k8s_cluster_info) and M(kubernetes.core.k8s_info) - together they take two module runs,
    each paying for starting Python and importing the Kubernetes client (about 0.4 s each on a 2-vCPU controller,
    more on slower ones), and C(k8s_cluster_info) also reads the discovery documents of every API group, which a
    check of the cluster and its Nodes does not need. The role C(k8sgpu.nvidia.preflight) runs this once per run of
    the main job.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
options:
  label_selector:
    description: List only the Nodes with these labels, as C(kubectl get nodes -l) does.
    type: str
requirements:
  - kubernetes >= 24.2.0 (Python)
  - kubernetes.core (its authentication and API client)
notes:
  - Needs RBAC C(list) on C(nodes). C(/version) is readable by every authenticated user (the default
    C(system:public-info-viewer) role).
seealso:
  - module: kubernetes.core.k8s_cluster_info
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Read the API server's version and the Nodes
  k8sgpu.nvidia.k8s_cluster_nodes:
    kubeconfig: ~/.kube/config
  register: cluster

- name: Show the version and the Node names
  ansible.builtin.debug:
    msg: "{{ cluster.version.gitVersion }}: {{ cluster.nodes | map(attribute='metadata.name') | join(', ') }}"
"""

RETURN = r"""
version:
  description: The API server's answer to C(GET /version).
  returned: success
  type: dict
  contains:
    gitVersion:
      description: The Kubernetes version, for example V(v1.37.2).
      type: str
    major:
      description: Major version.
      type: str
    minor:
      description: Minor version.
      type: str
    platform:
      description: The API server's operating system and architecture.
      type: str
  sample: {gitVersion: v1.37.2, major: "1", minor: "37", platform: linux/amd64}
nodes:
  description:
    - The Nodes (the LIST answer's C(items)), sorted by name, each as the API returns it (C(metadata), C(spec),
      C(status)), the same objects M(kubernetes.core.k8s_info) returns as C(resources).
  returned: success
  type: list
  elements: dict
  sample: [{metadata: {name: gpu-01, labels: {gpu: "true"}}, spec: {}, status: {capacity: {nvidia.com/gpu: "8"}}}]
summaries:
  description:
    - One summary per Node of RV(nodes), in the same order, for reports (the preflight role's C(preflight_cluster.nodes)).
    - Before 2.0.0 the filter C(k8sgpu.nvidia.node_summary).
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The Node's name.
      type: str
    ready:
      description: Whether its C(Ready) condition is C(True).
      type: bool
    gpus:
      description: Its C(nvidia.com/gpu) capacity.
      type: int
    gpus_allocatable:
      description: Its allocatable C(nvidia.com/gpu).
      type: int
    roles:
      description: The suffixes of its C(node-role.kubernetes.io/*) labels.
      type: list
      elements: str
    taints:
      description: Its taints as kubectl writes them (C(key[=value]:Effect)).
      type: list
      elements: str
  sample: [{name: gpu-01, ready: true, gpus: 8, gpus_allocatable: 8, roles: [], taints: []}]
summary_lines:
  description:
    - RV(summaries) as report lines, C(<name> <Ready|NotReady> gpus=<n> roles=<r,...> taints=<t,...>) in aligned
      columns, C(-) for an empty list. Before 2.0.0 the filter C(k8sgpu.nvidia.node_summary_line).
  returned: success
  type: list
  elements: str
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import NodeBatch
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._node_summary import node_summary, node_summary_line


def read(api, label_selector: str | None) -> tuple[dict, list]:
    """The /version answer and the Nodes sorted by name. Raises RuntimeError naming what could not be read."""
    try:
        version = api.request("get", "/version", serializer=raw_json) or {}
    except Exception as exc:  # the dynamic client's ApiException and connection errors
        raise RuntimeError(f"reading the API server's version (/version): {api_error_message(exc)}") from exc
    try:
        # k8s_nodes' LIST: pages of 2000 Nodes, following the API server's continue token.
        nodes = NodeBatch(api, workers=1).list_nodes(label_selector)
    except Exception as exc:
        raise RuntimeError(f"listing the Nodes (/api/v1/nodes): {api_error_message(exc)}") from exc
    return version, [nodes[name] for name in sorted(nodes)]


def main():
    module = k8s_module(argument_spec=dict(label_selector=dict(type="str")), supports_check_mode=True)
    api = dynamic_client(module)
    try:
        version, nodes = read(api, module.params["label_selector"])
    except RuntimeError as exc:
        module.fail_json(msg=f"Could not read the cluster: {exc}")
    summaries = [node_summary(node) for node in nodes]
    module.exit_json(changed=False, version=version, nodes=nodes, summaries=summaries,
                     summary_lines=[node_summary_line(s) for s in summaries])


if __name__ == "__main__":
    main()
