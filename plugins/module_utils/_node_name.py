# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters node_name, node_names and node_of_host, and node_labels_by_node and verify_summary
through them).

Map inventory hosts to their Kubernetes Node names, refusing a malformed name and two hosts on one Node; take a host's
Node from a read of it, refusing a host whose Node the cluster does not have."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any


class NodeNameError(ValueError):
    """A host without a Node name, or two hosts on one Node, with a message naming the fix."""


# A Node's name is a DNS-1123 subdomain (the API server's ValidateNodeName).
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_OVERRIDE = "host variable k8sgpu_node_name"
_UNAME = "uname -n, lowercased"


def _hostvars(host: Any, hostvars: Any) -> Mapping:
    if not isinstance(host, str):
        raise NodeNameError(f"node_name expects an inventory host name, got {host!r}")
    try:
        return hostvars[host]
    except KeyError:
        raise NodeNameError(f"node_name: {host} is not in the inventory") from None


def _name_and_source(host: str, hv: Mapping) -> tuple[str, str] | None:
    """The host's Node name and where it came from, checked; None when neither the override nor the fact is there."""
    explicit = hv.get("k8sgpu_node_name")
    if explicit and str(explicit).strip():
        name, source = str(explicit).strip(), _OVERRIDE
    else:
        facts = hv.get("ansible_facts") or {}
        nodename = str(facts.get("nodename") or "").strip()
        if not nodename:
            return None
        name, source = nodename.lower(), _UNAME
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise NodeNameError(
            f"Host {host} maps to the Kubernetes Node name {name[:300]!r} ({source}), which no Node can have: a Node "
            "name is a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each part starting and ending with "
            f"a letter or digit, at most 253 characters). Nothing was changed. Set k8sgpu_node_name for {host} to its "
            "Node's name (kubectl get nodes)" + (", or fix the host's hostname." if source == _UNAME else "."))
    return name, source


def node_name(host: str, hostvars: Any) -> str:
    """The host variable k8sgpu_node_name, else the name its kubelet registers: uname -n, trimmed and lowercased.

    The kubelet (nodeutil.GetHostname) takes os.Hostname() - the kernel's nodename, which is what the
    nodename fact holds - trims it and lowercases it. The inventory name is never used: it is an alias or
    an FQDN as often as not, so a host without the fact and without the override is an error. A name that is not a
    DNS-1123 subdomain (no Node can have it: a host's hostname can be anything) is an error too.
    """
    found = _name_and_source(host, _hostvars(host, hostvars))
    if found:
        return found[0]
    raise NodeNameError(
        f"No Kubernetes Node name for host {host}: it has no nodename fact (uname -n, the name its kubelet registers), "
        "because it was unreachable or its facts were not gathered in this run, and no host variable k8sgpu_node_name. "
        f"Make {host} reachable, or set k8sgpu_node_name for it to its Node's name (kubectl get nodes).")


def node_names(hosts: Any, hostvars: Any, unknown: str = "fail") -> dict:
    """Inventory host -> Node name (node_name) for each of ``hosts``, refusing two hosts that map to one Node.

    Two hosts on one Node would have a run cordon, drain, reboot-check and label one Node for both: a host whose
    hostname (uname -n) is another host's Node name points the controller at that Node. ``unknown``: ``fail`` (a host
    without a name is an error, as in node_name) or ``omit`` (left out: it fails where its name is used; a host
    unreachable in this run).
    """
    if isinstance(hosts, (str, Mapping)) or not isinstance(hosts, Sequence):
        raise NodeNameError(f"node_names expects a list of inventory hosts, got {hosts!r}")
    if unknown not in ("fail", "omit"):
        raise NodeNameError(f"node_names: unknown must be fail or omit, got {unknown!r}")
    out: dict = {}
    first: dict = {}  # Node name -> (host, source)
    for host in hosts:
        found = _name_and_source(host, _hostvars(host, hostvars))
        if not found:
            if unknown == "omit":
                continue
            node_name(host, hostvars)  # raises, naming the host and the fix
        name, source = found
        if name in first and first[name][0] != host:
            other, other_source = first[name]
            raise NodeNameError(
                f"Hosts {other} and {host} map to one Kubernetes Node, {name} ({other}: {other_source}; {host}: "
                f"{source}): a run would cordon, drain, label and check that Node for both, and a host could point the "
                "run at another host's Node. Nothing was changed. Give each host its own Node: set k8sgpu_node_name "
                f"for the one whose Node {name} is not (kubectl get nodes), or fix its hostname.")
        first.setdefault(name, (host, source))
        out[host] = name
    return out


def node_of_host(read: Any, host: str, name: str) -> dict:
    """The Node in ``read`` (kubernetes.core.k8s_info's result for kind Node and name ``name``), or an error naming
    ``host``, the Node and the fix when the cluster has no such Node."""
    resources = read.get("resources") if isinstance(read, Mapping) else None
    if not isinstance(resources, Sequence) or isinstance(resources, str):
        raise NodeNameError(f"node_of_host expects the result of kubernetes.core.k8s_info for {host}'s Node, got "
                            f"{str(read)[:200]!r}")
    if len(resources) != 1 or not isinstance(resources[0], Mapping):
        raise NodeNameError(
            f"{host}: no Node {name} in the cluster (kubectl get nodes). Set k8sgpu_node_name for the host to its "
            "Node's name, or leave the host out of the run.")
    return dict(resources[0])
