# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver_fabric_manager filter; the logic is in module_utils/_driver_plan.py (shared with driver_plan)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _driver_fabric_manager
version_added: 1.0.0
short_description: 'Private to the driver role, not API: nvidia-fabricmanager of exactly the driver''s version, on an NVSwitch host'
description:
  - Used by the C(driver) role after the driver's install, on a host whose GPU facts list NVSwitches
    (C(nvidia_nvswitches)) with C(driver_source=nvidia). The fabric manager must be of exactly the driver's version
    (NVIDIA's Fabric Manager user guide - it aborts when the loaded driver is of another one), so its apt name pins the
    driver's own version (C(nvidia-fabricmanager=580.95.05-*)), read from the installed driver package.
  - In check mode before the driver's install, the version asked for (C(driver_version), else the branch).
positional: _input, packages, installed_version, check_mode, hold
options:
  _input:
    description: P(k8sgpu.nvidia._driver_plan#filter)'s result.
    type: dict
    required: true
  packages:
    description: The result of M(k8sgpu.nvidia.dpkg_packages) read before the install (it holds the fabric manager's package).
    type: dict
    required: true
  installed_version:
    description: The driver package's version now (empty before the install in check mode).
    type: str
    default: ""
  check_mode:
    description: Whether the role runs in check mode.
    type: bool
    default: false
  hold:
    description: C(driver_hold).
    type: bool
    default: true
"""

EXAMPLES = r"""
_fm: "{{ _driver_decisions | k8sgpu.nvidia._driver_fabric_manager(__dpkg_before, '580.95.05-1') }}"
# {"install": true, "name": "nvidia-fabricmanager=580.95.05-*", "package": "nvidia-fabricmanager",
#  "version": "580.95.05", "hold_needed": true, "reason": "nvidia-fabricmanager not installed, the driver 580.95.05"}
"""

RETURN = r"""
_value:
  description: C(install) (apt must run), C(name) (apt's name=version), C(package), C(version) (the driver's own
    version), C(hold_needed), C(reason).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_plan


def driver_fabric_manager(plan, packages, installed_version="", check_mode=False, hold=True):
    """module_utils/_driver_plan.py's fabric_manager_step, its errors as the filter's."""
    try:
        return _driver_plan.fabric_manager_step(plan, packages, installed_version, check_mode, hold)
    except _driver_plan.DriverPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_driver_fabric_manager": driver_fabric_manager}
