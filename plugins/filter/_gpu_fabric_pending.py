# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_fabric_pending filter; the logic is in module_utils/_nvswitch.py (shared with gpu_facts and gpu_health)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _gpu_fabric_pending
version_added: 1.0.0
short_description: 'Private to the verify role, not API: the GPUs whose NVSwitch fabric registration is not done yet'
description:
  - Used by the C(verify) role before vectorAdd on a host with NVSwitches - one line per GPU of
    M(k8sgpu.nvidia.gpu_facts)' C(nvidia_gpus) whose C(fabric_state) (from C(nvidia-smi -q -x)'s C(fabric/state)) is
    not V(Completed), or is V(Completed) with a C(fabric_status) other than V(Success) (the checks
    C(fabric_not_completed) and C(fabric_failed) of gpu_health). GPUs without NVSwitch fabric (V(N/A),
    V(Not Supported), no element) never count.
positional: _input
options:
  _input:
    description: C(ansible_facts.nvidia_gpus).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
pending: "{{ ansible_facts['nvidia_gpus'] | k8sgpu.nvidia._gpu_fabric_pending }}"
# ["GPU 0 00000000:18:00.0: fabric_not_completed - the GPU's NVSwitch fabric state is 'In Progress', ..."]
"""

RETURN = r"""
_value:
  description: The lines; empty when every GPU may run CUDA work.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _nvswitch


def gpu_fabric_pending(gpus):
    """module_utils/_nvswitch.py's fabric_pending."""
    if gpus is not None and not isinstance(gpus, list):
        raise AnsibleFilterError(f"gpu_fabric_pending expects gpu_facts' nvidia_gpus (a list), got {type(gpus).__name__}")
    return _nvswitch.fabric_pending(gpus or [])


class FilterModule:
    def filters(self) -> dict:
        return {"_gpu_fabric_pending": gpu_fabric_pending}
