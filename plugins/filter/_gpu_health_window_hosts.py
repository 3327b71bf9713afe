# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health_window_hosts filter."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _gpu_health_window_hosts
version_added: 2.0.0
short_description: >-
  Private to the collection's playbooks, not API: the GPU hosts that need the health playbook's maintenance
  window, in the order to take them
description:
  - From a list of inventory hosts (the play's, in inventory order), those whose plan (the host variable
    C(_gpu_health_plan) that the gpu_health role's entry point C(record) sets, from P(k8sgpu.nvidia._gpu_health_plan#filter))
    needs the serial play (C(window) true). Hosts healthy again that this collection cordoned come first (to be checked
    and returned, freeing the fleet's limit), then hosts to drain, each part in the order of the list.
  - A host without a plan (its run ended before the health read, or failed) is left out.
  - The order decides which Node takes C(k8sgpu_max_unavailable) when several wait for it. The health playbook adds
    the hosts to its window group in this order with M(ansible.builtin.add_host); M(ansible.builtin.group_by) adds
    them in the order their results come back, which differs from run to run.
positional: _input, hostvars
options:
  _input:
    description: Inventory host names, in the order to keep.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Group the hosts that need a maintenance window, in inventory order (those healthy again first)
  ansible.builtin.add_host:
    name: "{{ item }}"
    groups: _k8sgpu_gpu_health_window
  loop: "{{ ansible_play_hosts | k8sgpu.nvidia._gpu_health_window_hosts(hostvars) }}"
  changed_when: false
"""

RETURN = r"""
_value:
  description: The inventory hosts that need the window, those to return first.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health_plan


def gpu_health_window_hosts(hosts, hostvars):
    """module_utils/_gpu_health_plan.py's window_hosts, its errors as the filter's."""
    try:
        return _gpu_health_plan.window_hosts(hosts, hostvars)
    except _gpu_health_plan.GpuHealthPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_gpu_health_window_hosts": gpu_health_window_hosts}
