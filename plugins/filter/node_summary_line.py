# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_summary_line filter; the logic is in module_utils/_node_summary.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: node_summary_line
version_added: 1.0.0
short_description: Write a node summary as one report line
description:
  - Writes a dict from C(k8sgpu.nvidia.node_summary) as C(<name> <Ready|NotReady> gpus=<n> roles=<r,...> taints=<t,...>),
    in aligned columns, C(-) for an empty list.
positional: _input
options:
  _input:
    description: A C(k8sgpu.nvidia.node_summary) result.
    type: dict
    required: true
"""

EXAMPLES = r"""
msg: "{{ preflight_cluster.nodes | map('k8sgpu.nvidia.node_summary_line') | list }}"
"""

RETURN = r"""
_value:
  description: The line.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_summary


def node_summary_line(summary):
    """module_utils/_node_summary.py's node_summary_line, its errors as the filter's."""
    try:
        return _node_summary.node_summary_line(summary)
    except _node_summary.NodeSummaryError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"node_summary_line": node_summary_line}
