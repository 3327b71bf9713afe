# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for Kubernetes taints."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import taint_str


def taint_to_string(taint: dict) -> str:
    """Return a taint as ``key[=value]:Effect``, the form ``kubectl taint`` takes."""
    if not isinstance(taint, dict) or "key" not in taint or "effect" not in taint:
        raise AnsibleFilterError(f"taint_to_string expects a taint with 'key' and 'effect', got {taint!r}")
    return taint_str(taint)


class FilterModule:
    def filters(self) -> dict:
        return {"taint_to_string": taint_to_string}
