# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: NVIDIA GPU and driver facts from sysfs, /proc and nvidia-smi.

Not a public API; modules of this collection only. Everything here but
command_runner is free of AnsibleModule: nvidia-smi is reached through a
callable (args -> (rc, stdout, stderr)), so the logic is unit-tested with
recorded outputs and fake sysfs/proc trees.
"""
from __future__ import annotations

import csv
import io
import os
import re
import xml.etree.ElementTree as ET
from typing import Any, Callable

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvswitch import is_nvswitch, nvswitches, read_fabric

NVIDIA_VENDOR_ID = "0x10de"
# PCI class 0x0300xx: VGA-compatible display controller, 0x0302xx: 3D controller (data-centre GPUs).
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")

XML_ARGS = ("-q", "-x")
COMPUTE_CAP_ARGS = ("--query-gpu=index,uuid,compute_cap", "--format=csv,noheader,nounits")

MISMATCH_TEXT = "Driver/library version mismatch"
_NO_DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"
_NO_DEVICES_TEXT = "No devices were found"
_PROC_VERSION_RE = re.compile(r"NVRM version:.*?Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)*)(?=\s|$)")
_NVML_LIBRARY_RE = re.compile(r"NVML library version:\s*(\S+)")
_MIB_RE = re.compile(r"^\s*(\d+)\s*MiB\s*$")

Runner = Callable[[list], "tuple[int, str, str]"]


class GpuFactsError(Exception):
    """A failure the module reports with fail_json; facts gathered so far travel with it."""

    def __init__(self, msg: str, facts: dict | None = None):
        super().__init__(msg)
        self.facts = facts


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        raise GpuFactsError(f"Could not read {path}: {exc.strerror or exc}") from None


# --- /proc/driver/nvidia/version ------------------------------------------------------------------------------

def proc_version_path(proc_root: str) -> str:
    return os.path.join(proc_root, "driver", "nvidia", "version")


def parse_proc_version(text: str) -> tuple[str | None, str | None]:
    """Return (kernel module version, flavour) from /proc/driver/nvidia/version content.

    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ..." is the open flavour;
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03 ..." (no "Open") the proprietary one.
    """
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _PROC_VERSION_RE.search(line)
            flavour = "open" if "Open Kernel Module" in line else "proprietary"
            return (match.group(1) if match else None), flavour
    return None, None


# --- sysfs ----------------------------------------------------------------------------------------------------

def pci_devices_path(sysfs_root: str) -> str:
    return os.path.join(sysfs_root, "bus", "pci", "devices")


def scan_pci_devices(sysfs_root: str) -> list[dict]:
    """NVIDIA PCI functions under <sysfs_root>/bus/pci/devices, sorted by address.

    Every function with vendor 0x10de is listed (GPUs, their audio functions, NVSwitches); ``gpu`` is true for
    display (0x0300xx) and 3D (0x0302xx) controllers, ``nvswitch`` for bridges of class 0x0680xx (_nvswitch.py).
    ``driver`` is the bound kernel driver, or None.
    A missing devices directory gives an empty list.
    """
    root = pci_devices_path(sysfs_root)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise GpuFactsError(f"Could not list {root}: {exc.strerror or exc}") from None
    devices = []
    for name in names:
        base = os.path.join(root, name)
        try:
            with open(os.path.join(base, "vendor"), encoding="ascii", errors="replace") as fh:
                vendor = fh.read().strip().lower()
        except OSError:  # not a device directory, or a device that went away (hot unplug)
            continue
        if vendor != NVIDIA_VENDOR_ID:
            continue
        pci_class = _read(os.path.join(base, "class")).strip().lower()
        driver_link = os.path.join(base, "driver")
        device = {
            "pci_bus_id": name,
            "vendor_id": vendor,
            "device_id": _read(os.path.join(base, "device")).strip().lower(),
            "class": pci_class,
            "gpu": pci_class.startswith(GPU_CLASS_PREFIXES),
            "driver": os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None,
        }
        device["nvswitch"] = is_nvswitch(device)
        devices.append(device)
    return devices


def scan_nvswitches(sysfs_root: str) -> list[dict]:
    """The NVSwitches under <sysfs_root>/bus/pci/devices (_nvswitch.nvswitches of scan_pci_devices)."""
    return nvswitches(scan_pci_devices(sysfs_root))


# --- nvidia-smi output ----------------------------------------------------------------------------------------

def _text(elem: ET.Element | None, path: str, default: str | None = None) -> str | None:
    found = elem.find(path) if elem is not None else None
    if found is None or found.text is None:
        return default
    value = found.text.strip()
    return value if value else default


def _mib(value: str | None) -> int | None:
    match = _MIB_RE.match(value or "")
    return int(match.group(1)) if match else None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def smi_xml_root(text: str) -> ET.Element:
    """The <nvidia_smi_log> element of ``nvidia-smi -q -x`` output; ValueError when the text is not that."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not valid XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"the root element is <{root.tag}>, not <nvidia_smi_log>")
    return root


