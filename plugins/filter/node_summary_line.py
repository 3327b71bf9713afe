# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_summary_line filter (its code is node_summary.py's, beside the filters it works with)."""
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

from ansible_collections.k8sgpu.nvidia.plugins.filter.node_summary import node_summary_line


class FilterModule:
    def filters(self) -> dict:
        return {"node_summary_line": node_summary_line}
