# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: NVSwitch devices on the PCI bus, and each GPU's NVSwitch fabric registration.

Not a public API; modules of this collection only (gpu_facts through _nvidia_smi.py, gpu_health through
_gpu_health.py). Free of AnsibleModule and of file access: the PCI devices come from _nvidia_smi.scan_pci_devices
(whose sysfs root the caller gives, so a test gives its own tree), the fabric from a <gpu> element of
``nvidia-smi -q -x``.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

# PCI class 0x0680xx: base class 06 (bridge), subclass 80 (other bridge), as the PCI ID repository's class list
# names them ("C 06  Bridge", "80  Bridge"). An NVSwitch is an NVIDIA (vendor 0x10de) function of that class; NCCL's
# topology detection reads the same sysfs class file and takes 0x068000 for an NVSwitch (NVIDIA/nccl
# src/graph/topo.cc, kvDictPciClass: "0x068000" is NVS; older releases' src/include/nvlink.h: "Bridge / Other Bridge
# Device (NVswitch)").
NVSWITCH_CLASS_PREFIX = "0x0680"

# The NVSwitch generations by device id, from the NVSwitch driver's own tables (NVIDIA/open-gpu-kernel-modules
# src/common/nvswitch/kernel/nvswitch.c, nvswitch_lr10_device_ids and nvswitch_ls10_device_ids): LR10, the NVSwitch
# of HGX A100, and LS10, that of HGX H100 and H200. The PCI ID repository (pci.ids, https://pci-ids.ucw.cz, mirrored
# at github.com/pciutils/pciids, read in its snapshot c1c12547 of 2026-08-22) names one id of each, and no other
# 10de device an NVSwitch: 1af1 "GA100 [A100 NVSwitch]" (there since 2022-10-19) and 22a3 "GH100 [H100 NVSwitch]".
_LR10_IDS = (0x1AE8, *range(0x1AF0, 0x1B00))
# "PCIE endpoint to manage the NVLink switch HW"; the driver's table goes on with 0x22A8-0x22AB ("PCI-PCI Bridge,
# Laguna Switch Function 0") and 0x22AC-0x22AF ("Non-Transparent Bridge, Laguna Switch Function 1"): bridge
# functions, by the table's own words, not the endpoint that manages the switch; left out here (NOT_NVSWITCH_IDS), so
# that one NVSwitch is one entry.
_LS10_IDS = tuple(range(0x22A0, 0x22A8))
NVSWITCH_GENERATIONS = {**{f"0x{i:04x}": "LR10" for i in _LR10_IDS}, **{f"0x{i:04x}": "LS10" for i in _LS10_IDS}}
NOT_NVSWITCH_IDS = tuple(f"0x{i:04x}" for i in range(0x22A8, 0x22B0))
PCI_IDS_NAMES = {"0x1af1": "GA100 [A100 NVSwitch]", "0x22a3": "GH100 [H100 NVSwitch]"}
# An NVIDIA bridge-class function of another id (the first-generation NVSwitch of the DGX-2, a newer one) is still
# an NVSwitch, with a null generation. Not detected here: the fourth-generation NVSwitches of HGX B200/B100, which
# NVIDIA's Fabric Manager user guide ("Systems Using Fourth Generation NVSwitches") describes as managed through the
# NVLink Subnet Manager rather than as NVIDIA functions of the host; their GPUs' fabric state (below) is read all
# the same.

# A GPU's fabric, from <fabric><state> and <status> of nvidia-smi -q -x: NVML's nvmlGpuFabricInfo_t
# (docs.nvidia.com/deploy/nvml-api, "Fabric definitions"). The state is NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
# _NOT_STARTED, _IN_PROGRESS or _COMPLETED, which nvidia-smi writes as "Not Supported", "Not Started", "In Progress",
# "Completed" ("N/A" on a GPU without NVSwitch fabric, as the lab's H100 reports); the status is an nvmlReturn_t
# ("Success" or an error), which NVML says is to be checked only once the state is Completed.
FABRIC_NOT_APPLICABLE = ("n/a", "not supported")
FABRIC_COMPLETED = "Completed"
FABRIC_SUCCESS = "Success"
FABRIC_DOC = ("NVML nvmlGpuFabricInfo_t (fabric state and status) and the NVIDIA Fabric Manager user guide: a GPU "
              "of an NVSwitch system runs no CUDA work (CUDA_ERROR_SYSTEM_NOT_READY) until nvidia-fabricmanager "
              "has registered it with the fabric")


