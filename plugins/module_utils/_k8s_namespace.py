# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the namespaces the roles create, through the private role k8s_apply (filters
pod_security_namespace, pod_security_conflict and namespace_leftovers).

- the Namespace object, labelled as the collection's, with the Pod Security labels its pods need;
- whether an existing namespace admits those pods;
- what a namespace still holds when a role removes what it made.
"""
from __future__ import annotations

import re


class NamespaceError(ValueError):
    """Bad input, with a message naming it and the fix."""


POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")  # strictest first
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "k8sgpu.nvidia"}


def pod_security_labels(level: str, version: str = "latest") -> dict:
    """enforce, audit and warn at `level`, each pinned to the policy `version` ("latest" or "v1.N")."""
    if level not in POD_SECURITY_LEVELS:
        raise NamespaceError(f"Pod Security level {level!r} is not one of {', '.join(POD_SECURITY_LEVELS)}")
    if not isinstance(version, str) or not re.match(r"^(latest|v1\.[0-9]+)$", version):
        raise NamespaceError(f"Pod Security version {version!r} is neither 'latest' nor 'v1.<minor>'")
    out = {}
    for mode in ("enforce", "audit", "warn"):
        out[f"{POD_SECURITY_PREFIX}{mode}"] = level
        out[f"{POD_SECURITY_PREFIX}{mode}-version"] = version
    return out


def pod_security_namespace(name: str, level: str, version: str = "latest") -> dict:
    """The Namespace a role creates: labelled as the collection's, with the Pod Security labels of `level`."""
    if not isinstance(name, str) or not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", name):
        raise NamespaceError(f"namespace {name!r} is not a DNS label")
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**MANAGED_BY, **pod_security_labels(level, version)}}}


def pod_security_conflict(namespace: dict | None, needed: str) -> str:
    """Why the pods needing `needed` would be refused in an existing namespace ('' when they are admitted).

    Only the enforce label refuses pods (audit and warn only record and warn); without it the cluster's default
    applies (privileged, unless the admission configuration says otherwise)."""
    if needed not in POD_SECURITY_LEVELS:
        raise NamespaceError(f"Pod Security level {needed!r} is not one of {', '.join(POD_SECURITY_LEVELS)}")
    if not namespace:
        return ""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    enforce = labels.get(f"{POD_SECURITY_PREFIX}enforce")
    if enforce not in POD_SECURITY_LEVELS:
        return ""
    if POD_SECURITY_LEVELS.index(enforce) < POD_SECURITY_LEVELS.index(needed):
        name = (namespace.get("metadata") or {}).get("name")
        return (f"namespace {name} enforces Pod Security level {enforce}, but these pods need {needed}: the API "
                f"server would refuse them. Label it (kubectl label --overwrite namespace {name} "
                f"{POD_SECURITY_PREFIX}enforce={needed}) or choose another namespace")
    return ""


def namespace_leftovers(results: list, defaults: list | None = None, removed: list | None = None) -> list[str]:
    """What a namespace still holds ("Kind/name", sorted) that is not Kubernetes' own (defaults, "Kind/name"), not
    being removed (removed: API objects), not owned by another object (garbage-collected with it) and not already
    being deleted. results: the loop results of kubernetes.core.k8s_info, one per kind (item.kind, resources)."""
    skip = set(defaults or [])
    skip.update(f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o in removed or [] if isinstance(o, dict))
    out = set()
    for result in results or []:
        kind = (result.get("item") or {}).get("kind")
        for obj in result.get("resources") or []:
            meta = obj.get("metadata") or {}
            if meta.get("ownerReferences") or meta.get("deletionTimestamp"):
                continue
            key = f"{obj.get('kind') or kind}/{meta.get('name')}"
            if key not in skip:
                out.add(key)
    return sorted(out)
