# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server-side apply: hand the fields another field manager set over to ours."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _take_over_fields
version_added: 1.0.0
short_description: >-
  Private to the roles device_plugin and k8s_apply, not API: hand the fields other field managers set to ours,
  for server-side apply
description:
  - Returns an object's C(metadata.managedFields) with the entries of the given managers that have operation C(Update)
    on the main resource (not a subresource such as C(status)) merged into the given manager's C(Apply) entry,
    which is created when there is none. Other entries are kept as they are.
  - Server-side apply removes a field the applied configuration no longer has only when the applier is its only
    owner. Fields an object got from a merge patch or an update belong to that request's manager and would never
    be removed; written back once (a JSON patch of C(/metadata/managedFields)), they become the applier's.
  - The same list is returned when none of the managers has such an entry, so a task can compare to decide
    whether to patch.
positional: _input, managers, manager
options:
  _input:
    description: The object's C(metadata.managedFields).
    type: list
    elements: dict
    required: true
  managers:
    description: Field managers whose fields to take over, for example C(OpenAPI-Generator), the name the API server
      gives requests of the Python kubernetes client that name no field manager.
    type: list
    elements: str
    required: true
  manager:
    description: The field manager that takes them, the one the apply uses.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Take over the fields set by merge patches before moving to server-side apply
  kubernetes.core.k8s_json_patch:
    kind: DaemonSet
    namespace: kube-system
    name: my-daemonset
    patch:
      - {op: test, path: /metadata/resourceVersion, value: "{{ live.metadata.resourceVersion }}"}
      - op: replace
        path: /metadata/managedFields
        value: "{{ live.metadata.managedFields | k8sgpu.nvidia._take_over_fields(['OpenAPI-Generator'], 'my-manager') }}"
"""

RETURN = r"""
_value:
  description: The managedFields to write back.
  type: list
  elements: dict
"""

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_ownership import earlier_writes


def _plain(value: Any) -> Any:
    """A copy made of plain dicts and lists. Not copy.deepcopy: Ansible hands filters its lazy containers, whose deep
    copy renders and copies every value again at each level (a DaemonSet's FieldsV1 tree took about 12 s a call)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _union(a: dict, b: dict) -> dict:
    """Union of two FieldsV1 trees ({"f:spec": {"f:x": {}}, ...}) made of plain dicts (_plain), as a new dict."""
    out = dict(a)
    for key, value in b.items():
        out[key] = _union(out[key] or {}, value or {}) if key in out else value
    return out


def take_over_fields(managed_fields: Any, managers: Sequence[str], manager: str) -> list:
    """An object's metadata.managedFields with the fields that `managers` set with Update operations (the main
    resource; subresources such as status stay with their controllers) moved into `manager`'s Apply entry.

    Server-side apply removes a field when the applied configuration drops it only if the applier is the field's
    only owner. Fields set by a merge patch (as the device_plugin role did before it applied server-side) belong to
    another manager and would stay for ever: written back as managedFields, this makes them ours, once. Returns
    the list unchanged when none of `managers` has such an entry.
    """
    if managed_fields is None:
        return []
    if isinstance(managed_fields, (str, Mapping)) or not isinstance(managed_fields, Sequence):
        raise AnsibleFilterError(f"take_over_fields expects an object's metadata.managedFields (a list), got {managed_fields!r}")
    entries = [dict(e) for e in managed_fields]
    # Which entries: the same decision the module k8s_namespace_objects makes when it names the objects to hand over.
    legacy = earlier_writes(entries, managers)
    if not legacy:
        return list(managed_fields)
    ours = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Apply"
                 and not e.get("subresource")), None)
    fields: dict = _plain((ours or {}).get("fieldsV1") or {})
    for entry in legacy:
        fields = _union(fields, _plain(entry.get("fieldsV1") or {}))
    out = []
    for entry in entries:
        if entry is legacy[0] and ours is None:
            new = {"manager": manager, "operation": "Apply", "apiVersion": entry.get("apiVersion"),
                   "time": entry.get("time"), "fieldsType": "FieldsV1", "fieldsV1": fields}
            out.append({k: v for k, v in new.items() if v is not None})
        elif entry is ours:
            out.append({**entry, "fieldsV1": fields})
        elif not any(entry is e for e in legacy):
            out.append(entry)
    return out


class FilterModule:
    def filters(self) -> dict:
        return {"_take_over_fields": take_over_fields}
