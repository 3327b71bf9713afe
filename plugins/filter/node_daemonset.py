# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_daemonset filter: the DaemonSet the collection's node agents (device plugin, DCGM exporter) share."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

MANAGED_BY = {"app.kubernetes.io/managed-by": "k8sgpu.nvidia"}


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise AnsibleFilterError(f"node_daemonset: {what} must be a non-empty string, got {value!r}")
    return value


def node_daemonset(pod: Any, name: Any, namespace: Any, labels: Any, version: Any, node_label: Any,
                   tolerations: Any, priority_class: Any, runtime_class: Any = "", pull_secrets: Any = None,
                   annotations: Any = None) -> dict:
    """A DaemonSet that runs `pod` (its containers, volumes and any other pod spec fields) on every Node labelled
    `node_label`=true: labelled with `labels` (also its selector and the pods' labels), the version and
    app.kubernetes.io/managed-by=k8sgpu.nvidia; rolling updates; the pods with `annotations`, the priority class,
    the runtime class when given, no service account token, the tolerations, the pull secrets when given and the
    RuntimeDefault seccomp profile. The pod's own fields come last and win."""
    if not isinstance(pod, Mapping) or not pod.get("containers"):
        raise AnsibleFilterError(f"node_daemonset expects the pod's spec (a dict with containers), got {pod!r}")
    if not isinstance(labels, Mapping) or not labels:
        raise AnsibleFilterError(f"node_daemonset: labels must be a non-empty dict (the selector), got {labels!r}")
    if not isinstance(tolerations, Sequence) or isinstance(tolerations, str):
        raise AnsibleFilterError(f"node_daemonset: tolerations must be a list, got {tolerations!r}")
    secrets = pull_secrets or []
    if isinstance(secrets, str) or not isinstance(secrets, Sequence):
        raise AnsibleFilterError(f"node_daemonset: pull_secrets must be a list of Secret names, got {pull_secrets!r}")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise AnsibleFilterError(f"node_daemonset: annotations must be a dict, got {annotations!r}")
    selector = dict(labels)
    spec: dict = {"priorityClassName": _text(priority_class, "priority_class")}
    if runtime_class:
        spec["runtimeClassName"] = _text(runtime_class, "runtime_class")
    spec.update({
        # Node agents talk to the kubelet and the devices, not to the API server.
        "automountServiceAccountToken": False,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": _text(node_label, "node_label"), "operator": "In", "values": ["true"]}]}]}}},
        "tolerations": list(tolerations),
    })
    if secrets:
        spec["imagePullSecrets"] = [{"name": _text(secret, "a pull secret")} for secret in secrets]
    spec["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    spec.update(pod)
    template_meta: dict = {"labels": dict(selector)}
    if annotations:
        template_meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": _text(name, "name"),
            "namespace": _text(namespace, "namespace"),
            "labels": {**selector, "app.kubernetes.io/version": str(version), **MANAGED_BY},
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": template_meta, "spec": spec},
        },
    }


class FilterModule:
    def filters(self) -> dict:
        return {"node_daemonset": node_daemonset}
