# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify role's results: one host's node-level result, and the summary table of every GPU host."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: verify_summary
version_added: 1.0.0
short_description: The verify role's summary table of every GPU host, and its failures
description:
  - One row per GPU host - inventory name, Node name (P(k8sgpu.nvidia.node_name#filter), V(?) where unknown), GPUs,
    driver, node-level result and in-cluster result - with each failed GPU's reason on a line of its own under
    its host's row.
  - The node-level result comes from the host variable C(verify_host) the role M(k8sgpu.nvidia.verify) sets
    (C(node_test), C(node_test_status), C(node_test_failures), see P(k8sgpu.nvidia.verify_node_result#filter)); a host
    without it shows C(not run (host failed or unreachable)). The in-cluster result comes from the registered result
    of M(k8sgpu.nvidia.k8s_gpu_verify), matched by Node name.
  - After the table, a section C(Not proven:) says what the checks that ran could not prove, which is not a
    failure - GPUs on the PCI bus (sysfs) with no NVIDIA driver loaded, so that no vectorAdd ran on them (a driver
    installed and waiting for a reboot, or a host with no real GPU such as the lab's node containers); and Jobs whose
    pod completed but whose log could not be read (status C(completed_no_logs), accepted with
    O(k8sgpu.nvidia.k8s_gpu_verify#module:require_logs=false), as on the lab's kwok Nodes).
positional: _input, hostvars, cluster
options:
  _input:
    description: Inventory names of the GPU hosts.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  cluster:
    description: The registered result of the M(k8sgpu.nvidia.k8s_gpu_verify) task (it may be skipped or failed).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: "{{ (groups['gpu_nodes'] | k8sgpu.nvidia.verify_summary(hostvars, cluster_result)).text }}"
"""

RETURN = r"""
_value:
  description: The table and the failures.
  type: dict
  contains:
    text:
      description: "The table, one line per host plus one per failure reason, then the C(Not proven:) section, if any."
      type: str
    failures:
      description: "Every failure: C(<host>: node test FAILED: <reason>) per failed GPU, and C(in cluster: <message>)."
      type: list
      elements: str
    unproven:
      description:
        - "What could not be proven, one line per group of hosts (C(<hosts>: <what was not proven and why>)); empty
          when everything that ran proved its part."
      type: list
      elements: str
      version_added: 1.1.0
"""

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.node_name import node_name

COLUMNS = ("HOST", "NODE", "GPUS", "DRIVER", "NODE TEST", "IN CLUSTER")
CLUSTER_CELL_CHARS = 90


def _gpu_failure(result: Mapping) -> str:
    """One failed GPU: the module's error (which starts with the GPU's index and name), with the GPU's UUID."""
    index = result.get("index")
    error = str(result.get("error") or "failed")
    uuid = result.get("uuid")
    label = f"GPU {index}"
    if uuid:
        # "GPU 1 (NVIDIA H100): 3 of ... wrong" -> "GPU 1 (NVIDIA H100) GPU-...: 3 of ... wrong"
        head, sep, rest = error.partition(": ")
        if sep and head.startswith(label):
            return f"{head} {uuid}: {rest}"
        return f"{label} {uuid}: {error}"
    return error if error.startswith(label) else f"{label}: {error}"


def verify_node_result(result: Any) -> dict:
    """The registered result of k8sgpu.nvidia.cuda_vector_add as status (passed, failed, skipped), a short text and
    the reasons: one line per failed GPU (index, name, UUID, error), or the module's message when no GPU result
    says why (no driver, no such GPU index, cuInit failed)."""
    if not isinstance(result, Mapping):
        raise AnsibleFilterError(f"verify_node_result expects the registered result of cuda_vector_add, got {result!r}")
    if result.get("skipped"):
        return {"status": "skipped", "text": "skipped (no GPU or driver)", "failures": []}
    gpus = [r for r in result.get("results") or [] if isinstance(r, Mapping)]
    bad = [r for r in gpus if not r.get("passed")]
    if result.get("failed") or bad or not gpus:
        failures = [_gpu_failure(r) for r in bad] or [str(result.get("msg") or "cuda_vector_add failed without a message")]
        text = f"FAILED on {len(bad)} of {len(gpus)} GPU(s)" if bad else "FAILED"
        return {"status": "failed", "text": text, "failures": failures}
    times = "/".join(f"{round(float(r.get('time_ms') or 0.0), 2):g}" for r in gpus)
    return {"status": "passed", "text": f"passed on {len(gpus)} GPU(s), {times} ms", "failures": []}


def _node(host: str, hostvars: Any) -> str:
    try:
        return node_name(host, hostvars)
    except AnsibleFilterError:
        return "?"


def _gpus_cell(vh: Mapping) -> str:
    found = list(vh.get("gpus") or [])
    if found:
        return f"{len(found)} x {found[0]}"
    return f"{vh.get('pci_devices', 0)} in sysfs, no driver"


def _unproven(no_driver: dict[int, list[str]], no_logs: list[str]) -> list[str]:
    """What the checks that ran could not prove, one line each: GPUs on the PCI bus with no driver to run vectorAdd
    on them, and Jobs whose "Test PASSED" could not be read."""
    lines = [
        f"{', '.join(hosts)}: {count} GPU(s) on the PCI bus, but no NVIDIA driver loaded: no vectorAdd ran on them, so "
        "neither the driver nor the GPUs are proven to work (the driver loads after a reboot; a host with no real "
        "GPU, as the lab's node containers, never loads it)"
        for count, hosts in sorted(no_driver.items())]
    if no_logs:
        lines.append(
            f"{', '.join(no_logs)}: in cluster, the Job's pod completed but its log, where cuda-vector-add writes "
            "'Test PASSED', could not be read: the GPU was allocated and the pod ran, its result is not proven (a Node "
            "that runs no containers, as the lab's kwok Nodes, gives no logs)")
    return lines


def verify_summary(hosts: Sequence[str], hostvars: Any, cluster: Any) -> dict:
    """The summary table (text), the list of failures, and what the checks could not prove (``unproven``), from each
    host's verify_host and the registered k8s_gpu_verify result. A failed node-level test lists each failed GPU under
    its host's row; the table is followed by a "Not proven" section when something could not be proven."""
    if isinstance(hosts, str) or not isinstance(hosts, Sequence):
        raise AnsibleFilterError(f"verify_summary expects a list of inventory hosts, got {hosts!r}")
    cluster = cluster if isinstance(cluster, Mapping) else {}
    cluster_results = [r for r in cluster.get("results") or [] if isinstance(r, Mapping)]
    by_node = {r.get("node"): r for r in cluster_results}
    rows: list[tuple[list[str], list[str]]] = []
    failures: list[str] = []
    no_driver: dict[int, list[str]] = {}
    no_logs: list[str] = []
    for host in hosts:
        hv = hostvars[host]
        vh = hv.get("verify_host") or {}
        node = _node(host, hostvars)
        details: list[str] = []
        if vh:
            node_text = str(vh.get("node_test") or "?")
            if vh.get("node_test_status") == "failed":
                for reason in vh.get("node_test_failures") or [node_text]:
                    details.append(f"{host}: {reason}")
                    failures.append(f"{host}: node test FAILED: {reason}")
            in_sysfs = int(vh.get("pci_devices") or 0)
            if not vh.get("gpus") and in_sysfs > 0 and vh.get("node_test_status") != "failed":
                no_driver.setdefault(in_sysfs, []).append(host)
        else:
            node_text = "not run (host failed or unreachable)"
        r = by_node.get(node)
        if r and r.get("status") == "completed_no_logs":
            no_logs.append(host)
        if r:
            reason = str(r.get("reason") or "")
            cluster_text = f"{r.get('status')}: {reason[:CLUSTER_CELL_CHARS]}"
            if len(reason) > CLUSTER_CELL_CHARS:
                details.append(f"{host}: in cluster: {r.get('status')}: {reason}")
        elif cluster.get("skipped"):
            cluster_text = "not run"
        elif cluster.get("failed") and not cluster_results:
            cluster_text = f"FAILED: {str(cluster.get('msg') or '')[:CLUSTER_CELL_CHARS]}"
        else:
            cluster_text = "no result"
        cells = [host, node, _gpus_cell(vh) if vh else "?", str(vh.get("driver") or "?"), node_text, cluster_text]
        rows.append((cells, details))
    if cluster.get("failed"):
        failures.append(f"in cluster: {cluster.get('msg') or 'k8s_gpu_verify failed'}")
    widths = [max([len(title)] + [len(row[0][i]) for row in rows]) for i, title in enumerate(COLUMNS[:-1])]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + cells[-1]

    out = [line(COLUMNS)]
    for cells, details in rows:
        out.append(line(cells))
        out.extend(f"    {d}" for d in details)
    unproven = _unproven(no_driver, no_logs)
    if unproven:
        out.append("Not proven:")
        out.extend(f"    {u}" for u in unproven)
    return {"text": "\n".join(out), "failures": failures, "unproven": unproven}


class FilterModule:
    def filters(self) -> dict:
        return {"verify_summary": verify_summary}
