#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_namespace_objects
short_description: List the objects of several kinds in one namespace, or tell which named objects another manager owns
version_added: 1.0.0
description:
  - Lists, in one namespace, the objects of each kind in O(kinds), and returns them per kind (C(listed)) in the shape
    a loop of M(kubernetes.core.k8s_info) registers (C(item), C(resources)), with only the fields that say what an
    object is and whether it goes away by itself (C(apiVersion), C(kind), C(metadata.name),
    C(metadata.ownerReferences), C(metadata.deletionTimestamp)).
  - A kind the API server does not serve (a CRD that is not installed) gives no objects and C(api_found=false), also
    when the client's cached discovery documents still list it but the LIST answers 404 (its CRD was just removed).
  - Why not M(kubernetes.core.k8s_info) in a loop - it lists one kind per call, and each call pays for starting Python
    and importing the Kubernetes client (about a second); the private role C(k8s_apply) looks for twenty kinds before it
    removes a namespace it created, which took 12-15 s per removal with a loop and takes one call with this module.
  - With O(objects) instead (since 1.1.0), reads those objects by name (in one call) and returns in RV(foreign) each
    that exists and belongs to another manager - its label C(app.kubernetes.io/managed-by) names someone else, it
    carries Helm's annotation C(meta.helm.sh/release-name), or it was created by another field manager and never
    applied by O(field_manager). With O(fail_on_foreign), the
    task then fails naming each and what to do. The private role C(k8s_apply) calls it before it applies (server-side,
    conflicts forced) or deletes objects, so that it takes over or deletes another manager's object only when asked.
  - With O(objects), also tells which of their namespaces do not exist (RV(missing_namespaces)), in the same call -
    in check mode the API server cannot dry-run an object whose namespace is still to be created, and C(k8s_apply) reports
    those objects instead of applying them.
  - In the same call (since 1.2.0), for the private role C(k8s_apply) before it writes anything - the Namespace O(namespace)
    as it is (RV(live_namespace)), which of the objects' kinds the API server serves (RV(served); a kind whose CRD
    is not installed has nothing to delete), which objects the collection's earlier writers
    O(take_over_managers) still hold fields of (RV(take_over)), and which of the CRDs O(crds) are not established
    (RV(missing_crds)). One module run instead of one per read, each of which pays for starting Python and the
    Kubernetes client.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
