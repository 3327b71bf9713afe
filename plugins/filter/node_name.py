# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Map an inventory host to its Kubernetes Node name."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def node_name(host: str, hostvars: Any) -> str:
    """The host variable k8sgpu_node_name, else the name its kubelet registers: uname -n, trimmed and lowercased.

    The kubelet (nodeutil.GetHostname) takes os.Hostname() - the kernel's nodename, which is what the
    nodename fact holds - trims it and lowercases it. The inventory name is never used: it is an alias or
    an FQDN as often as not, so a host without the fact and without the override is an error.
    """
    if not isinstance(host, str):
        raise AnsibleFilterError(f"node_name expects an inventory host name, got {host!r}")
    try:
        hv = hostvars[host]
    except KeyError:
        raise AnsibleFilterError(f"node_name: {host} is not in the inventory") from None
    explicit = hv.get("k8sgpu_node_name")
    if explicit and str(explicit).strip():
        return str(explicit).strip()
    facts = hv.get("ansible_facts") or {}
    nodename = str(facts.get("nodename") or "").strip()
    if nodename:
        return nodename.lower()
    raise AnsibleFilterError(
        f"No Kubernetes Node name for host {host}: it has no nodename fact (uname -n, the name its kubelet registers), "
        "because it was unreachable or its facts were not gathered in this run, and no host variable k8sgpu_node_name. "
        f"Make {host} reachable, or set k8sgpu_node_name for it to its Node's name (kubectl get nodes).")


class FilterModule:
    def filters(self) -> dict:
        return {"node_name": node_name}
