# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter node_name, used by every role that maps hosts to Nodes; the logic is in module_utils/_node_name.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: node_name
version_added: 1.0.0
short_description: The Kubernetes Node name of an inventory host
description:
  - Returns the host variable C(k8sgpu_node_name) when set, else the name the host's kubelet registers, which is
    the kernel's node name (C(uname -n), the fact C(ansible_facts.nodename)) trimmed and lowercased, as the kubelet's
    C(nodeutil.GetHostname) does when it runs without C(--hostname-override).
  - The inventory name is never used. A host with neither the variable nor the fact (unreachable, or its facts were
    not gathered in this run) fails with a message naming the host and C(k8sgpu_node_name).
  - The fact comes from M(ansible.builtin.setup) (C(gather_subset) C(min), or C(!all,!min,platform)), or from a fact cache.
    The collection's playbooks gather it where it is missing.
  - A name that no Node can have (not a DNS-1123 subdomain, that is lower-case letters, digits, C(-) and C(.), at
    most 253 characters) fails naming the host, the name, where it came from and C(k8sgpu_node_name); a host's hostname can be
    anything, and is refused before it reaches an API call (since 1.1.0).
  - To map several hosts at once, refusing two hosts on one Node, use P(k8sgpu.nvidia.node_names#filter).
  - Every role of the collection maps hosts to Nodes this way. Set C(k8sgpu_node_name) where the kubelet runs with
    C(--hostname-override) or a cloud provider names the Node.
positional: _input, hostvars
options:
  _input:
    description: Inventory host name.
    type: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
"""

EXAMPLES = r"""
gpu_node_names: "{{ groups['gpu_nodes'] | map('k8sgpu.nvidia.node_name', hostvars) | list }}"
"""

RETURN = r"""
_value:
  description: The Node name.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_name


def node_name(host, hostvars):
    """module_utils/_node_name.py's node_name, its errors as the filter's."""
    try:
        return _node_name.node_name(host, hostvars)
    except _node_name.NodeNameError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"node_name": node_name}
