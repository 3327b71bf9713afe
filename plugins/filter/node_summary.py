# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter node_summary; the logic is in module_utils/_node_summary.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: node_summary
version_added: 1.0.0
short_description: Summarise a Kubernetes Node for a report
description:
  - Turns a Node object (as M(kubernetes.core.k8s_info) returns it) into a small dict - C(name); C(ready) (its
    C(Ready) condition is C(True)); C(gpus) and C(gpus_allocatable) (C(status.capacity) and C(status.allocatable)
    of C(nvidia.com/gpu), 0 when absent); C(roles) (the suffixes of its C(node-role.kubernetes.io/*) labels);
    C(taints) (each as C(key[=value]:Effect)).
  - The same file has C(node_summary_line), which writes such a dict as one aligned report line.
positional: _input
options:
  _input:
    description: A Node object.
    type: dict
    required: true
"""

EXAMPLES = r"""
nodes: "{{ k8s_info_result.resources | map('k8sgpu.nvidia.node_summary') | list }}"
report: "{{ nodes | map('k8sgpu.nvidia.node_summary_line') | list }}"
"""

RETURN = r"""
_value:
  description: The summary.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_summary


def node_summary(node):
    """module_utils/_node_summary.py's node_summary, its errors as the filter's."""
    try:
        return _node_summary.node_summary(node)
    except _node_summary.NodeSummaryError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"node_summary": node_summary}
