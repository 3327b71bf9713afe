# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_batch filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _maintenance_batch
version_added: 1.1.0
short_description: >-
  Private to the collection's playbooks, not API: whether a batch size would take more GPU hosts out of service
  at once than the fleet's limit
description:
  - In a play that may take hosts out of service (the drain, a reboot asked for), a whole batch of C(k8sgpu_serial)
    hosts can be out at once. Returns one sentence, naming both variables, their values and what to set, when a
    batch can be larger than what C(k8sgpu_max_unavailable) allows; an empty list otherwise.
  - Both counted of the O(hosts) of the run; a percentage rounds down, at least 1, as ansible-core's C(serial) and
    the collection's limit do.
  - Values that are not a number or a percentage are left to P(k8sgpu.nvidia._maintenance_settings#filter).
  - C(playbooks/host.yml) and C(playbooks/upgrade.yml) refuse such a run before any host is touched
    (C(playbooks/tasks/fleet_limit.yml)).
positional: _input, max_unavailable, hosts
options:
  _input:
    description: The batch size, C(k8sgpu_serial).
    type: raw
    required: true
  max_unavailable:
    description: The fleet's limit, C(k8sgpu_max_unavailable).
    type: raw
    required: true
  hosts:
    description: How many GPU hosts the run has (C(ansible_play_hosts_all | length) in their play).
    type: int
    required: true
  reason:
    description: Why the run may take hosts out of service, for the sentence.
    type: str
    default: ""
  serial_name:
    description: The batch size's variable, for the sentence.
    type: str
    default: k8sgpu_serial
  limit_name:
    description: The limit's variable, for the sentence.
    type: str
    default: k8sgpu_max_unavailable
"""

EXAMPLES = r"""
problems: >-
  {{ k8sgpu_serial | k8sgpu.nvidia._maintenance_batch(k8sgpu_max_unavailable | default(1),
  ansible_play_hosts_all | length, reason='driver_reboot is reboot') }}
"""

RETURN = r"""
_value:
  description: One sentence when the batch is too large, else empty.
  type: list
  elements: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import MaintenanceError, host_count, limit_of, parse_max_unavailable


def _batch(serial: Any, hosts: int) -> int:
    """The largest batch ``serial`` makes of ``hosts`` hosts, as ansible-core's serial does (pct_to_int)."""
    number, percent = parse_max_unavailable(serial)
    return min(hosts, max(1, hosts * number // 100) if percent else number)


def maintenance_batch(serial: Any, max_unavailable: Any, hosts: Any, reason: str = "",
                      serial_name: str = "k8sgpu_serial", limit_name: str = "k8sgpu_max_unavailable") -> list[str]:
    """What is wrong with a batch size that would disrupt more hosts at once than the fleet's limit ([] if nothing).

    In a play of ``hosts`` hosts that may reboot them or restart their container runtimes (``reason`` says why: the
    drain, a reboot asked for), a whole batch of ``serial`` hosts can be out of service at once; it must not be larger
    than what ``max_unavailable`` allows of them. A percentage rounds down, at least 1, for both (ansible-core's serial,
    the collection's limit). Bad values are maintenance_settings' to report, not this filter's.
    """
    try:
        count = host_count(hosts, "maintenance_batch")
    except MaintenanceError as exc:
        raise AnsibleFilterError(str(exc)) from None
    if count == 0:
        return []
    try:
        batch, limit = _batch(serial, count), limit_of(max_unavailable, count)
    except MaintenanceError:
        return []
    if batch <= limit:
        return []
    why = f" ({reason})" if reason else ""
    return [f"{serial_name} is {serial} and {limit_name} is {max_unavailable}: of the {count} GPU host(s) of this run "
            f"a batch of {batch} could be rebooted or have its container runtimes restarted at once{why}, where "
            f"{limit_name} allows {limit}. Set {serial_name} to at most {max_unavailable}, or raise {limit_name} to "
            f"{serial} if that many GPU hosts may be out of service at once"]


class FilterModule:
    def filters(self) -> dict:
        return {"_maintenance_batch": maintenance_batch}
