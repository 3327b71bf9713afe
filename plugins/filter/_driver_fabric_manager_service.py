# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver_fabric_manager_service filter; the logic is in module_utils/_driver_plan.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _driver_fabric_manager_service
version_added: 1.0.0
short_description: 'Private to the driver role, not API: what systemd does with nvidia-fabricmanager after the driver role''s install'
description:
  - Used by the C(driver) role on an NVSwitch host. The service is always enabled; it is restarted when the driver
    or the fabric manager changed in this run and the loaded kernel module is the installed driver, started when
    nothing changed, and only enabled while the loaded module is another version or none (it starts at the next
    boot, with the new module - a fabric manager of another version than the loaded module aborts).
positional: _input, facts, result, changed
options:
  _input:
    description: P(k8sgpu.nvidia._driver_plan#filter)'s result.
    type: dict
    required: true
  facts:
    description: The host's C(ansible_facts) (C(nvidia_driver_loaded), C(nvidia_driver_version)).
    type: dict
    required: true
  result:
    description: C(driver_result) (C(version), C(rebooted)).
    type: dict
    required: true
  changed:
    description: Whether apt changed the driver or the fabric manager in this run.
    type: bool
    default: false
"""

EXAMPLES = r"""
_state: "{{ (_driver_decisions | k8sgpu.nvidia._driver_fabric_manager_service(ansible_facts, driver_result, true)).state }}"
# restarted, started, or none (enabled only)
"""

RETURN = r"""
_value:
  description: C(state) (V(restarted), V(started), or null for enabled only) and C(reason).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_plan


def driver_fabric_manager_service(plan, facts, result, changed=False):
    """module_utils/_driver_plan.py's fabric_manager_service, its errors as the filter's."""
    try:
        return _driver_plan.fabric_manager_service(plan, facts, result, changed)
    except _driver_plan.DriverPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_driver_fabric_manager_service": driver_fabric_manager_service}
