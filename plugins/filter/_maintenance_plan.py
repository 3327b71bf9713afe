# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_plan filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _maintenance_plan
version_added: 1.0.0
short_description: 'Private to the node_maintenance role, not API: whether a GPU host needs a maintenance window (drain), and why'
description:
  - Reads the results the C(driver) and C(container_toolkit) roles set after a pass in check mode
    (C(driver_result), C(container_toolkit_result)) and says whether applying them would change the host.
  - A driver to install or change, or installed and waiting for a reboot; a toolkit to install or of another
    version; a runtime configuration file (C(daemon.json), a containerd or CRI-O drop-in) that would change.
  - The C(node_maintenance) role's C(plan) entry point uses it, so that a host with nothing to change is
    neither cordoned nor drained.
positional: _input, toolkit_result, toolkit_version
options:
  _input:
    description: C(driver_result), or C(None) when the driver role did not run.
    type: dict
    required: true
  toolkit_result:
    description: C(container_toolkit_result), or C(None) when the role did not run.
    type: dict
    required: true
  toolkit_version:
    description: C(container_toolkit_version), the wanted toolkit version; empty for any.
    type: str
    default: ""
  resume:
    description: An earlier run cordoned the Node and did not finish; it needs the window whatever the roles say.
    type: bool
    default: false
"""

RETURN = r"""
_value:
  description: C(needed) (bool) and C(reasons) (list of text).
  type: dict
"""

from typing import Any


def maintenance_plan(driver_result: Any, toolkit_result: Any, toolkit_version: str = "",
                     resume: bool = False) -> dict:
    """Whether a host needs a maintenance window, from the driver and container_toolkit roles' results in check mode.

    ``driver_result`` and ``toolkit_result`` are the roles' result facts after a check-mode pass (None when a role
    did not run); ``toolkit_version`` is container_toolkit_version; ``resume`` is true when an earlier run cordoned
    the Node and did not uncordon it. Returns {needed: bool, reasons: [text]}.
    """
    reasons = []
    if resume:
        reasons.append("an earlier run cordoned the Node and did not finish")
    status = (driver_result or {}).get("status", "")
    if status == "would_install":
        reasons.append("driver: packages to install or change")
    elif status == "installed_reboot_required":
        reasons.append("driver: installed, not loaded (reboot)")
    if toolkit_result:
        installed = str(toolkit_result.get("version") or "")
        if not installed:
            reasons.append("container toolkit: to install")
        elif toolkit_version and not installed.startswith(str(toolkit_version)):
            reasons.append(f"container toolkit: {installed} installed, {toolkit_version} wanted")
        reasons.extend(f"container toolkit: {path} would change" for path in toolkit_result.get("changed_files") or [])
    return {"needed": bool(reasons), "reasons": reasons}


class FilterModule:
    def filters(self) -> dict:
        return {"_maintenance_plan": maintenance_plan}
