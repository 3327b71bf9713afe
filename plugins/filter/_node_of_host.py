# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter node_of_host, used by the node_maintenance and gpu_health roles; the logic is in module_utils/_node_name.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _node_of_host
version_added: 2.0.0
short_description: >-
  Private to the roles gpu_health and node_maintenance, not API: the Node of an inventory host, from a read of
  it, or an error naming the host and the fix
description:
  - Takes the registered result of M(kubernetes.core.k8s_info) for C(kind=Node) and the host's Node name
    (P(k8sgpu.nvidia.node_name#filter)) and returns the Node as the API returned it (C(metadata), C(spec), C(status)).
  - When the cluster has no such Node (C(resources) empty), fails naming the inventory host, the Node name and the fix
    (C(kubectl get nodes); set C(k8sgpu_node_name) for the host, or leave the host out of the run), so that the roles
    that read a host's Node (node_maintenance before each step, gpu_health before the health read) refuse it in one
    place, with one message, and without a task of its own.
  - Fails naming the host for an input that is not a k8s_info result (no C(resources) list).
positional: _input, host, name
options:
  _input:
    description: The registered result of M(kubernetes.core.k8s_info) (C(kind=Node), C(name) set).
    type: dict
    required: true
  host:
    description: The inventory host, for the message (C(inventory_hostname)).
    type: str
    required: true
  name:
    description: The Node name that was read, for the message.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the Node of the host
  kubernetes.core.k8s_info:
    kind: Node
    name: "{{ inventory_hostname | k8sgpu.nvidia.node_name(hostvars) }}"
  delegate_to: localhost
  register: node_read

- name: Note whether it is cordoned (fails, naming the host, when the cluster has no such Node)
  ansible.builtin.set_fact:
    node_cordoned: "{{ _node.spec.unschedulable | default(false) }}"
  vars:
    _node: "{{ node_read | k8sgpu.nvidia._node_of_host(inventory_hostname, inventory_hostname | k8sgpu.nvidia.node_name(hostvars)) }}"
"""

RETURN = r"""
_value:
  description: The Node, as kubernetes.core.k8s_info returned it (its C(resources[0])).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_name


def node_of_host(read, host, name):
    """module_utils/_node_name.py's node_of_host, its errors as the filter's."""
    try:
        return _node_name.node_of_host(read, host, name)
    except _node_name.NodeNameError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_node_of_host": node_of_host}
