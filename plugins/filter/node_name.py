# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Map an inventory host to its Kubernetes Node name."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError


def node_name(host: str, hostvars) -> str:
    """The host variable k8sgpu_node_name, else the host's short hostname fact, else the inventory name."""
    if not isinstance(host, str):
        raise AnsibleFilterError(f"node_name expects an inventory host name, got {host!r}")
    try:
        hv = hostvars[host]
    except KeyError:
        raise AnsibleFilterError(f"node_name: {host} is not in the inventory") from None
    explicit = hv.get("k8sgpu_node_name")
    if explicit:
        return str(explicit)
    facts = hv.get("ansible_facts") or {}
    return str(facts.get("hostname") or host)


class FilterModule:
    def filters(self) -> dict:
        return {"node_name": node_name}
