# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_throttle filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _maintenance_throttle
version_added: 1.1.0
short_description: >-
  Private to the roles container_toolkit, driver and node_maintenance, not API: how many hosts of a play may be
  rebooted, or have a container runtime restarted, at once
description:
  - The count that C(k8sgpu_max_unavailable) (a number of GPU hosts, 1 or more, or a percentage) allows of the
    play's hosts, a percentage rounded down and at least 1, as the fleet's limit counts GPU Nodes.
  - For the C(throttle) of the tasks that take a host out of service (a reboot, a container runtime restart), so that
    a play running every host at once still disrupts at most that many at a time.
positional: _input, hosts
options:
  _input:
    description: C(k8sgpu_max_unavailable) (or the role's own variable that defaults to it).
    type: raw
    required: true
  hosts:
    description: How many hosts the play has (C(ansible_play_hosts_all | length)).
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Reboot, at most k8sgpu_max_unavailable hosts of the play at once
  ansible.builtin.reboot:
  throttle: "{{ k8sgpu_max_unavailable | default(1) | k8sgpu.nvidia._maintenance_throttle(ansible_play_hosts_all | length) }}"
"""

RETURN = r"""
_value:
  description: The number of hosts, 1 or more.
  type: int
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import MaintenanceError, host_count, limit_of


def maintenance_throttle(max_unavailable: Any, hosts: Any) -> int:
    """How many hosts of a play may be disrupted (rebooted, a container runtime restarted) at once: the count
    ``max_unavailable`` (k8sgpu_max_unavailable) allows of ``hosts`` (the play's host count), a percentage rounded
    down, at least 1; for a task's ``throttle``.
    """
    try:
        count = host_count(hosts, "maintenance_throttle")
    except MaintenanceError as exc:
        raise AnsibleFilterError(str(exc)) from None
    try:
        return limit_of(max_unavailable, count)
    except MaintenanceError:
        raise AnsibleFilterError(f"k8sgpu_max_unavailable is {max_unavailable}: it must be a number of GPU hosts "
                                 "(1 or more) or a percentage (1% to 100%), as 1 or '25%'") from None


class FilterModule:
    def filters(self) -> dict:
        return {"_maintenance_throttle": maintenance_throttle}
