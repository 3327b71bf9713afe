# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health_plan filter."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _gpu_health_plan
version_added: 2.0.0
short_description: 'Private to the gpu_health role, not API: what the gpu_health role does with a host''s GPU health read and its Node'
description:
  - Reads the result of M(k8sgpu.nvidia.gpu_health) and the host's Node (as M(kubernetes.core.k8s_info) returns it)
    and says what to do, per O(policy) - the taint to set or remove, the record (annotation) to write, whether the
    host needs the serial play (drain, recovery, vectorAdd before the uncordon) and which recovery.
  - A host with a GPU at O(taint_from) or worse gets the taint C(<taint_key>=<status>:NoSchedule) and the record.
    A healthy host whose Node carries the role's taint or record is returned to service; one that an earlier run
    cordoned (the record says so and the node_maintenance annotation is there) is checked with vectorAdd first; a
    Node cordoned by someone else stays cordoned.
  - The record equal to the one on the Node but for its times is not rewritten, so a second run changes nothing.
positional: _input, node
options:
  _input:
    description: The registered result of M(k8sgpu.nvidia.gpu_health).
    type: dict
    required: true
  node:
    description: The Node object, or an empty dict.
    type: dict
    required: true
  policy:
    description: V(report), V(quarantine) or V(recover).
    type: str
    default: report
  taint_from:
    description: The least severe GPU status that takes the Node out.
    type: str
    default: needs_reset
  reset:
    description: A GPU reset may be tried (V(needs_reset)).
    type: bool
    default: true
  reload:
    description: A driver reload may be tried (V(needs_reset) when resets are off).
    type: bool
    default: false
  reboot:
    description: The host may be rebooted (V(needs_reboot), or V(needs_reset) when neither above may).
    type: bool
    default: false
  now:
    description: The time written in the record (ISO 8601, UTC).
    type: str
    default: ""
  state:
    description: V(present), or V(absent) to remove the role's taint and record.
    type: str
    default: present
  taint_key:
    description: The taint's key.
    type: str
    default: nvidia.com/gpu-health
  annotation_key:
    description: The record's annotation key.
    type: str
    default: k8sgpu.nvidia/gpu-health
"""

RETURN = r"""
_value:
  description:
    - C(action) (none, record, quarantine, recover, return, return_verify, remove), C(window) (bool), C(taint) (for
      M(k8sgpu.nvidia.k8s_nodes)), C(annotation) (text, or None to remove it), C(annotation_changed), C(record),
      C(previous), C(status), C(gpus), C(recovery) (reset, reload, reboot, none), C(recovery_gpus), C(reason), C(taint_key)
      (the key of the role's taint, with or without a change to it),
      C(quarantine_reason), C(cordoned), C(cordoned_by_us), C(cordoned_by_person).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health_plan


def gpu_health_plan(health, node, **kwargs):
    """module_utils/_gpu_health_plan.py's plan, its errors as the filter's."""
    try:
        return _gpu_health_plan.plan(health, node, **kwargs)
    except _gpu_health_plan.GpuHealthPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_gpu_health_plan": gpu_health_plan}