_PCI_KEY_RE = re.compile(r"^(?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?$")


def pci_key(address: str | None) -> str | None:
    """Domain, bus and device of a PCI address as ``dddd:bb:dd`` (lower case, 4-digit domain), or None.

    The same GPU is ``00000000:3B:00.0`` in nvidia-smi, ``0000:3b:00.0`` in sysfs and ``PCI:0000:3b:00`` in the
    kernel's Xid lines (no function); all three give ``0000:3b:00``.
    """
    match = _PCI_KEY_RE.match((address or "").strip())
    if not match:
        return None
    domain, bus, device = (int(part, 16) for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def parse_smi_xml(text: str) -> dict:
    """Parse ``nvidia-smi -q -x``: driver_version, cuda_version and gpus (in nvidia-smi's order).

    Each GPU gets index (its position, which is NVML's index order), minor_number, uuid, name, pci_bus_id,
    memory_total_mib, mig_mode, persistence_mode, fabric_state and fabric_status (fabric/state and fabric/status as
    written, None where there is no fabric element), and compute_capability None (the XML has none).
    """
    root = smi_xml_root(text)
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        fabric_state, fabric_status = read_fabric(gpu)
        gpus.append({
            "index": position,
            "minor_number": _int(_text(gpu, "minor_number")),
            "uuid": _text(gpu, "uuid"),
            "name": _text(gpu, "product_name"),
            "pci_bus_id": _text(gpu, "pci/pci_bus_id", gpu.get("id")),
            "memory_total_mib": _mib(_text(gpu, "fb_memory_usage/total")),
            "compute_capability": None,
            "mig_mode": _text(gpu, "mig_mode/current_mig", "N/A"),
            "persistence_mode": _text(gpu, "persistence_mode", "N/A"),
            "fabric_state": fabric_state,
            "fabric_status": fabric_status,
        })
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "gpus": gpus,
    }


def parse_compute_caps(text: str) -> dict[str, tuple[int | None, str | None]]:
    """Parse ``--query-gpu=index,uuid,compute_cap --format=csv,noheader,nounits``: {uuid: (index, cap)}.

    A value nvidia-smi cannot give ("[N/A]", "[Not Supported]") becomes None.
    """
    caps = {}
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 3:
            raise ValueError(f"expected 3 comma-separated fields (index, uuid, compute_cap), got {row!r}")
        index, uuid, cap = (field.strip() for field in row)
        caps[uuid] = (_int(index), cap if re.match(r"^\d+\.\d+$", cap) else None)
    return caps


def nvml_library_version(output: str) -> str | None:
    """The user-space library version newer nvidia-smi prints after a version mismatch, if any."""
    match = _NVML_LIBRARY_RE.search(output)
    return match.group(1) if match else None


def mismatch_message(output: str, proc_root: str, kernel_version: str | None) -> str:
    library = nvml_library_version(output)
    loaded = f"version {kernel_version}" if kernel_version else "of unknown version"
    in_use = f" (version {library})" if library else ""
    return (
        f"nvidia-smi failed with 'Failed to initialize NVML: {MISMATCH_TEXT}': the loaded NVIDIA kernel module, "
        f"{loaded} according to {proc_version_path(proc_root)}, differs from the user-space driver library{in_use}. "
        "The driver packages were upgraded or downgraded without reloading the kernel module: reboot the host, or "
        "unload and reload the nvidia kernel modules once nothing uses the GPUs."
    )


