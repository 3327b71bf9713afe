# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Choose the NVIDIA kernel-module flavour (open or proprietary) for a host.

NVIDIA's open GPU kernel modules run on Turing and later GPUs only. The
"Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README ("can be
used on any Turing or later GPU") starts at PCI device id 0x1E02 (TITAN RTX);
every Volta, Pascal and older device id is below 0x1E00 (V100 0x1DB4,
P100 0x15F8), every Turing and later one at or above (T4 0x1EB8, A100 0x20B0,
H100 0x2330). Turing is also compute capability 7.5.
"""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: driver_kernel_modules
version_added: 1.0.0
short_description: Choose the NVIDIA kernel-module flavour (open or proprietary) for a host
description:
  - Used by the C(driver) role. With V(auto), keeps the loaded kernel module's flavour; with no loaded module, the
    flavour of the installed driver package of the branch (C(nvidia-open-kernel-dkms) or C(nvidia-kernel-dkms) on
    Debian, C(nvidia-driver-<branch>[-server][-open]) on Ubuntu); for a new install, V(open) when every GPU is
    Turing or later and V(proprietary) otherwise. Installed open modules on a GPU older than Turing, which cannot
    drive it, are replaced with the proprietary ones.
  - A GPU is Turing or later when its PCI device id (C(nvidia_pci_devices), from sysfs) is 0x1e00 or more - the
    "Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README starts at 0x1E02, Volta's V100 is 0x1DB4.
    Only where sysfs shows no GPU is the compute capability of C(nvidia_gpus) (7.5 or more) used.
  - V(open) or V(proprietary) are what the user asks for; a loaded or installed flavour is switched only then
    (C(switch)). V(open) on a host with a GPU older than Turing gives an C(error) naming the host, the GPU's PCI
    address and device id, and the fix.
  - Where the branch's packages have no open kernel module (O(open_packaged=false), Debian's Tesla branches
    C(nvidia-tesla-<branch>-*)), V(auto) takes the proprietary one and V(open) gives an C(error).
positional: _input, requested, packages, branch, host
options:
  _input:
    description: The host's C(ansible_facts) after M(k8sgpu.nvidia.gpu_facts).
    type: dict
    required: true
  requested:
    description: C(driver_kernel_modules) - V(auto), V(open) or V(proprietary).
    type: str
    default: auto
  packages:
    description: The C(packages) result of M(k8sgpu.nvidia.dpkg_packages) for the driver packages; null when not read.
    type: dict
  branch:
    description: C(driver_branch); an installed package of another branch does not count. Empty means any.
    type: str
    default: ""
  host:
    description: The inventory host name, for messages.
    type: str
    default: ""
  open_packaged:
    description: Whether the branch's packages include an open kernel module (false for Debian's Tesla branches).
    type: bool
    default: true
"""

EXAMPLES = r"""
kernel: "{{ ansible_facts | k8sgpu.nvidia.driver_kernel_modules('auto', __dpkg.packages, '535', inventory_hostname) }}"
# {"flavour": "proprietary", "reason": "auto: keeps the loaded proprietary kernel module", "switch": false, "error": ""}
"""

RETURN = r"""
_value:
  description: C(flavour) (V(open) or V(proprietary); null with an error), C(reason) (why, in words), C(switch)
    (whether a loaded or installed flavour is replaced) and C(error) (empty unless the request cannot work).
  type: dict
"""

import re
from typing import Any

from ansible.errors import AnsibleFilterError

REQUESTS = ("auto", "open", "proprietary")
FIRST_TURING_DEVICE_ID = 0x1E00
FIRST_TURING_COMPUTE_CAPABILITY = (7, 5)

# Packages whose installation tells the flavour: Debian's DKMS packages (of the
# suite's own driver, and of its Tesla branches: nvidia-tesla-<branch>-kernel-dkms)
# and Ubuntu's nvidia-driver-<branch>[-server][-open] metapackages.
_OPEN_PACKAGE = re.compile(r"^(nvidia-(tesla-\d+-)?open-kernel-dkms|nvidia-driver-\d+(-server)?-open)$")
_PROPRIETARY_PACKAGE = re.compile(r"^(nvidia-(tesla-\d+-)?kernel-dkms|nvidia-driver-\d+(-server)?)$")
_BRANCH = re.compile(r"^(?:\d+:)?(\d+)\.")


def _device_id(text: Any) -> int | None:
    try:
        return int(str(text), 16)
    except ValueError:
        return None


def _compute_capability(text: Any) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)$", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def older_than_turing(facts: dict) -> tuple[list[str], int]:
    """Return (descriptions of the GPUs the open modules cannot drive, number of GPUs seen).

    The GPUs are the display/3D functions of ``nvidia_pci_devices`` (sysfs, always
    there), judged by PCI device id. Only where sysfs shows none (no sysfs in a
    container, say) are ``nvidia_gpus`` from nvidia-smi judged by compute capability.
    """
    old: list[str] = []
    pci_gpus = [d for d in facts.get("nvidia_pci_devices") or [] if d.get("gpu")]
    for dev in pci_gpus:
        device = _device_id(dev.get("device_id"))
        if device is None or device < FIRST_TURING_DEVICE_ID:
            old.append(f"{dev.get('pci_bus_id')} (PCI device id {dev.get('device_id')})")
    if pci_gpus:
        return old, len(pci_gpus)
    smi_gpus = facts.get("nvidia_gpus") or []
    for gpu in smi_gpus:
        cap = _compute_capability(gpu.get("compute_capability"))
        if cap is None or cap < FIRST_TURING_COMPUTE_CAPABILITY:
            old.append(f"{gpu.get('pci_bus_id')} ({gpu.get('name')}, compute capability "
                       f"{gpu.get('compute_capability') or 'unknown'})")
    return old, len(smi_gpus)


