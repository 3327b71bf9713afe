# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter driver_kernel_modules of the driver role; the logic is in module_utils/_driver_plan.py."""
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

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_plan


def driver_kernel_modules(facts, requested="auto", packages=None, branch="", host="", open_packaged=True):
    """module_utils/_driver_plan.py's driver_kernel_modules, its errors as the filter's."""
    try:
        return _driver_plan.driver_kernel_modules(facts, requested, packages, branch, host, open_packaged)
    except _driver_plan.DriverPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"driver_kernel_modules": driver_kernel_modules}
