# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The namespace_leftovers filter (the private role k8s_apply); the logic is in module_utils/_k8s_namespace.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _namespace_leftovers
version_added: 1.0.0
short_description: 'Private to the k8s_apply role, not API: what a namespace still holds besides Kubernetes'' own objects and those being removed'
description:
  - Takes the loop results of M(kubernetes.core.k8s_info), one per kind, over a namespace, and returns each object
    as C(Kind/name), leaving out O(defaults), the objects in O(removed), objects owned by another object (they are
    garbage-collected with it) and objects already being deleted.
  - The private role C(k8s_apply) removes a namespace it created only when this list is empty.
positional: _input, defaults, removed
options:
  _input:
    description: The registered result's C(results) (each with C(item.kind) and C(resources)).
    type: list
    elements: dict
    required: true
  defaults:
    description: C(Kind/name) of what Kubernetes puts in every namespace.
    type: list
    elements: str
    default: []
  removed:
    description: The objects the role is removing (API objects with C(kind) and C(metadata.name)).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
left: "{{ contents.results | k8sgpu.nvidia._namespace_leftovers(['ServiceAccount/default'], objects) }}"
"""

RETURN = r"""
_value:
  description: C(Kind/name) of each object left, sorted.
  type: list
  elements: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _k8s_namespace


def namespace_leftovers(results: Any, defaults: Any = None, removed: Any = None) -> list[str]:
    if not isinstance(results, list):
        raise AnsibleFilterError(f"namespace_leftovers expects the loop results of k8s_info, got {type(results).__name__}")
    return _k8s_namespace.namespace_leftovers(results, defaults, removed)


class FilterModule:
    def filters(self) -> dict:
        return {"_namespace_leftovers": namespace_leftovers}
