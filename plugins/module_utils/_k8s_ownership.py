# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: whether a live Kubernetes object belongs to another manager (Helm, kubectl, an
operator), so that the private role k8s_apply neither takes it over (server-side apply with conflicts forced) nor
deletes it (state=absent deletes by name) unless asked.

Not a public API. foreign_owner and earlier_writes are pure and unit-tested; the module k8s_namespace_objects reads
the live objects and calls them (earlier_writes also the filter take_over_fields).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FIELD_MANAGER = "k8sgpu.nvidia"
MANAGED_BY = "app.kubernetes.io/managed-by"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"


def _is_ours(manager: Any, field_manager: str) -> bool:
    return isinstance(manager, str) and (manager == field_manager or manager.startswith(field_manager + "/"))


def foreign_owner(obj: Any, field_manager: str = FIELD_MANAGER, take_over_managers: Iterable[str] = ()) -> str | None:
    """Why the live object obj belongs to another manager, or None when it is the collection's (or nobody's).

    Another manager's, in this order:
    - its label app.kubernetes.io/managed-by names someone else (Helm, another tool);
    - it carries Helm's release annotation (meta.helm.sh/release-name);
    - field_manager has never written its main resource (no managedFields entry without a subresource) and another
      manager has - the object was created by someone else (Helm's ``helm``, ``kubectl-client-side-apply``,
      ``kubectl-create``, another server-side applier).
    Once field_manager has applied an object (it made it, or took it over when asked), other managers' fields on it
    (controllers writing a status subresource or an annotation, a co-applier's fields) do not make it foreign; the
    label and Helm's annotation still do, as long as they are there. The managers in take_over_managers count as
    field_manager (the collection's own earlier writers, such as the device_plugin role's merge patches before
    1.0.0, whose client the API server calls ``OpenAPI-Generator``).
    """
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    managed_by = labels.get(MANAGED_BY)
    if managed_by not in (None, "", field_manager):
        return f"its label {MANAGED_BY} is {managed_by!r}"
    if annotations.get(HELM_RELEASE):
        release = annotations[HELM_RELEASE]
        if annotations.get(HELM_NAMESPACE):
            release = f"{annotations[HELM_NAMESPACE]}/{release}"
        return f"it belongs to the Helm release {release} (annotation {HELM_RELEASE})"
    allowed = set(take_over_managers or ())
    main = [e for e in meta.get("managedFields") or [] if isinstance(e, Mapping) and not e.get("subresource")]
    ours = [e for e in main if _is_ours(e.get("manager"), field_manager) or e.get("manager") in allowed]
    others = [e for e in main if e not in ours]
    if not ours and others:
        names = sorted({str(e.get("manager")) for e in others})
        return f"it was created by another field manager ({', '.join(names)}), never applied by {field_manager}"
    return None


def earlier_writes(managed_fields: Any, managers: Iterable[str]) -> list[Mapping]:
    """The entries of managed_fields (an object's metadata.managedFields) in which one of managers wrote the main
    resource with an Update (a merge patch, a PUT): fields server-side apply never removes while another manager
    holds them. A subresource's entries (a controller's status) are not. The private role k8s_apply hands them to its
    field manager once (filter take_over_fields) for its _k8s_apply_take_over_managers."""
    wanted = set(managers or ())
    if not wanted or isinstance(managed_fields, (str, Mapping)) or not isinstance(managed_fields, Sequence):
        return []
    return [e for e in managed_fields if isinstance(e, Mapping) and e.get("manager") in wanted
            and e.get("operation") == "Update" and not e.get("subresource")]


def describe(obj: Mapping) -> str:
    """Kind namespace/name, as the private role's loops label an object."""
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def refusal(found: list[tuple[Mapping, str]], owner: str, state: str) -> str:
    """The message that refuses to take over (state=present) or delete (state=absent) the objects found."""
    action = "delete" if state == "absent" else "take over (server-side apply with conflicts forced)"
    lines = "; ".join(f"{describe(obj)}: {why}" for obj, why in found)
    return (f"k8sgpu.nvidia.{owner or 'k8s_apply'} would {action} objects another manager owns - {lines}. Nothing was "
            f"changed. Remove or rename the other manager's objects (or choose other names or another namespace "
            f"for the role's), or, to hand them to the role, run it with _k8s_apply_take_over=true "
            f"(for example -e _k8s_apply_take_over=true).")