def is_nvswitch(device: dict) -> bool:
    """Whether one entry of _nvidia_smi.scan_pci_devices (an NVIDIA function) is an NVSwitch: a bridge of class
    0x0680xx that is not one of the PCIe switch functions of NOT_NVSWITCH_IDS."""
    return (str(device.get("class") or "").lower().startswith(NVSWITCH_CLASS_PREFIX)
            and str(device.get("device_id") or "").lower() not in NOT_NVSWITCH_IDS)


def nvswitches(pci_devices: list[dict]) -> list[dict]:
    """The NVSwitches among the NVIDIA PCI functions (entries of _nvidia_smi.scan_pci_devices, vendor 0x10de only),
    in their order: pci_bus_id, device_id, generation (NVSWITCH_GENERATIONS, or None), name (PCI_IDS_NAMES, or
    None) and the bound kernel driver."""
    return [{
        "pci_bus_id": device["pci_bus_id"],
        "device_id": device["device_id"],
        "generation": NVSWITCH_GENERATIONS.get(str(device["device_id"]).lower()),
        "name": PCI_IDS_NAMES.get(str(device["device_id"]).lower()),
        "driver": device.get("driver"),
    } for device in pci_devices if is_nvswitch(device)]


def _text(elem: ET.Element, path: str) -> str | None:
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip() or None


def read_fabric(gpu: ET.Element) -> tuple[str | None, str | None]:
    """(state, status) of one <gpu> of ``nvidia-smi -q -x``, as written there; None where the driver writes no
    <fabric> element (drivers before the fabric probe)."""
    return _text(gpu, "fabric/state"), _text(gpu, "fabric/status")


def fabric_applies(state: str | None) -> bool:
    """Whether the GPU takes part in an NVSwitch fabric: a state other than N/A or Not Supported."""
    return state is not None and state.strip().lower() not in FABRIC_NOT_APPLICABLE


def fabric_problem(state: str | None, status: str | None) -> tuple[str, str] | None:
    """(check, detail) where the GPU's fabric registration is not done, None where it is or where there is none.

    ``fabric_not_completed``: a state other than Completed (Not Started, In Progress, a value NVML may add).
    ``fabric_failed``: Completed with a status other than Success.
    """
    if not fabric_applies(state):
        return None
    if state.strip().lower() != FABRIC_COMPLETED.lower():
        return ("fabric_not_completed",
                f"the GPU's NVSwitch fabric state is {state!r}, not {FABRIC_COMPLETED!r}: nvidia-fabricmanager has "
                "not registered it with the fabric (is nvidia-fabricmanager running? 'systemctl status "
                "nvidia-fabricmanager' and its log say)")
    if (status or "").strip().lower() != FABRIC_SUCCESS.lower():
        return ("fabric_failed",
                f"the GPU's NVSwitch fabric registration completed with status {status!r}, not "
                f"{FABRIC_SUCCESS!r}: nvidia-fabricmanager could not add it to the fabric (its log, "
                "/var/log/fabricmanager.log, says why)")
    return None


def fabric_pending(gpus: list) -> list[str]:
    """One line per GPU (entries of gpu_facts' nvidia_gpus, with fabric_state and fabric_status) whose NVSwitch
    fabric registration is not Completed with Success; GPUs without NVSwitch fabric (N/A, Not Supported, no
    element) never count. Empty: every GPU may run CUDA work."""
    lines = []
    for gpu in gpus or []:
        if not isinstance(gpu, dict):
            continue
        problem = fabric_problem(gpu.get("fabric_state"), gpu.get("fabric_status"))
        if problem:
            lines.append(f"GPU {gpu.get('index', '?')} {gpu.get('pci_bus_id') or ''}: {problem[0]} - {problem[1]}"
                         .replace("  ", " "))
    return lines
