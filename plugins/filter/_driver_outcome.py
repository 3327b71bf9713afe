# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver_outcome filter; the logic is in module_utils/_driver_plan.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _driver_outcome
version_added: 1.0.0
short_description: 'Private to the driver role, not API: the driver role''s result after the install (loaded, reboot required, or not loaded and why)'
description:
  - Used by the C(driver) role after the install. The driver is loaded now when the loaded module is of the
    installed version and the chosen flavour; otherwise a reboot is required when the host has not booted since an
    NVIDIA kernel module was installed (or no module file was found), else it is not loaded, with the reason from
    M(k8sgpu.nvidia.driver_reboot_check).
  - In check mode with packages still to install the status is V(would_install).
positional: _input, facts, installed_version, boot, check_mode
options:
  _input:
    description: P(k8sgpu.nvidia._driver_plan#filter)'s result after the packages were read.
    type: dict
    required: true
  facts:
    description: The host's C(ansible_facts) (C(nvidia_driver_loaded), C(nvidia_driver_version), C(nvidia_kernel_module_flavour)).
    type: dict
    required: true
  installed_version:
    description: The installed version of the driver package.
    type: str
    default: ""
  boot:
    description: The result of M(k8sgpu.nvidia.driver_reboot_check) (C(module_time), C(installed_since_boot), C(detail)); null when not read.
    type: dict
  check_mode:
    description: Whether the role runs in check mode.
    type: bool
    default: false
"""

EXAMPLES = r"""
driver_result: "{{ _driver_plan | k8sgpu.nvidia._driver_outcome(ansible_facts, '535.261.03-1', __boot, false) }}"
# {"status": "installed_reboot_required", "version": "535.261.03-1", "reboot_required": true, ...}
"""

RETURN = r"""
_value:
  description: C(driver_result) - the plan's C(result) with C(status) (V(installed_loaded),
    V(installed_reboot_required), V(installed_not_loaded), V(would_install)), C(version), C(reboot_required), C(detail).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_plan


def driver_outcome(plan, facts, installed_version="", boot=None, check_mode=False):
    """module_utils/_driver_plan.py's driver_outcome, its errors as the filter's."""
    try:
        return _driver_plan.driver_outcome(plan, facts, installed_version, boot, check_mode)
    except _driver_plan.DriverPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_driver_outcome": driver_outcome}
