# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter grafana_dashboard of the gpu_dashboard role; the logic is in module_utils/_grafana.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _grafana_dashboard
version_added: 1.0.0
short_description: 'Private to the gpu_dashboard role, not API: check a Grafana dashboard''s JSON before it is shipped in a ConfigMap'
description:
  - Returns the text unchanged when it is valid JSON, an object with a C(title) and C(panels) (or C(rows)), and
    small enough for a ConfigMap (1 MiB less 4 KiB).
  - Otherwise fails naming O(source) and the fix.
positional: _input, source
options:
  _input:
    description: The dashboard's JSON text.
    type: str
    required: true
  source:
    description: Where the text comes from (a file name), for the error message.
    type: str
    default: dashboard
"""

EXAMPLES = r"""
json: "{{ lookup('ansible.builtin.file', path) | k8sgpu.nvidia._grafana_dashboard(path) }}"
"""

RETURN = r"""
_value:
  description: The same text.
  type: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _grafana


def grafana_dashboard(text: Any, source: str = "dashboard") -> str:
    if not isinstance(text, str):
        raise AnsibleFilterError(f"grafana_dashboard expects the dashboard's JSON text ({source})")
    try:
        return _grafana.grafana_dashboard(text, str(source))
    except _grafana.DashboardError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "_grafana_dashboard": grafana_dashboard,
        }