options:
  namespace:
    description:
      - The namespace to list. Required with O(kinds).
      - With O(objects) or O(crds), a namespace to read as well (RV(live_namespace)), whether or not an object is in it.
    type: str
  kinds:
    description:
      - The kinds to list, each by API version and kind, as the Kubernetes API names them.
      - One of O(kinds), O(objects) and O(crds) is required.
    type: list
    elements: dict
    suboptions:
      api_version:
        description: The kind's API group and version, for example V(v1) or V(apps/v1).
        type: str
        required: true
      kind:
        description: The kind, for example V(ConfigMap).
        type: str
        required: true
  objects:
    description:
      - Objects to read by name (each with C(apiVersion), C(kind), C(metadata.name) and, when namespaced,
        C(metadata.namespace); the rest is ignored), to tell which belong to another manager (RV(foreign)).
    type: list
    elements: dict
    version_added: 1.1.0
  field_manager:
    description: With O(objects), the field manager whose objects are not foreign (a C(<field_manager>/...) one too).
    type: str
    default: k8sgpu.nvidia
    version_added: 1.1.0
  take_over_managers:
    description:
      - With O(objects), field managers that count as O(field_manager) (the collection's own earlier writers, such as
        C(OpenAPI-Generator), the API server's name for the Python client the device_plugin role merge-patched with).
      - With O(state=present), the objects whose main resource one of them still holds fields of (an C(Update) entry
        in C(metadata.managedFields)) are returned in RV(take_over).
    type: list
    elements: str
    default: []
    version_added: 1.1.0
  fail_on_foreign:
    description: With O(objects), fail when one belongs to another manager, naming each and the fix.
    type: bool
    default: false
    version_added: 1.1.0
  owner:
    description: With O(fail_on_foreign), the role named in the message.
    type: str
    default: k8s_apply
    version_added: 1.1.0
  state:
    description:
      - With O(fail_on_foreign), what the caller would do to the objects (the message says take over or delete).
      - RV(take_over) is looked for with V(present) only.
    type: str
    choices: [present, absent]
    default: present
    version_added: 1.1.0
  crds:
    description:
      - Names of CustomResourceDefinitions (C(servicemonitors.monitoring.coreos.com)) to look up; those that do not
        exist or whose C(Established) condition is not C(True) are returned in RV(missing_crds).
    type: list
    elements: str
    version_added: 2.0.0
requirements:
  - kubernetes >= 24.2.0 (Python)
  - kubernetes.core (its authentication and API client)
notes:
  - Needs C(list) on each kind in the namespace (RBAC); a kind it may not list fails the task, naming the kind.
    With O(objects), C(get) on each object and on their namespaces (and O(namespace)); with O(crds), C(get) on
    those CustomResourceDefinitions.
"""

EXAMPLES = r"""
- name: What does gpu-monitoring still hold?
  k8sgpu.nvidia.k8s_namespace_objects:
    namespace: gpu-monitoring
    kinds:
      - {api_version: v1, kind: ConfigMap}
      - {api_version: apps/v1, kind: Deployment}
      - {api_version: monitoring.coreos.com/v1, kind: ServiceMonitor}
  register: contents

- name: Show them as Kind/name
  ansible.builtin.debug:
    msg: "{{ contents.listed | map(attribute='resources') | flatten | map(attribute='metadata.name') }}"

- name: Refuse to take over objects Helm or kubectl made
  k8sgpu.nvidia.k8s_namespace_objects:
    objects: "{{ rendered_objects }}"
    fail_on_foreign: true
    owner: dcgm_exporter

- name: Is the Prometheus Operator's ServiceMonitor CRD established?
  k8sgpu.nvidia.k8s_namespace_objects:
    crds: [servicemonitors.monitoring.coreos.com]
  register: crd
  # crd.missing_crds is [] when it is
"""

RETURN = r"""
listed:
  description: One entry per kind of O(kinds), in their order.
  returned: always
  type: list
  elements: dict
  contains:
    item:
      description: The kind asked for (C(api_version), C(kind)).
      type: dict
    api_found:
      description: Whether the API server serves the kind (from its discovery documents).
      type: bool
    resources:
      description:
        - The kind's objects in the namespace (the LIST answer's C(items)), each with C(apiVersion), C(kind) and
          C(metadata) holding C(name), C(namespace), C(ownerReferences) and C(deletionTimestamp) where the API set them.
      type: list
      elements: dict
      sample: [{apiVersion: v1, kind: ConfigMap, metadata: {name: dcgm-exporter-metrics, namespace: dcgm-exporter}}]
foreign:
  description: With O(objects), those that exist and belong to another manager, in their order.
  returned: with O(objects)
  type: list
  elements: dict
  version_added: 1.1.0
  contains:
    object:
      description: C(Kind namespace/name).
      type: str
    reason:
      description: Why it is another manager's.
      type: str
  sample: [{object: ConfigMap gpu-monitoring/dcgm-exporter-metrics,
            reason: "it belongs to the Helm release gpu-monitoring/dcgm (annotation meta.helm.sh/release-name)"}]
missing_namespaces:
  description:
    - With O(objects), the namespaces their C(metadata.namespace) names that do not exist (a GET of each Namespace
      answered 404), in the order the objects name them, each once.
  returned: with O(objects)
  type: list
  elements: str
  version_added: 1.1.0
  sample: [gpu-monitoring]
live_namespace:
  description:
    - With O(objects) or O(crds) and O(namespace), the Namespace O(namespace) as the API server returned it; none when
      it does not exist.
  returned: with O(objects) or O(crds), and O(namespace)
  type: dict
  version_added: 2.0.0
  sample:
    apiVersion: v1
    kind: Namespace
    metadata: {name: gpu-monitoring, annotations: {k8sgpu.nvidia/created-by: dcgm_exporter}}
served:
  description:
    - With O(objects), those whose kind the API server serves, in their order, each with only C(apiVersion), C(kind)
      and C(metadata.name) and C(metadata.namespace) - what a deletion needs. A kind whose CRD is not installed has
      no object to delete.
  returned: with O(objects)
  type: list
  elements: dict
  version_added: 2.0.0
  sample: [{apiVersion: v1, kind: ConfigMap, metadata: {name: dcgm-exporter-metrics, namespace: gpu-monitoring}}]