def installed_flavour(packages: dict | None, branch: str = "") -> tuple[str | None, str]:
    """Return (flavour, package and version) of the installed driver package of ``branch`` (any when empty).

    ``packages`` maps package names to dicts with ``installed`` (bool) and ``version``,
    as the ``packages`` of M(k8sgpu.nvidia.dpkg_packages). Both flavours installed, or
    neither, gives (None, "").
    """
    found: dict[str, str] = {}
    for name, info in sorted((packages or {}).items()):
        if not isinstance(info, dict) or not info.get("installed"):
            continue
        match = _BRANCH.match(str(info.get("version") or ""))
        if branch and (not match or match.group(1) != str(branch)):
            continue
        for flavour, pattern in (("open", _OPEN_PACKAGE), ("proprietary", _PROPRIETARY_PACKAGE)):
            if pattern.match(name):
                found.setdefault(flavour, f"{name} {info.get('version')}")
    if len(found) != 1:
        return None, ""
    flavour, what = next(iter(found.items()))
    return flavour, what


def driver_kernel_modules(facts: dict, requested: str = "auto", packages: dict | None = None,
                          branch: Any = "", host: str = "", open_packaged: bool = True) -> dict:
    """Decide the kernel-module flavour for one host.

    ``facts`` is the host's ansible_facts after M(k8sgpu.nvidia.gpu_facts);
    ``requested`` is driver_kernel_modules; ``packages`` the installed packages
    (None where they were not read: then only the loaded module counts);
    ``branch`` driver_branch; ``open_packaged`` false where the branch's packages have no open kernel module
    (Debian's Tesla branches): auto then takes the proprietary one and open fails. Returns ``flavour``, ``reason``, ``switch`` (a loaded or
    installed flavour is replaced: only when the user asks for that flavour) and
    ``error`` (non-empty when the request cannot work on this host).
    """
    if not isinstance(facts, dict):
        raise AnsibleFilterError(f"driver_kernel_modules expects a host's ansible_facts (a dict), got {type(facts).__name__}")
    if requested not in REQUESTS:
        raise AnsibleFilterError(f"{host}: driver_kernel_modules must be one of {', '.join(REQUESTS)}, not {requested!r}")
    branch = str(branch or "")
    loaded = facts.get("nvidia_kernel_module_flavour") if facts.get("nvidia_driver_loaded") else None
    on_disk, on_disk_what = installed_flavour(packages, branch)
    old, seen = older_than_turing(facts)
    # What is there now: the loaded module first, else the installed package of the branch.
    current, current_what = (loaded, f"the loaded {loaded} kernel module") if loaded else (
        (on_disk, f"the installed {on_disk_what}") if on_disk else (None, ""))
    result = {"flavour": None, "reason": "", "switch": False, "error": ""}

    if requested == "open" and old:
        result["error"] = (
            f"{host}: driver_kernel_modules=open, but GPU {', '.join(old)} is older than Turing, and NVIDIA's "
            "open kernel modules support Turing (PCI device id 0x1e00 and up, compute capability 7.5) and later "
            "only. Set driver_kernel_modules to auto (keeps what is there, else chooses by GPU) or proprietary "
            "for this host.")
        return result
    if requested == "open" and not open_packaged:
        result["error"] = (
            f"{host}: driver_kernel_modules=open, but the packages of driver branch {branch} have no open kernel "
            "module (Debian packages its Tesla branches, nvidia-tesla-<branch>-*, with the proprietary one only). "
            "Set driver_kernel_modules to auto or proprietary, or driver_branch to the suite's own branch.")
        return result
    if requested != "auto":
        result["flavour"] = requested
        if current and current != requested:
            result["switch"] = True
            result["reason"] = (f"driver_kernel_modules={requested} asks to switch from {current_what} "
                                f"to {requested} (the new module loads after a reboot)")
        else:
            result["reason"] = f"driver_kernel_modules={requested}"
        return result
    if current == "open" and old:
        # Left by an earlier run or by hand: these modules cannot drive the GPU, there is nothing to keep.
        result.update(flavour="proprietary", switch=True, reason=(
            f"auto: replaces {current_what}, which cannot drive GPU {', '.join(old)} (older than Turing), "
            "with the proprietary one"))
    elif current == "open" and not open_packaged:
        result.update(flavour="proprietary", switch=True, reason=(
            f"auto: replaces {current_what}: the packages of driver branch {branch} have the proprietary kernel "
            "module only"))
    elif current:
        result["flavour"] = current
        result["reason"] = f"auto: keeps {current_what}"
    elif not open_packaged:
        result["flavour"] = "proprietary"
        result["reason"] = (f"auto: new install; the packages of driver branch {branch} have the proprietary kernel "
                            "module only")
    elif old:
        result["flavour"] = "proprietary"
        result["reason"] = (f"auto: new install; GPU {', '.join(old)} is older than Turing, which the open "
                            "kernel modules do not support")
    elif seen:
        result["flavour"] = "open"
        result["reason"] = f"auto: new install; every GPU ({seen}) is Turing or later, where NVIDIA recommends the open modules"
    else:
        result["flavour"] = "open"
        result["reason"] = ("auto: new install without a GPU in sysfs (driver_no_gpu=install): open, NVIDIA's "
                            "choice for Turing and later; set driver_kernel_modules=proprietary for older GPUs")
    return result


class FilterModule:
    def filters(self) -> dict:
        return {"driver_kernel_modules": driver_kernel_modules}
