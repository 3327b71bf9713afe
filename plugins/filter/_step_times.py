# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The step_times filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _step_times
version_added: 1.0.0
short_description: 'Private to the collection''s playbooks, not API: wall time per step of a rolling upgrade'
description:
  - From a list of C([step, start]) pairs (seconds since the epoch, as C(now().timestamp()) gives them) and the
    end time, the time each step took, as text (C(drain 3.1 s, driver 0.4 s, ...)). A step named twice adds up.
positional: _input, end
options:
  _input:
    description: C([step, start]) pairs in the order the steps ran.
    type: list
    elements: list
    required: true
  end:
    description: When the last step ended.
    type: float
    required: true
"""

EXAMPLES = r"""
msg: "{{ marks | k8sgpu.nvidia._step_times(now().timestamp()) }}"
"""

RETURN = r"""
_value:
  description: C(step N.N s) per step, comma-separated.
  type: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError


def step_times(marks: Any, end: float) -> str:
    """Wall time per step from [[step, start], ...] (seconds since the epoch) and the end: "drain 3.1 s, ...".

    A step named twice (a resumed step) adds up.
    """
    if not isinstance(marks, list) or any(not isinstance(m, (list, tuple)) or len(m) != 2 for m in marks):
        raise AnsibleFilterError("step_times expects a list of [step, start time] pairs")
    totals: dict[str, float] = {}
    for (step, start), nxt in zip(marks, [*marks[1:], [None, end]]):
        totals[str(step)] = totals.get(str(step), 0.0) + max(0.0, float(nxt[1]) - float(start))
    return ", ".join(f"{step} {seconds:.1f} s" for step, seconds in totals.items())


class FilterModule:
    def filters(self) -> dict:
        return {"_step_times": step_times}
