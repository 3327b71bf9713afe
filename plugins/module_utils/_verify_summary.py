# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters verify_summary and verify_node_result of the verify role).

The verify role's results: one host's node-level result, and the summary table of every GPU host."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._node_name import NodeNameError, node_name


class VerifySummaryError(ValueError):
    """Input that is not what the verify role registers."""


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
        raise VerifySummaryError(f"verify_node_result expects the registered result of cuda_vector_add, got {result!r}")
    if result.get("skipped"):
        return {"status": "skipped", "text": "skipped (no GPU or driver)", "failures": []}
    gpus = [r for r in result.get("gpus") or [] if isinstance(r, Mapping)]
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
    except NodeNameError:
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


def _kernels_line(host: str, kernels: Any) -> str:
    """One line for the NVIDIA module of every installed kernel (the driver role's ``driver_result.kernels``, lines
    ``<release>: <status> - <detail>``): each kernel with its status, the detail where it is not ok."""
    cells = []
    for line in kernels if isinstance(kernels, Sequence) and not isinstance(kernels, str) else []:
        release, _sep, rest = str(line).partition(": ")
        status, _sep, detail = rest.partition(" - ")
        cells.append(f"{release} {status}" + (f" ({detail})" if status != "ok" and detail else ""))
    return f"{host}: NVIDIA module per kernel: {', '.join(cells)}" if cells else ""


def verify_summary(hosts: Sequence[str], hostvars: Any, cluster: Any) -> dict:
    """The summary table (text), the list of failures, and what the checks could not prove (``unproven``), from each
    host's verify_host and the registered k8s_gpu_verify result. A failed node-level test lists each failed GPU under
    its host's row; the table is followed by a "Not proven" section when something could not be proven."""
    if isinstance(hosts, str) or not isinstance(hosts, Sequence):
        raise VerifySummaryError(f"verify_summary expects a list of inventory hosts, got {hosts!r}")
    cluster = cluster if isinstance(cluster, Mapping) else {}
    cluster_results = [r for r in cluster.get("jobs") or [] if isinstance(r, Mapping)]
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
            kernels = _kernels_line(host, vh.get("kernels"))
            if kernels:
                details.append(kernels)
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
