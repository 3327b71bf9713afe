# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter driver_plan of the driver role; the logic is in module_utils/_driver_plan.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _driver_plan
version_added: 1.0.0
short_description: >-
  Private to the driver role, not API: the driver role's decisions for one host (what to install, hold,
  configure, reboot, and why)
description:
  - Used by the C(driver) role, whose tasks only carry its answer out. Called once with the facts (is a driver of
    the wanted branch, version and flavour loaded; is there a GPU), and again once the installed packages were read.
  - Chooses the kernel-module flavour (C(driver_kernel_modules)); the packages (Debian
    C(nvidia-driver), C(nvidia-[open-]kernel-dkms), C(nvidia-smi), C(nvidia-persistenced), C(gcc), or the suite's
    Tesla packages C(nvidia-tesla-<branch>-*) for another branch; Ubuntu C(nvidia-driver-<branch>[-server][-open])
    and C(nvidia-utils-<branch>[-server])) and the kernel headers (the running kernel's where the sources have them,
    else the generic ones); the apt names with the version pin; the packages to hold; whether held packages may be
    changed; the configuration (nouveau blacklist, nvidia-persistenced); whether the role may reboot the host.
positional: _input, settings
options:
  _input:
    description: The host's C(ansible_facts) after M(k8sgpu.nvidia.gpu_facts) (with C(distribution),
      C(distribution_major_version), C(kernel), C(architecture)).
    type: dict
    required: true
  settings:
    description: The role's variables by name (C(driver_branch), C(driver_version), C(driver_kernel_modules),
      C(driver_ubuntu_server), C(driver_hold), C(driver_no_gpu), C(driver_blacklist_nouveau), C(driver_persistenced),
      C(driver_reboot), C(driver_reboot_boot_time_command)) and C(ansible_connection), C(inventory_hostname).
    type: dict
    required: true
  packages:
    description: The result of M(k8sgpu.nvidia.dpkg_packages) for C(read.names) (C(packages), C(ready), C(held));
      null before they were read.
    type: dict
  headers_available:
    description: Whether the package sources have the running kernel's headers; null before that was asked.
    type: bool
  host:
    description: The inventory host name, for messages (default the settings' C(inventory_hostname)).
    type: str
    default: ""
"""

EXAMPLES = r"""
_driver_plan: >-
  {{ ansible_facts | k8sgpu.nvidia._driver_plan(_driver_settings, packages=__dpkg, headers_available=true) }}
# {"status": "pending", "skip": false, "install": {"needed": true, "names": ["nvidia-driver=535*", ...],
#  "allow_change_held": true, "reason": "nvidia-driver, ... missing or not of version 535"},
#  "hold": {"packages": [...], "needed": true, "reason": "..."}, "result": {...}, ...}
"""

RETURN = r"""
_value:
  description:
    - C(status) (V(already_loaded), V(skipped_no_gpu) or V(pending)), C(skip) (nothing to do), C(has_gpu), C(error)
      (the kernel modules asked for cannot drive a GPU), C(kernel_modules) (flavour, reason, switch, error),
      C(open_packaged).
    - C(read) (C(names), C(versions)) the packages to read; C(packages) the wanted ones; C(driver_package);
      C(version_wanted); C(install) (C(needed), C(names) for apt, C(allow_change_held), C(reason),
      C(allow_change_held_reason)); C(hold) (C(packages), C(needed), C(reason)); C(headers) (C(name), C(detail));
      C(configure) (C(blacklist_nouveau), C(persistenced), C(persistenced_start)); C(reboot) (C(allowed), C(reason)).
    - C(result), C(driver_result) as far as the plan knows it.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_plan


def driver_plan(facts, settings, packages=None, headers_available=None, host=""):
    """module_utils/_driver_plan.py's driver_plan, its errors as the filter's."""
    try:
        return _driver_plan.driver_plan(facts, settings, packages, headers_available, host)
    except _driver_plan.DriverPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_driver_plan": driver_plan}
