# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_names filter; the logic is in module_utils/_node_name.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: node_names
version_added: 1.1.0
short_description: The Kubernetes Node of each inventory host, refusing two hosts on one Node
description:
  - Maps each host as P(k8sgpu.nvidia.node_name#filter) does (the host variable C(k8sgpu_node_name), else C(uname -n)
    lowercased) and fails when two hosts map to one Node, naming both hosts, the Node, where each name came from and
    C(k8sgpu_node_name). A run would otherwise cordon, drain, label and check one Node for both, and a GPU host could
    point the controller's cordon and drain at another host's Node by setting its hostname.
  - A name no Node can have (not a DNS-1123 subdomain) fails as in P(k8sgpu.nvidia.node_name#filter).
  - The collection's playbooks check their GPU hosts with it before anything is changed
    (C(playbooks/tasks/node_name_facts.yml), C(playbooks/upgrade.yml), C(playbooks/host.yml)), and the
    C(node_maintenance) role before it cordons a Node.
positional: _input, hostvars
options:
  _input:
    description: Inventory host names.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  unknown:
    description:
      - A host with neither C(k8sgpu_node_name) nor the C(nodename) fact. V(fail) fails naming it; V(omit) leaves it
        out (it fails where its name is used), for example a host unreachable in this run.
    type: str
    choices: [fail, omit]
    default: fail
"""

EXAMPLES = r"""
# Fails before anything is changed when two GPU hosts map to one Node.
gpu_nodes_by_host: "{{ ansible_play_hosts | k8sgpu.nvidia.node_names(hostvars) }}"
"""

RETURN = r"""
_value:
  description: Inventory host -> Node name, for each host that has one.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_name


def node_names(hosts, hostvars, unknown="fail"):
    """module_utils/_node_name.py's node_names, its errors as the filter's."""
    try:
        return _node_name.node_names(hosts, hostvars, unknown)
    except _node_name.NodeNameError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"node_names": node_names}