def _cmd(nvidia_smi: str, args: tuple) -> str:
    return " ".join((nvidia_smi,) + args)


def _first_line(out: str, err: str) -> str:
    text = (err or "").strip() or (out or "").strip()
    return text.splitlines()[0] if text else "no output"


# --- one read per run ------------------------------------------------------------------------------------------

# The fact that says which read the other facts come from (set by the action plugin, plugins/action/gpu_facts.py).
READ_FACT = "nvidia_facts_read"
# The options that change what is read, with the module's defaults; facts are reused only for the same values.
READ_OPTIONS = {"nvidia_smi": None, "sysfs_root": "/sys", "proc_root": "/proc"}


def read_marker(run: str, params: dict) -> dict:
    """The READ_FACT value for a read made in the controller run ``run`` with these module options (unset or None:
    the module's default)."""
    marker = {"run": run}
    marker.update({name: default if params.get(name) is None else params[name]
                   for name, default in READ_OPTIONS.items()})
    return marker


def has_gpu(facts: dict) -> bool:
    """Whether the facts name an NVIDIA GPU: in sysfs, or according to nvidia-smi."""
    return bool(facts.get("nvidia_gpus")) or any(
        isinstance(d, dict) and d.get("gpu") for d in facts.get("nvidia_pci_devices") or [])


def reusable(facts: Any, run: str, params: dict) -> str | None:
    """Why the host's facts cannot stand for a new read (None: they can).

    They can when this controller run read them with the same options, and a new read could not fail on them:
    a version mismatch or a missing GPU is read again, so that the failure (or warning) is the module's own.
    """
    facts = facts if isinstance(facts, dict) else {}
    marker = facts.get(READ_FACT)
    if not isinstance(marker, dict):
        return "no earlier read"
    if marker.get("run") != run:
        return "read by another run"
    if marker != read_marker(run, params):
        return "read with other options"
    if facts.get("nvidia_driver_version_mismatch"):
        return "a driver/library version mismatch"
    if params.get("fail_on_missing") and not has_gpu(facts):
        return "no GPU, and fail_on_missing"
    return None


# --- the whole ------------------------------------------------------------------------------------------------

def gather(
    run: Runner,
    nvidia_smi: str | None,
    *,
    sysfs_root: str = "/sys",
    proc_root: str = "/proc",
    fail_on_missing: bool = False,
    fail_on_mismatch: bool = True,
    hostname: str = "localhost",
    nvidia_smi_missing_reason: str | None = None,
) -> tuple[dict, list[str]]:
    """Return (facts, warnings). Raises GpuFactsError for what the module must fail on.

    nvidia-smi runs only when the kernel module is loaded (/proc/driver/nvidia/version exists) and nvidia_smi
    is a path; otherwise the facts come from sysfs alone.
    """
    warnings: list[str] = []
    pci_devices = scan_pci_devices(sysfs_root)
    version_file = proc_version_path(proc_root)
    loaded = os.path.exists(version_file)
    kernel_version, flavour = parse_proc_version(_read(version_file)) if loaded else (None, None)
    facts: dict[str, Any] = {
        "nvidia_gpus": [],
        "nvidia_driver_loaded": loaded,
        "nvidia_driver_version": kernel_version,
        "nvidia_cuda_driver_version": None,
        "nvidia_kernel_module_flavour": flavour,
        "nvidia_driver_version_mismatch": False,
        "nvidia_pci_devices": pci_devices,
        "nvidia_nvswitches": nvswitches(pci_devices),
        "nvidia_gpu_source": "sysfs",
    }

    if loaded and nvidia_smi is None:
        warnings.append(
            f"The NVIDIA kernel module is loaded ({version_file} exists) but "
            f"{nvidia_smi_missing_reason or 'nvidia-smi was not found'}; GPU details come from sysfs only."
        )
    elif loaded:
        _from_nvidia_smi(run, nvidia_smi, facts, warnings, proc_root=proc_root, kernel_version=kernel_version,
                         fail_on_mismatch=fail_on_mismatch)

    if fail_on_missing and not has_gpu(facts):
        raise GpuFactsError(f"{hostname}: no NVIDIA GPU found in {pci_devices_path(sysfs_root)}", facts)
    bound = [d for d in pci_devices if d["gpu"] and d["driver"] == "nvidia"]
    if facts["nvidia_gpu_source"] == "nvidia-smi" and len(bound) > len(facts["nvidia_gpus"]):
        warnings.append(
            f"{len(bound)} GPU(s) in {pci_devices_path(sysfs_root)} are bound to the nvidia driver but nvidia-smi "
            f"reports {len(facts['nvidia_gpus'])}; check 'dmesg' for Xid errors or GPUs that fell off the bus."
        )
    return facts, warnings