take_over:
  description:
    - With O(objects), O(take_over_managers) and O(state=present), the objects that exist and whose main resource one
      of O(take_over_managers) holds fields of (an C(Update) entry of C(metadata.managedFields) without a
      subresource), in their order, each with C(apiVersion), C(kind) and C(metadata) holding C(name), C(namespace),
      C(resourceVersion) and C(managedFields) - what a JSON patch of C(/metadata/managedFields) needs to hand those
      fields to O(field_manager) (filter P(k8sgpu.nvidia._take_over_fields#filter)).
  returned: with O(objects)
  type: list
  elements: dict
  version_added: 2.0.0
missing_crds:
  description: With O(crds), those that do not exist or are not established, in their order.
  returned: with O(crds)
  type: list
  elements: str
  version_added: 2.0.0
  sample: [servicemonitors.monitoring.coreos.com]
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_ownership import (
    describe,
    earlier_writes,
    foreign_owner,
    refusal,
)

try:
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
except ImportError:  # k8s_module() has failed with the fix by then
    ResourceNotFoundError = LookupError

_KEEP_METADATA = ("name", "namespace", "ownerReferences", "deletionTimestamp")


def slim(obj: dict, api_version: str, kind: str) -> dict:
    """An object reduced to what says what it is and whether it goes away by itself."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion") or api_version,
        "kind": obj.get("kind") or kind,
        "metadata": {k: meta[k] for k in _KEEP_METADATA if k in meta},
    }


def list_kinds(api, namespace: str, kinds: list) -> list:
    """One result per kind: {item, api_found, resources}. Raises RuntimeError naming the kind on an API error."""
    results = []
    for want in kinds:
        item = {"api_version": want["api_version"], "kind": want["kind"]}
        try:
            resource = api.resources.get(api_version=item["api_version"], kind=item["kind"])
        except ResourceNotFoundError:
            results.append({"item": item, "api_found": False, "resources": []})
            continue
        try:
            answer = api.request("get", resource.path(namespace=namespace), serializer=raw_json)
        except Exception as exc:  # the dynamic client's ApiException and connection errors
            if getattr(exc, "status", None) == 404:
                # Served when the (cached) discovery documents were read, gone now: its CRD was removed since.
                results.append({"item": item, "api_found": False, "resources": []})
                continue
            raise RuntimeError(f"listing {item['kind']} ({item['api_version']}) in namespace {namespace}: "
                               f"{api_error_message(exc)}") from exc
        items = (answer or {}).get("items") or []
        results.append({"item": item, "api_found": True,
                        "resources": [slim(o, item["api_version"], item["kind"]) for o in items]})
    return results


def read_live(api, obj: dict) -> tuple[bool, dict | None]:
    """(whether the API server serves obj's kind, the live object named as obj is - apiVersion, kind,
    metadata.name/namespace - or None when there is none). Raises RuntimeError naming the object on an API error."""
    meta = obj.get("metadata") or {}
    try:
        resource = api.resources.get(api_version=obj.get("apiVersion"), kind=obj.get("kind"))
    except ResourceNotFoundError:
        return False, None
    namespace = meta.get("namespace") if getattr(resource, "namespaced", True) else None
    try:
        return True, api.request("get", resource.path(name=meta.get("name"), namespace=namespace), serializer=raw_json)
    except Exception as exc:  # the dynamic client's ApiException and connection errors
        if getattr(exc, "status", None) == 404:
            return True, None
        raise RuntimeError(f"reading {describe(obj)}: {api_error_message(exc)}") from exc


def read_object(api, obj: dict) -> dict | None:
    """The live object named as obj is (apiVersion, kind, metadata.name/namespace); None when there is none (or its
    kind is not served). Raises RuntimeError naming the object on an API error."""
    return read_live(api, obj)[1]


def _identity(obj: dict, live: dict | None = None, extra: tuple = ()) -> dict:
    """apiVersion, kind and metadata name and namespace (and the extra metadata keys, from the live object)."""
    meta = obj.get("metadata") or {}
    out = {"name": meta.get("name")}
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    live_meta = (live or {}).get("metadata") or {}
    out.update({k: live_meta[k] for k in extra if k in live_meta})
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": out}


def inspect_objects(api, objects: list, field_manager: str, take_over_managers: list, look_for_take_over: bool = True
                    ) -> dict:
    """One read of each object: {"foreign": [(object, why)] (_k8s_ownership.foreign_owner), "served": the objects
    whose kind is served (_identity), "take_over": with look_for_take_over, the live objects take_over_managers hold
    fields of (_k8s_ownership.earlier_writes; _identity with resourceVersion and managedFields)}."""
    found, served, take_over = [], [], []
    for obj in objects:
        if not isinstance(obj, dict) or not (obj.get("metadata") or {}).get("name"):
            raise RuntimeError(f"{obj!r} is not an object with apiVersion, kind and metadata.name")
        is_served, live = read_live(api, obj)
        if is_served:
            served.append(_identity(obj))
        why = foreign_owner(live, field_manager, take_over_managers)
        if why:
            found.append((obj, why))
        managed_fields = ((live or {}).get("metadata") or {}).get("managedFields")
        if look_for_take_over and earlier_writes(managed_fields, take_over_managers):
            take_over.append(_identity(obj, live, ("resourceVersion", "managedFields")))
    return {"foreign": found, "served": served, "take_over": take_over}


def foreign_objects(api, objects: list, field_manager: str, take_over_managers: list) -> list[tuple[dict, str]]:
    """(object, why) for each of objects that exists and belongs to another manager (_k8s_ownership.foreign_owner)."""
    return inspect_objects(api, objects, field_manager, take_over_managers)["foreign"]


def read_namespaces(api, objects: list, also: str | None = None) -> tuple[list, dict]:
    """(the namespaces the objects' metadata.namespace names that do not exist, in order, each once; {name: the live
    Namespace or None} of those and of also). Each namespace is read once."""
    named = []
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace") if isinstance(obj, dict) else None
        if namespace and namespace not in named:
            named.append(namespace)
    live = {}
    for namespace in named + ([also] if also and also not in named else []):
        live[namespace] = read_object(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    return [n for n in named if live[n] is None], live


def missing_namespaces(api, objects: list) -> list:
    """The namespaces the objects' metadata.namespace names that do not exist, in order, each once."""
    return read_namespaces(api, objects)[0]


def crd_established(crd: dict | None) -> bool:
    """Whether a live CustomResourceDefinition's Established condition is True (the API server serves its kind)."""
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(isinstance(c, dict) and c.get("type") == "Established" and c.get("status") == "True"
               for c in conditions)


def missing_crds(api, names: list) -> list:
    """Those of the CRD names that do not exist or are not established, in order."""
    return [name for name in names if not crd_established(read_object(api, {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name}}))]


