#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_namespace_objects
short_description: List the objects of several kinds in one namespace, in one task
version_added: 1.0.0
description:
  - Lists, in one namespace, the objects of each kind in O(kinds), and returns them per kind (C(listed)) in the shape
    a loop of M(kubernetes.core.k8s_info) registers (C(item), C(resources)), with only the fields that say what an
    object is and whether it goes away by itself (C(apiVersion), C(kind), C(metadata.name),
    C(metadata.ownerReferences), C(metadata.deletionTimestamp)).
  - A kind the API server does not serve (a CRD that is not installed) gives no objects and C(api_found=false), also
    when the client's cached discovery documents still list it but the LIST answers 404 (its CRD was just removed).
  - Why not M(kubernetes.core.k8s_info) in a loop - it lists one kind per call, and each call pays for starting Python
    and importing the Kubernetes client (about a second); the private role C(_k8s) looks for twenty kinds before it
    removes a namespace it created, which took 12-15 s per removal with a loop and takes one call with this module.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - k8sgpu.nvidia.k8s_auth
options:
  namespace:
    description: The namespace to list.
    type: str
    required: true
  kinds:
    description: The kinds to list, each by API version and kind, as the Kubernetes API names them.
    type: list
    elements: dict
    required: true
    suboptions:
      api_version:
        description: The kind's API group and version, for example V(v1) or V(apps/v1).
        type: str
        required: true
      kind:
        description: The kind, for example V(ConfigMap).
        type: str
        required: true
requirements:
  - kubernetes >= 24.2.0 (Python)
  - kubernetes.core (its authentication and API client)
notes:
  - Needs C(list) on each kind in the namespace (RBAC); a kind it may not list fails the task, naming the kind.
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
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
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


def main():
    module = k8s_module(
        argument_spec=dict(
            namespace=dict(type="str", required=True),
            kinds=dict(type="list", elements="dict", required=True, options=dict(
                api_version=dict(type="str", required=True),
                kind=dict(type="str", required=True),
            )),
        ),
        supports_check_mode=True,
    )
    api = dynamic_client(module)
    try:
        results = list_kinds(api, module.params["namespace"], module.params["kinds"])
    except RuntimeError as exc:
        module.fail_json(msg=f"Could not list the namespace's objects: {exc}")
    module.exit_json(changed=False, listed=results)


if __name__ == "__main__":
    main()
