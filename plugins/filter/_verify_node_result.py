# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify_node_result filter; the logic is in module_utils/_verify_summary.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _verify_node_result
version_added: 1.0.0
short_description: 'Private to the verify role, not API: judge the registered result of the node-level vectorAdd test'
description:
  - Turns the registered result of M(k8sgpu.nvidia.cuda_vector_add) (passed, failed with C(ignore_errors), or skipped)
    into a status (V(passed), V(failed), V(skipped)), a short text for the summary table and the reasons.
  - The reasons are one line per failed GPU, with its index, name and UUID and the module's error for it (a CUDA
    error, or the wrong elements); where no GPU result says why (no driver library, no GPU of a listed index,
    C(cuInit) failed), the module's message.
  - The role M(k8sgpu.nvidia.verify) stores it in C(verify_host) for P(k8sgpu.nvidia._verify_summary#filter).
positional: _input
options:
  _input:
    description: The registered result of a M(k8sgpu.nvidia.cuda_vector_add) task.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Run vectorAdd on each GPU
  k8sgpu.nvidia.cuda_vector_add:
  register: vector_add
  ignore_errors: true

- name: Show which GPU failed and why
  ansible.builtin.debug:
    msg: "{{ (vector_add | k8sgpu.nvidia._verify_node_result).failures }}"
"""

RETURN = r"""
_value:
  description: The judged result.
  type: dict
  contains:
    status:
      description: V(passed), V(failed) or V(skipped).
      type: str
    text:
      description: For example C(passed on 8 GPU(s), 0.61/0.6/... ms), C(FAILED on 1 of 8 GPU(s)), C(FAILED).
      type: str
    failures:
      description: Why it failed, one line per failed GPU; empty when it did not fail.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _verify_summary


def verify_node_result(result):
    """module_utils/_verify_summary.py's verify_node_result, its errors as the filter's."""
    try:
        return _verify_summary.verify_node_result(result)
    except _verify_summary.VerifySummaryError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_verify_node_result": verify_node_result}
