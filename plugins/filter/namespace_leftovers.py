# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The namespace_leftovers filter (the private role _k8s); the logic is in module_utils/_monitoring.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring


def namespace_leftovers(results: Any, defaults: Any = None, removed: Any = None) -> list[str]:
    if not isinstance(results, list):
        raise AnsibleFilterError(f"namespace_leftovers expects the loop results of k8s_info, got {type(results).__name__}")
    return _monitoring.namespace_leftovers(results, defaults, removed)


class FilterModule:
    def filters(self) -> dict:
        return {"namespace_leftovers": namespace_leftovers}
