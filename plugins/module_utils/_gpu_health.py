# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the GPU health read of k8sgpu.nvidia.gpu_health.

Not a public API; modules of this collection only. Free of AnsibleModule: nvidia-smi and dmesg are reached through a
callable (args -> (rc, stdout, stderr)), the kernel log through a path or that callable, so every rule is unit-tested
with recorded outputs and fake sysfs/proc trees. The XML and sysfs readers are those of gpu_facts (_nvidia_smi.py).

Each finding is classified as one of STATUSES, in increasing order of what the GPU needs; a GPU's status is its worst
finding's, the host's the worst of its GPUs'. Where each rule comes from is in RULES and in the module's
DOCUMENTATION (keep both in step).
"""
from __future__ import annotations

import datetime
import errno
import os
import re
import xml.etree.ElementTree as ET
from typing import Any, Callable

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import (
    MISMATCH_TEXT,
    XML_ARGS,
    GpuFactsError,
    _first_line,
    _int,
    _text,
    mismatch_message,
    parse_proc_version,
    pci_devices_path,
    pci_key,
    proc_version_path,
    scan_pci_devices,
    smi_xml_root,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvswitch import FABRIC_DOC, fabric_problem, read_fabric

Runner = Callable[[list], "tuple[int, str, str]"]

STATUSES = ("healthy", "degraded", "needs_reset", "needs_reboot", "replace")
_RANK = {status: rank for rank, status in enumerate(STATUSES)}

KMSG_PATH = "/dev/kmsg"
DMESG_ARGS = ("-r",)
JOURNAL_ARGS = ("-k", "-b", "-o", "short-monotonic", "--no-pager", "-q")
KERNEL_LOG_SOURCES = ("auto", "kmsg", "dmesg", "journal", "none")

_NO_DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"
_NO_DEVICES_TEXT = "No devices were found"
# nvidia-smi, when it cannot open one GPU: "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
# (newer drivers: "...: GPU is lost.  Reboot the system to recover this GPU").
_LOST_RE = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.\d)"
                      r"\s*:\s*(.*)")

# The sources the rules cite (DOCUMENTATION lists the same).
XID_CATALOG = "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors)"
ROW_REMAP_DOC = "NVIDIA GPU memory error management, row remapping (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt)"
DPR_DOC = "NVIDIA Dynamic Page Retirement (docs.nvidia.com/deploy/dpr-whitepaper)"
RECOVERY_DOC = "NVML nvmlDeviceGetGpuRecoveryAction / GPU memory error management, recovery action flag"
SMI_DOC = "nvidia-smi documentation, clocks event reasons (docs.nvidia.com/deploy/nvidia-smi)"

# Xid code -> (status, the catalog's resolution, what it is). Codes not listed are "degraded": look them up.
XID_RULES: dict[int, tuple[str, str, str]] = {
    13: ("healthy", "RESTART_APP", "graphics engine exception, an application error"),
    31: ("healthy", "RESTART_APP", "GPU memory page fault (MMU fault), an application error"),
    43: ("healthy", "RESTART_APP", "GPU stopped processing the application's channel"),
    45: ("healthy", "IGNORE", "channel torn down after the application exited or was killed"),
    48: ("needs_reset", "RESET_GPU", "double-bit (uncorrectable) ECC error"),
    61: ("needs_reset", "RESET_GPU", "internal micro-controller breakpoint/warning"),
    62: ("needs_reset", "RESET_GPU", "internal micro-controller halt"),
    63: ("degraded", "the remapping is applied at the next GPU reset (remapped_rows.pending says whether it still is)",
         "row remapping or page retirement recorded"),
    64: ("needs_reset", "RESET_GPU", "row remapping or page retirement failed to be recorded"),
    74: ("needs_reset", "RESET_GPU", "NVLink error"),
    79: ("needs_reboot", "RESTART_BM", "the GPU has fallen off the bus"),
    92: ("degraded", "watch the single-bit error rate", "high single-bit ECC error rate"),
    94: ("degraded", "RESTART_APP", "contained ECC error: only the application that used the memory is affected"),
    95: ("needs_reset", "RESET_GPU", "uncontained ECC error: every application on the GPU is affected"),
    119: ("needs_reset", "RESET_GPU", "GSP RPC timeout"),
    120: ("needs_reset", "RESET_GPU", "GSP error"),
    140: ("needs_reset", "RESET_GPU", "unrecovered ECC error"),
}

# gpu_recovery_action text (nvidia-smi) or the name in Xid 154's message -> status. NVML's enum
# (nvmlDeviceGpuRecoveryAction_t): 0 None, 1 GPU Reset, 2 Node Reboot, 3 Drain P2P, 4 Drain and Reset,
# 5 Recover IMEX Domain, 6 Bus Reset, 7 System Reboot.
RECOVERY_ACTIONS: dict[str, str] = {
    "none": "healthy",
    "gpu reset": "needs_reset", "reset": "needs_reset", "reset required": "needs_reset",
    "node reboot": "needs_reboot", "reboot": "needs_reboot", "reboot required": "needs_reboot",
    "drain p2p": "degraded",
    "drain and reset": "needs_reset", "drain p2p and reset": "needs_reset",
    "recover imex domain": "degraded",
    "bus reset": "needs_reset",
    "system reboot": "needs_reboot",
}
RECOVERY_ACTION_CODES = {0: "none", 1: "gpu reset", 2: "node reboot", 3: "drain p2p", 4: "drain and reset",
                         5: "recover imex domain", 6: "bus reset", 7: "system reboot"}

CLOCK_EVENTS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

# A GPU retires at most 64 pages over its life (row-remapping doc, "Page Retirement for Legacy GPUs").
RETIRED_PAGES_MAX = 64


def worst(statuses) -> str:
    return max(statuses, key=lambda s: _RANK[s], default="healthy")


def _finding(check: str, status: str, detail: str, source: str) -> dict:
    return {"check": check, "status": status, "detail": detail, "source": source}


# --- nvidia-smi -q -x, per GPU --------------------------------------------------------------------------------------

def _count(gpu: ET.Element, path: str) -> int | None:
    return _int(_text(gpu, path))


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("yes", "active", "true", "1"):
        return True
    if lowered in ("no", "not active", "false", "0"):
        return False
    return None  # N/A, [Not Supported], "Requested functionality has been deprecated"


def _sum(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ecc_scope(gpu: ET.Element, scope: str) -> dict:
    """One of volatile/aggregate: driver 535 (sram_uncorrectable), 550+ (parity and SEC-DED), older (single/double)."""
    base = f"ecc_errors/{scope}"
    parity = _count(gpu, f"{base}/sram_uncorrectable_parity")
    secded = _count(gpu, f"{base}/sram_uncorrectable_secded")
    sram_unc = _count(gpu, f"{base}/sram_uncorrectable")
    if sram_unc is None:
        sram_unc = _sum(parity, secded)
    counts = {
        "sram_correctable": _count(gpu, f"{base}/sram_correctable"),
        "sram_uncorrectable": sram_unc,
        "sram_uncorrectable_parity": parity,
        "sram_uncorrectable_secded": secded,
        "dram_correctable": _count(gpu, f"{base}/dram_correctable"),
        "dram_uncorrectable": _count(gpu, f"{base}/dram_uncorrectable"),
    }
    correctable = _sum(counts["sram_correctable"], counts["dram_correctable"])
    uncorrectable = _sum(counts["sram_uncorrectable"], counts["dram_uncorrectable"])
    # Drivers before 535: single_bit/double_bit, each with a total.
    counts["correctable"] = correctable if correctable is not None else _count(gpu, f"{base}/single_bit/total")
    counts["uncorrectable"] = uncorrectable if uncorrectable is not None else _count(gpu, f"{base}/double_bit/total")
    return counts


def _clock_events(gpu: ET.Element) -> dict:
    events = {}
    for name in CLOCK_EVENTS:
        value = _text(gpu, f"clocks_event_reasons/clocks_event_reason_{name}")
        if value is None:  # drivers before 535: clocks_throttle_reasons
            value = _text(gpu, f"clocks_throttle_reasons/clocks_throttle_reason_{name}")
        events[name] = _yes(value)
    return events


def _banks(value: str | None) -> int | None:
    match = re.match(r"^\s*(\d+)", value or "")
    return int(match.group(1)) if match else None


def read_gpu(gpu: ET.Element, position: int) -> dict:
    """The health fields of one <gpu> of ``nvidia-smi -q -x`` (no findings yet)."""
    recovery = _text(gpu, "gpu_recovery_action")
    fabric_state, fabric_status = read_fabric(gpu)
    return {
        "index": position,
        "uuid": _text(gpu, "uuid"),
        "name": _text(gpu, "product_name"),
        "pci_bus_id": _text(gpu, "pci/pci_bus_id", gpu.get("id")),
        "source": "nvidia-smi",
        "persistence_mode": _text(gpu, "persistence_mode", "N/A"),
        "ecc_mode": _text(gpu, "ecc_mode/current_ecc", "N/A"),
        "ecc_errors": {
            "volatile": _ecc_scope(gpu, "volatile"),
            "aggregate": _ecc_scope(gpu, "aggregate"),
            "sram_threshold_exceeded": _yes(_text(gpu, "ecc_errors/aggregate/sram_threshold_exceeded")),
            "channel_repair_pending": _yes(_text(gpu, "ecc_errors/channel_repair_pending")),
            "tpc_repair_pending": _yes(_text(gpu, "ecc_errors/tpc_repair_pending")),
            "unrepairable_memory": _yes(_text(gpu, "ecc_errors/unrepairable_memory")),
        },
        "retired_pages": {
            "single_bit": _count(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"),
            "double_bit": _count(gpu, "retired_pages/double_bit_retirement/retired_count"),
            "pending": _yes(_text(gpu, "retired_pages/pending_retirement")),
        },
        "remapped_rows": {
            "correctable": _count(gpu, "remapped_rows/remapped_row_corr"),
            "uncorrectable": _count(gpu, "remapped_rows/remapped_row_unc"),
            "pending": _yes(_text(gpu, "remapped_rows/remapped_row_pending")),
            "failure": _yes(_text(gpu, "remapped_rows/remapped_row_failure")),
            "banks_without_spare_rows": _banks(
                _text(gpu, "remapped_rows/row_remapper_histogram/row_remapper_histogram_none")),
        },
        "recovery_action": recovery,
        "reset_status": {
            "reset_required": _yes(_text(gpu, "gpu_reset_status/reset_required")),
            "drain_and_reset_recommended": _yes(_text(gpu, "gpu_reset_status/drain_and_reset_recommended")),
        },
        "clock_event_reasons": _clock_events(gpu),
        "fabric_state": fabric_state,
        "fabric_status": fabric_status,
        "xid_events": [],
        "findings": [],
        "status": "healthy",
    }


def classify_gpu(gpu: dict) -> list[dict]:
    """The findings of one GPU's nvidia-smi fields (the kernel log's are added by attach_xid_events)."""
    found = []
    ecc = gpu["ecc_errors"]
    vol, agg = ecc["volatile"], ecc["aggregate"]
    if vol["dram_uncorrectable"]:
        found.append(_finding(
            "ecc_volatile_dram_uncorrectable", "needs_reset",
            f"{vol['dram_uncorrectable']} uncorrectable (double-bit) DRAM ECC error(s) since the last driver load or "
            "GPU reset", f"{XID_CATALOG}: Xid 48/95, RESET_GPU"))
    if vol["sram_uncorrectable"]:
        found.append(_finding(
            "ecc_volatile_sram_uncorrectable", "needs_reset",
            f"{vol['sram_uncorrectable']} uncorrectable SRAM ECC error(s) since the last driver load or GPU reset",
            f"{XID_CATALOG}: Xid 95, RESET_GPU"))
    if vol["dram_uncorrectable"] is None and vol["sram_uncorrectable"] is None and vol["uncorrectable"]:
        found.append(_finding(
            "ecc_volatile_uncorrectable", "needs_reset",
            f"{vol['uncorrectable']} uncorrectable (double-bit) ECC error(s) since the last driver load or GPU reset",
            f"{XID_CATALOG}: Xid 48, RESET_GPU"))
    if not vol["uncorrectable"] and agg["uncorrectable"]:
        found.append(_finding(
            "ecc_aggregate_uncorrectable", "healthy",
            f"{agg['uncorrectable']} uncorrectable ECC error(s) over the GPU's life, none since the last reset",
            f"{ROW_REMAP_DOC}: handled by row remapping; the remapping flags decide"))
    if ecc["sram_threshold_exceeded"]:
        found.append(_finding(
            "ecc_sram_threshold_exceeded", "replace",
            "the aggregate uncorrectable SRAM error count is past NVIDIA's field diagnostic threshold",
            "NVML nvmlEccSramErrorStatus_v1_t.bThresholdExceeded: run NVIDIA field diagnostics, RMA"))
    if ecc["unrepairable_memory"]:
        found.append(_finding("ecc_unrepairable_memory", "replace", "the GPU reports memory it cannot repair",
                              f"{ROW_REMAP_DOC}: RMA policy"))
    for check in ("channel_repair_pending", "tpc_repair_pending"):
        if ecc[check]:
            found.append(_finding(f"ecc_{check}", "needs_reset",
                                  f"{check.replace('_', ' ')}: the repair is applied at the next GPU reset",
                                  f"{ROW_REMAP_DOC}: RAS repair, applied by a GPU reset"))

    rows = gpu["remapped_rows"]
    if rows["failure"]:
        found.append(_finding("remapped_rows_failure", "replace",
                              "a row remapping failed: a memory bank has no spare row left",
                              f"{ROW_REMAP_DOC}: RMA policy thresholds for row remapping"))
    if rows["pending"]:
        found.append(_finding("remapped_rows_pending", "needs_reset",
                              "a row remapping is pending; it takes effect at the next GPU reset",
                              f"{ROW_REMAP_DOC}: row-remapping pending flag"))
    if rows["banks_without_spare_rows"] and not rows["failure"]:
        found.append(_finding("remapped_rows_no_spare", "degraded",
                              f"{rows['banks_without_spare_rows']} memory bank(s) have no spare row left; the next "
                              "remapping there fails", f"{ROW_REMAP_DOC}: row remapper histogram"))

    pages = gpu["retired_pages"]
    if pages["pending"]:
        found.append(_finding("retired_pages_pending", "needs_reset",
                              "a page retirement is pending; it takes effect when the driver reloads or the GPU resets",
                              f"{DPR_DOC}: retirement takes effect on driver reload"))
    retired = _sum(pages["single_bit"], pages["double_bit"])
    if retired is not None and retired >= RETIRED_PAGES_MAX:
        found.append(_finding("retired_pages_exhausted", "replace",
                              f"{retired} pages retired, the most a GPU can retire ({RETIRED_PAGES_MAX})",
                              f"{ROW_REMAP_DOC}: page retirement supports at most {RETIRED_PAGES_MAX} retirements"))

    action = gpu["recovery_action"]
    if action is not None and action.upper() != "N/A":
        status = RECOVERY_ACTIONS.get(action.strip().lower())
        if status is None:
            found.append(_finding("recovery_action", "degraded",
                                  f"gpu_recovery_action is {action!r}, which this module does not know",
                                  f"{RECOVERY_DOC}: check NVIDIA's documentation of the value"))
        elif status != "healthy":
            found.append(_finding("recovery_action", status, f"the driver's recovery action is {action!r}",
                                  f"{RECOVERY_DOC}"))

    reset = gpu["reset_status"]
    if reset["reset_required"]:
        found.append(_finding("reset_required", "needs_reset", "nvidia-smi reports that the GPU needs a reset",
                              "nvidia-smi gpu_reset_status.reset_required"))
    if reset["drain_and_reset_recommended"]:
        found.append(_finding("drain_and_reset_recommended", "needs_reset",
                              "nvidia-smi recommends draining the GPU's work and resetting it",
                              "nvidia-smi gpu_reset_status.drain_and_reset_recommended"))

    # NVSwitch systems: a GPU that nvidia-fabricmanager has not registered (or failed to) runs no CUDA work, so it
    # is taken out of service as needs_reset is (the default gpu_health_taint_from). The health read after any
    # recovery reads the fabric again: a fabric manager that is not running keeps the GPU out until it registers it.
    fabric = fabric_problem(gpu["fabric_state"], gpu["fabric_status"])
    if fabric:
        found.append(_finding(fabric[0], "needs_reset", fabric[1], FABRIC_DOC))

    for name, active in gpu["clock_event_reasons"].items():
        if active:
            found.append(_finding(f"clocks_{name}", "degraded",
                                  f"clock event reason {name} is active: the GPU runs below its clocks",
                                  f"{SMI_DOC}: {name.replace('_', ' ')}"))

    if gpu["persistence_mode"] == "Disabled":
        found.append(_finding("persistence_mode_disabled", "healthy",
                              "persistence mode is off: the driver tears the GPU down when no client holds it",
                              "NVIDIA driver persistence documentation: keep it on (nvidia-persistenced)"))
    if gpu["ecc_mode"] == "Disabled":
        found.append(_finding("ecc_disabled", "healthy", "ECC is off: memory errors are neither corrected nor counted",
                              "nvidia-smi ecc_mode.current_ecc"))
    return found


# --- the kernel log -------------------------------------------------------------------------------------------------

_KMSG_RE = re.compile(r"^\s*\d+,\d+,(\d+),[^;]*;(.*)$")
_BRACKET_RE = re.compile(r"^(?:<\d+>)?\[\s*(\d+(?:\.\d+)?)\]\s?(.*)$")
_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2})(?:\.[0-7])?\):"
                     r"\s*(\d+),\s*(.*)$")
_PID_RE = re.compile(r"^pid=([^,]*),\s*")
_NAME_RE = re.compile(r"^name=([^,]*),\s*")
_RECOVERY_TO_RE = re.compile(r"to\s+0x([0-9A-Fa-f]+)\s*(?:\(([^)]*)\))?")


def parse_log_line(line: str) -> tuple[float | None, str]:
    """(seconds since boot or None, message) of one kernel log line.

    Understood: /dev/kmsg records (``6,1234,5678901,-;message``, microseconds), ``dmesg -r`` (``<6>[ 12.345678]
    message``), ``dmesg`` and ``journalctl -k -o short-monotonic`` (``[ 12.345678] ...``); anything else has no time.
    """
    match = _KMSG_RE.match(line)
    if match:
        return int(match.group(1)) / 1e6, match.group(2)
    match = _BRACKET_RE.match(line)
    if match:
        return float(match.group(1)), match.group(2)
    return None, line


def classify_xid(code: int, message: str) -> tuple[str, str]:
    """(status, rule source) of one Xid."""
    if code == 154:
        match = _RECOVERY_TO_RE.search(message)
        name = None
        if match:
            name = (match.group(2) or "").strip().lower() or RECOVERY_ACTION_CODES.get(int(match.group(1), 16))
            if name not in RECOVERY_ACTIONS:
                name = RECOVERY_ACTION_CODES.get(int(match.group(1), 16), name)
        status = RECOVERY_ACTIONS.get(name or "")
        if status is None:
            return "degraded", f"{XID_CATALOG}: Xid 154, recovery action changed (value not recognised)"
        return status, f"{XID_CATALOG}: Xid 154, recovery action changed to {name!r} ({RECOVERY_DOC})"
    rule = XID_RULES.get(code)
    if rule is None:
        return "degraded", f"{XID_CATALOG}: Xid {code} is not in this module's table; look it up"
    status, action, what = rule
    return status, f"{XID_CATALOG}: Xid {code}, {what}; {action}"


def parse_xid_events(lines, since: float = 0.0) -> tuple[list[dict], int]:
    """(Xid events at or after ``since`` seconds since boot, lines read). Lines without a time are kept."""
    events = []
    count = 0
    for line in lines:
        count += 1
        time, message = parse_log_line(line.rstrip("\n"))
        match = _XID_RE.search(message)
        if not match:
            continue
        if time is not None and time < since:
            continue
        address, code, rest = match.group(1), int(match.group(2)), match.group(3).strip()
        pid = name = None
        pid_match = _PID_RE.match(rest)
        if pid_match:
            pid, rest = pid_match.group(1).strip("'"), rest[pid_match.end():]
            name_match = _NAME_RE.match(rest)
            if name_match:
                name, rest = name_match.group(1).strip("'"), rest[name_match.end():]
        status, source = classify_xid(code, rest)
        events.append({
            "code": code,
            "pci_bus_id": pci_key(address),
            "time": time,
            "pid": pid,
            "process": name,
            "message": rest,
            "status": status,
            "source": source,
        })
    return events, count


def read_kmsg(path: str = KMSG_PATH) -> list[str]:
    """Every record of the kernel's ring buffer, read from /dev/kmsg without blocking (its header keeps the time)."""
    records = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                data = os.read(fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the record was overwritten while we read: go on with the next one
                    continue
                raise
            if not data:
                break
            # A record's continuation lines (" SUBSYSTEM=...") carry no message.
            records.append(data.decode("utf-8", errors="replace").split("\n", 1)[0])
    finally:
        os.close(fd)
    return records


def read_kernel_log(source: str, run: Runner, *, path: str | None, dmesg: str | None, journalctl: str | None,
                    kmsg_path: str = KMSG_PATH) -> tuple[list[str], str, list[str]]:
    """(lines, what was read, warnings). ``source`` is one of KERNEL_LOG_SOURCES; the file ``path`` when set."""
    warnings: list[str] = []
    if path is not None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read().splitlines(), path, warnings
        except OSError as exc:
            raise GpuFactsError(f"Could not read the kernel log file {path} (kernel_log_path): "
                                f"{exc.strerror or exc}") from None
    if source == "none":
        return [], "none", warnings
    if source in ("auto", "kmsg"):
        try:
            return read_kmsg(kmsg_path), kmsg_path, warnings
        except OSError as exc:
            why = f"{kmsg_path} could not be read ({exc.strerror or exc})"
            if source == "kmsg":
                raise GpuFactsError(f"{why}; run as root (CAP_SYSLOG), or choose kernel_log=dmesg or journal") from None
            warnings.append(f"{why}; reading 'dmesg -r' instead.")
    if source in ("auto", "dmesg"):
        if dmesg is None:
            if source == "dmesg":
                raise GpuFactsError("dmesg was not found on PATH; install util-linux or choose kernel_log=kmsg")
        else:
            rc, out, err = run([dmesg, *DMESG_ARGS])
            if rc == 0:
                return out.splitlines(), f"{dmesg} -r", warnings
            why = f"'{dmesg} -r' failed (rc={rc}): {_first_line(out, err)}"
            if source == "dmesg":
                raise GpuFactsError(f"{why}; run as root, or set kernel.dmesg_restrict=0") from None
            warnings.append(why)
    if source == "journal":
        if journalctl is None:
            raise GpuFactsError("journalctl was not found on PATH; choose kernel_log=kmsg or dmesg")
        rc, out, err = run([journalctl, *JOURNAL_ARGS])
        if rc != 0:
            raise GpuFactsError(f"'{journalctl} {' '.join(JOURNAL_ARGS)}' failed (rc={rc}): {_first_line(out, err)}")
        return out.splitlines(), f"{journalctl} {' '.join(JOURNAL_ARGS)}", warnings
    warnings.append("No kernel log could be read; Xid events are not part of this health read.")
    return [], "none", warnings


def parse_since(value: Any, proc_root: str = "/proc", now: float | None = None) -> float:
    """``since`` as seconds since boot: a number is taken as that; an ISO 8601 time is converted with the boot time
    (now minus <proc_root>/uptime). Earlier than the boot gives 0."""
    if value is None or value == "":
        return 0.0
    text = str(value).strip()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise GpuFactsError(f"since={text!r} is neither seconds since boot (a number) nor an ISO 8601 time "
                            "(2026-11-29T04:00:00Z)") from None
    epoch = moment.timestamp()  # a time without an offset is the host's local time
    uptime_file = os.path.join(proc_root, "uptime")
    try:
        with open(uptime_file, encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError) as exc:
        raise GpuFactsError(f"Could not read the uptime from {uptime_file} to convert since={text!r}: {exc}") from None
    boot = (now if now is not None else datetime.datetime.now(datetime.timezone.utc).timestamp()) - uptime
    return max(epoch - boot, 0.0)


# --- the whole ------------------------------------------------------------------------------------------------------

def _missing_gpu(device: dict, finding: dict) -> dict:
    return {
        "index": None, "uuid": None, "name": None, "pci_bus_id": device["pci_bus_id"], "source": "sysfs",
        "persistence_mode": None, "ecc_mode": None, "ecc_errors": None, "retired_pages": None,
        "remapped_rows": None, "recovery_action": None,
        "reset_status": None, "clock_event_reasons": None, "fabric_state": None, "fabric_status": None,
        "xid_events": [], "findings": [finding],
        "status": finding["status"],
    }


def attach_xid_events(gpus: list[dict], events: list[dict]) -> None:
    """Give each event the index of its GPU, add it to that GPU (a GPU entry of source kernel_log where none has the
    address) and to its findings."""
    by_key = {pci_key(gpu["pci_bus_id"]): gpu for gpu in gpus}
    for event in events:
        gpu = by_key.get(event["pci_bus_id"])
        if gpu is None:
            gpu = _missing_gpu({"pci_bus_id": event["pci_bus_id"]}, _finding(
                "not_on_pci_bus", "healthy", "the kernel logged Xid events for this address; no GPU has it now",
                "sysfs and nvidia-smi"))
            gpu["source"] = "kernel_log"
            gpus.append(gpu)
            by_key[event["pci_bus_id"]] = gpu
        event["gpu_index"] = gpu["index"]
        gpu["xid_events"].append(event)
        gpu["findings"].append(_finding(f"xid_{event['code']}", event["status"],
                                        f"Xid {event['code']} at {_when(event['time'])}: {event['message']}",
                                        event["source"]))


def _when(time: float | None) -> str:
    return "an unknown time" if time is None else f"{time:.6f} s after boot"


def summarize(gpus: list[dict]) -> dict:
    for gpu in gpus:
        gpu["status"] = worst(f["status"] for f in gpu["findings"])
    counts = {status: sum(1 for g in gpus if g["status"] == status) for status in STATUSES}
    unhealthy = [
        {"index": g["index"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"], "status": g["status"],
         "checks": [f["check"] for f in g["findings"] if f["status"] == g["status"]]}
        for g in gpus if g["status"] != "healthy"
    ]
    return {"status": worst(g["status"] for g in gpus), "gpu_count": len(gpus), "counts": counts,
            "unhealthy_gpus": unhealthy}


def read_smi(run: Runner, nvidia_smi: str, *, proc_root: str, kernel_version: str | None, hostname: str,
             warnings: list) -> tuple[ET.Element | None, list[tuple[str, str]]]:
    """(the XML root or None, [(lost PCI address, nvidia-smi's reason)]). Raises GpuFactsError on what must fail."""
    cmd = " ".join([nvidia_smi, *XML_ARGS])
    rc, out, err = run([nvidia_smi, *XML_ARGS])
    output = f"{out}\n{err}"
    if MISMATCH_TEXT in output:
        raise GpuFactsError(f"{hostname}: {mismatch_message(output, proc_root, kernel_version)}")
    if _NO_DRIVER_TEXT in output:
        raise GpuFactsError(f"{hostname}: '{cmd}' could not communicate with the NVIDIA driver (rc={rc}); check "
                            "'dmesg' for NVRM errors, then load the driver (modprobe nvidia) or reboot.")
    lost = [(m.group(1), m.group(2).strip()) for m in _LOST_RE.finditer(output)]
    root = None
    try:
        root = smi_xml_root(out)
    except ValueError as exc:
        if rc == 0 or not (lost or _NO_DEVICES_TEXT in output):
            raise GpuFactsError(f"{hostname}: '{cmd}' "
                                + (f"failed (rc={rc}): {_first_line(out, err)}" if rc else
                                   f"gave output that could not be parsed: {exc}")) from None
    if rc != 0:
        warnings.append(f"'{cmd}' exited with rc={rc}: {_first_line(out, err)}")
    return root, lost


def gather(run: Runner, nvidia_smi: str | None, *, sysfs_root: str = "/sys", proc_root: str = "/proc",
           kernel_log: str = "auto", kernel_log_path: str | None = None, since: Any = None,
           dmesg: str | None = None, journalctl: str | None = None, kmsg_path: str = KMSG_PATH,
           hostname: str = "localhost", nvidia_smi_missing_reason: str | None = None) -> tuple[dict, list[str]]:
    """Return (result, warnings): the module's RETURN values. Raises GpuFactsError for what the module fails on."""
    warnings: list[str] = []
    version_file = proc_version_path(proc_root)
    if not os.path.exists(version_file):
        raise GpuFactsError(
            f"{hostname}: the NVIDIA kernel module is not loaded ({version_file} does not exist), so the GPUs' "
            "health cannot be read. Load it ('modprobe nvidia'), or install the driver (role k8sgpu.nvidia.driver); "
            "if it fails to load, 'dmesg' says why.")
    with open(version_file, encoding="utf-8", errors="replace") as fh:
        kernel_version, _flavour = parse_proc_version(fh.read())
    if nvidia_smi is None:
        raise GpuFactsError(
            f"{hostname}: {nvidia_smi_missing_reason or 'nvidia-smi was not found'}; the GPUs' health is read from "
            "'nvidia-smi -q -x'. Install the driver's utilities (Debian: nvidia-smi; Ubuntu: "
            "nvidia-utils-<branch>[-server]), or set nvidia_smi to its path.")
    since_s = parse_since(since, proc_root)

    root, lost = read_smi(run, nvidia_smi, proc_root=proc_root, kernel_version=kernel_version, hostname=hostname,
                          warnings=warnings)
    gpus = [read_gpu(elem, position) for position, elem in enumerate(root.findall("gpu") if root is not None else [])]
    for gpu in gpus:
        gpu["findings"] = classify_gpu(gpu)

    # NVIDIA GPUs on the PCI bus that nvidia-smi does not show.
    seen = {pci_key(gpu["pci_bus_id"]) for gpu in gpus}
    lost_by_key = {pci_key(address): reason for address, reason in lost}
    for device in scan_pci_devices(sysfs_root):
        if not device["gpu"] or pci_key(device["pci_bus_id"]) in seen:
            continue
        if device["driver"] not in ("nvidia", None):
            continue  # bound to vfio-pci, nouveau...: not the nvidia driver's GPU
        reason = lost_by_key.pop(pci_key(device["pci_bus_id"]), None)
        detail = (f"nvidia-smi cannot open this GPU ({reason})" if reason else
                  f"the GPU is on the PCI bus ({pci_devices_path(sysfs_root)}) but nvidia-smi does not show it")
        gpus.append(_missing_gpu(device, _finding(
            "missing_from_nvidia_smi", "needs_reboot", f"{detail}: it has most likely fallen off the bus",
            f"{XID_CATALOG}: Xid 79, RESTART_BM")))
    for address, reason in lost_by_key.items():  # named by nvidia-smi, gone from sysfs
        gpus.append(_missing_gpu({"pci_bus_id": address}, _finding(
            "missing_from_nvidia_smi", "needs_reboot", f"nvidia-smi cannot open this GPU ({reason})",
            f"{XID_CATALOG}: Xid 79, RESTART_BM")))

    lines, log_source, log_warnings = read_kernel_log(kernel_log, run, path=kernel_log_path, dmesg=dmesg,
                                                      journalctl=journalctl, kmsg_path=kmsg_path)
    warnings.extend(log_warnings)
    events, line_count = parse_xid_events(lines, since_s)
    attach_xid_events(gpus, events)

    summary = summarize(gpus)
    return {
        "status": summary["status"],
        "summary": summary,
        "gpus": gpus,
        "xid_events": events,
        "kernel_log": {"source": log_source, "since": since_s, "lines": line_count},
        "driver_version": _text(root, "driver_version") if root is not None else kernel_version,
        "cuda_version": _text(root, "cuda_version") if root is not None else None,
    }, warnings