def _from_nvidia_smi(run: Runner, nvidia_smi: str, facts: dict, warnings: list, *, proc_root: str,
                     kernel_version: str | None, fail_on_mismatch: bool) -> None:
    cmd = _cmd(nvidia_smi, XML_ARGS)
    rc, out, err = run([nvidia_smi, *XML_ARGS])
    output = f"{out}\n{err}"
    if MISMATCH_TEXT in output:
        facts["nvidia_driver_version_mismatch"] = True
        msg = mismatch_message(output, proc_root, kernel_version)
        if fail_on_mismatch:
            raise GpuFactsError(msg, facts)
        warnings.append(f"{msg} GPU details come from sysfs only.")
        return
    if rc != 0:
        if _NO_DRIVER_TEXT in output:
            warnings.append(f"'{cmd}' could not communicate with the NVIDIA driver; GPU details come from sysfs only.")
            return
        if _NO_DEVICES_TEXT in output:
            facts["nvidia_gpu_source"] = "nvidia-smi"
            warnings.append(f"'{cmd}': {_NO_DEVICES_TEXT.lower()}.")
            return
        raise GpuFactsError(f"'{cmd}' failed (rc={rc}): {_first_line(out, err)}", facts)
    try:
        parsed = parse_smi_xml(out)
    except ValueError as exc:
        raise GpuFactsError(f"Could not parse the output of '{cmd}': {exc}", facts) from None
    facts["nvidia_gpus"] = parsed["gpus"]
    facts["nvidia_gpu_source"] = "nvidia-smi"
    facts["nvidia_driver_version"] = parsed["driver_version"] or facts["nvidia_driver_version"]
    facts["nvidia_cuda_driver_version"] = parsed["cuda_version"]
    if not parsed["gpus"]:
        return

    cmd = _cmd(nvidia_smi, COMPUTE_CAP_ARGS)
    rc, out, err = run([nvidia_smi, *COMPUTE_CAP_ARGS])
    try:
        if rc != 0:
            raise ValueError(f"rc={rc}: {_first_line(out, err)}")
        caps = parse_compute_caps(out)
    except ValueError as exc:
        warnings.append(f"'{cmd}' failed ({exc}); compute_capability is null. Drivers older than 510 cannot report it.")
        return
    for gpu in parsed["gpus"]:
        index, cap = caps.get(gpu["uuid"], (None, None))
        gpu["compute_capability"] = cap
        if index is not None:
            gpu["index"] = index


def command_runner(module: Any, timeout: int) -> Runner:
    """module.run_command, under coreutils timeout(1) when there is one, in the C locale.

    A hung nvidia-smi (a GPU in a bad state) is killed after ``timeout`` seconds and reported as a failure.
    """
    timeout_bin = module.get_bin_path("timeout") if timeout > 0 else None

    def run(args: list) -> tuple[int, str, str]:
        full = [timeout_bin, "--kill-after=5", str(timeout), *args] if timeout_bin else list(args)
        rc, out, err = module.run_command(full, environ_update={"LC_ALL": "C"})
        if timeout_bin and rc in (124, 137):
            raise GpuFactsError(f"'{' '.join(args)}' did not finish within {timeout} seconds (timeout option)")
        return rc, out, err

    return run
