# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health_record filter."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _gpu_health_record
version_added: 2.0.0
short_description: 'Private to the gpu_health role, not API: the gpu_health role''s record (Node annotation) after a host''s maintenance window'
description:
  - From the plan P(k8sgpu.nvidia._gpu_health_plan#filter) made before the window, the record the Node gets after it -
    V(waiting) (the fleet's limit let no more Nodes out), V(quarantined), V(out) (the recovery or the check after it
    failed) or V(returned) (healthy, back in service).
  - Equal to the record on the Node but for its times, it is not rewritten (C(differs) false).
positional: _input
options:
  _input:
    description: The plan.
    type: dict
    required: true
  state:
    description: V(waiting), V(quarantined), V(out) or V(returned).
    type: str
    required: true
  reason:
    description: Why, for people reading the Node.
    type: str
    required: true
  now:
    description: The time written in the record (ISO 8601, UTC).
    type: str
    default: ""
  health:
    description: The health read after the recovery, where there was one; the plan's GPUs otherwise.
    type: dict
  taint_from:
    description: As for P(k8sgpu.nvidia._gpu_health_plan#filter).
    type: str
    default: needs_reset
  cordoned:
    description: This collection cordoned the Node for the finding; omitted, as the plan's record says.
    type: bool
  recovered:
    description: When the recovery finished (ISO 8601); the next health read looks at kernel-log events after it.
    type: str
    default: ""
"""

RETURN = r"""
_value:
  description: C(record) (dict), C(annotation) (its JSON text), C(differs) (bool, the record differs from the one on the Node), C(status), C(gpus).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health_plan


def gpu_health_record(plan, **kwargs):
    """module_utils/_gpu_health_plan.py's record_after, its errors as the filter's."""
    try:
        return _gpu_health_plan.record_after(plan, **kwargs)
    except _gpu_health_plan.GpuHealthPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_gpu_health_record": gpu_health_record}
