# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_settings filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _maintenance_settings
version_added: 1.0.0
short_description: >-
  Private to the collection's playbooks, not API: what is wrong with the maintenance settings (batch size,
  limit, delays, timeouts)
description:
  - Checks maintenance settings before any Node is touched and returns one sentence per bad variable, naming it,
    its value and what it must be; an empty list when all are good.
  - By the name's ending, C(_serial) must be a number of hosts per batch (1 or more) or a percentage (1% to 100%);
    C(_max_unavailable) the same, of the GPU Nodes; C(_retry_delay) more than 0 seconds; C(_timeout) a whole number
    of seconds, 1 or more; C(_expected_gpus) a whole number, 0 or more. Other names are not checked.
positional: _input
options:
  _input:
    description: Variable names and their values.
    type: dict
    required: true
"""

EXAMPLES = r"""
problems: "{{ {'k8sgpu_serial': k8sgpu_serial, 'k8sgpu_max_unavailable': 1} | k8sgpu.nvidia._maintenance_settings }}"
"""

RETURN = r"""
_value:
  description: One sentence per bad setting.
  type: list
  elements: str
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import MaintenanceError, parse_max_unavailable


def _positive_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def maintenance_settings(settings: Any) -> list[str]:
    """What is wrong with the maintenance settings, one sentence per variable ([] when all are good).

    ``settings`` maps variable names to values. Variables ending in ``_serial`` must be a number of hosts (1 or more)
    or a percentage (1% to 100%); ``_max_unavailable`` the same (of the GPU Nodes); ``_retry_delay`` more than 0
    seconds; ``_timeout`` 1 second or more; ``_expected_gpus`` 0 or more. Checked before any Node is touched.
    """
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"maintenance_settings expects a mapping of variable names to values, got {settings!r}")
    problems = []
    for name, value in settings.items():
        if name.endswith(("_serial", "_max_unavailable")):
            try:
                parse_max_unavailable(value)
            except MaintenanceError:
                what = "hosts per batch" if name.endswith("_serial") else "GPU Nodes out of service at once"
                problems.append(f"{name} is {value}: it must be a number of {what} (1 or more) or a percentage "
                                "(1% to 100%), as 1 or '25%'")
        elif name.endswith("_retry_delay"):
            number = _positive_number(value)
            if number is None or number <= 0:
                problems.append(f"{name} is {value}: it must be a number of seconds more than 0")
        elif name.endswith("_timeout"):
            number = _positive_number(value)
            if number is None or number < 1 or number != int(number):
                problems.append(f"{name} is {value}: it must be a whole number of seconds, 1 or more")
        elif name.endswith("_expected_gpus"):
            number = _positive_number(value)
            if number is None or number < 0 or number != int(number):
                problems.append(f"{name} is {value}: it must be a whole number of GPUs, 0 or more "
                                "(0: the count the Node advertised before the drain)")
    return problems


class FilterModule:
    def filters(self) -> dict:
        return {"_maintenance_settings": maintenance_settings}