def main():
    module = k8s_module(
        argument_spec=dict(
            namespace=dict(type="str"),
            kinds=dict(type="list", elements="dict", options=dict(
                api_version=dict(type="str", required=True),
                kind=dict(type="str", required=True),
            )),
            objects=dict(type="list", elements="dict"),
            field_manager=dict(type="str", default="k8sgpu.nvidia"),
            take_over_managers=dict(type="list", elements="str", default=[]),
            fail_on_foreign=dict(type="bool", default=False),
            owner=dict(type="str", default="k8s_apply"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            crds=dict(type="list", elements="str"),
        ),
        required_one_of=[("kinds", "objects", "crds")],
        mutually_exclusive=[("kinds", "objects"), ("kinds", "crds")],
        required_by={"kinds": "namespace"},
        supports_check_mode=True,
    )
    p = module.params
    api = dynamic_client(module)
    if p["objects"] is not None or p["crds"] is not None:
        objects = p["objects"] or []
        result = {}
        try:
            # The objects first: their reads name them when the API server does not answer.
            seen = inspect_objects(api, objects, p["field_manager"], p["take_over_managers"], p["state"] == "present")
            missing, live = read_namespaces(api, objects, p["namespace"])
            if p["crds"] is not None:
                result["missing_crds"] = missing_crds(api, p["crds"])
        except RuntimeError as exc:
            module.fail_json(msg=f"Could not read the objects: {exc}")
        if p["objects"] is not None:
            result.update(foreign=[{"object": describe(obj), "reason": why} for obj, why in seen["foreign"]],
                          missing_namespaces=missing, served=seen["served"], take_over=seen["take_over"])
        if p["namespace"]:
            result["live_namespace"] = live[p["namespace"]]
        if seen["foreign"] and p["fail_on_foreign"]:
            module.fail_json(msg=refusal(seen["foreign"], p["owner"], p["state"]), **result)
        module.exit_json(changed=False, **result)
    try:
        results = list_kinds(api, p["namespace"], p["kinds"])
    except RuntimeError as exc:
        module.fail_json(msg=f"Could not list the namespace's objects: {exc}")
    module.exit_json(changed=False, listed=results)


if __name__ == "__main__":
    main()
