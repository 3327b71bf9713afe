# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter dcgm_counters_csv of the dcgm_exporter role; the logic is in module_utils/_dcgm.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _dcgm_counters_csv
version_added: 1.0.0
short_description: >-
  Private to the dcgm_exporter role, not API: the DCGM exporter's counters CSV from a list of counters, checked
  as the exporter checks it
description:
  - Writes one C(FIELD, type, help) line per counter, the format of the exporter's C(default-counters.csv)
    (C(DCGM_EXPORTER_COLLECTORS)), after a comment line.
  - Fails naming the entry and the fix when a field is not a C(DCGM_FI_*)/C(DCGM_EXP_*) name, the type is not one
    the exporter accepts (C(gauge), C(counter), C(histogram), C(summary), C(label)), the help is not one line
    without commas or quotes, an entry has other keys, or a field is listed twice.
  - With O(profiling=false) the profiling fields (C(DCGM_FI_PROF_*), which need C(CAP_SYS_ADMIN)) are left out.
positional: _input, profiling, extra
options:
  _input:
    description: The counters, each a dict with C(field), C(type) and C(help).
    type: list
    elements: dict
    required: true
  profiling:
    description: Keep the C(DCGM_FI_PROF_*) fields.
    type: bool
    default: true
  extra:
    description: More counters, added after O(_input).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
csv: "{{ dcgm_exporter_counters | k8sgpu.nvidia._dcgm_counters_csv(false, dcgm_exporter_extra_counters) }}"
"""

RETURN = r"""
_value:
  description: The CSV text, one counter a line.
  type: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _dcgm


def dcgm_counters_csv(counters: Any, profiling: bool = True, extra: Any = None) -> str:
    try:
        return _dcgm.counters_csv(counters, bool(profiling), extra or [])
    except _dcgm.DcgmError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {
            "_dcgm_counters_csv": dcgm_counters_csv,
        }
