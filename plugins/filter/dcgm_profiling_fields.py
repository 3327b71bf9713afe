# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dcgm_profiling_fields filter; the logic is in module_utils/_dcgm.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: dcgm_profiling_fields
version_added: 1.0.0
short_description: The profiling (DCP) fields a DCGM exporter counters CSV asks for
description:
  - Lists the C(DCGM_FI_PROF_*) fields of a counters CSV (comment lines skipped). The exporter reads those through
    DCGM's profiling module, which needs C(CAP_SYS_ADMIN).
positional: _input
options:
  _input:
    description: The counters CSV text (as P(k8sgpu.nvidia.dcgm_counters_csv#filter) writes it).
    type: str
    required: true
"""

EXAMPLES = r"""
needs_sys_admin: "{{ csv | k8sgpu.nvidia.dcgm_profiling_fields | length > 0 }}"
"""

RETURN = r"""
_value:
  description: The profiling field names, in file order.
  type: list
  elements: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _dcgm


def dcgm_profiling_fields(csv_text: Any) -> list[str]:
    if not isinstance(csv_text, str):
        raise AnsibleFilterError("dcgm_profiling_fields expects the counters CSV text")
    return _dcgm.profiling_fields(csv_text)


class FilterModule:
    def filters(self) -> dict:
        return {"dcgm_profiling_fields": dcgm_profiling_fields}
