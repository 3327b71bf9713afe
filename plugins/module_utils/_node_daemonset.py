# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the node agents' roles (device_plugin, dcgm_exporter) share to build their objects
as data (filters node_daemonset, device_plugin_objects, dcgm_exporter_objects).

Pure functions over plain data: the DaemonSet around a node agent's pod, the settings as plain Python values (what
the roles' variables give, with Ansible's conversions: to_int, to_bool), and text as Ansible's filters write it
(to_nice_yaml, to_json, hash('sha256')), so that an object built here is the one the roles' templates rendered.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.module_utils.common.yaml import yaml_dump

MANAGED_BY = {"app.kubernetes.io/managed-by": "k8sgpu.nvidia"}


class NodeDaemonSetError(ValueError):
    """Bad input, with a message naming the argument or the setting."""


def plain(value: Any) -> Any:
    """The value as plain Python data (dict, list, str, int, float, bool, None): Ansible's own types (tagged or unsafe
    strings, lazy containers) become their base types, so that json and yaml write them as they write the base
    types."""
    if isinstance(value, Mapping):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [plain(item) for item in value]
    return value


def to_nice_yaml(data: Any, indent: int = 4) -> str:
    """What ansible.builtin.to_nice_yaml writes for plain data (Ansible's safe dumper, libyaml's when present)."""
    return yaml_dump(plain(data), indent=indent, allow_unicode=True, default_flow_style=False)


def to_json(data: Any) -> str:
    """What ansible.builtin.to_json writes (json.dumps' defaults: ASCII, keys in their order)."""
    return json.dumps(plain(data))


def sha256(text: str) -> str:
    """What ansible.builtin.hash('sha256') gives for a text (of its UTF-8 bytes)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def to_int(value: Any, what: str) -> int:
    """A number as Jinja's int filter reads it (an int, or a string of a whole or decimal number), else an error
    naming the setting (where the filter would have given 0)."""
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            raise NodeDaemonSetError(f"{what} must be a whole number, got {value!r}") from None


def to_bool(value: Any) -> bool:
    """A boolean as Ansible's bool filter reads it: true, yes, on, 1 (any case) are true, anything else false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.lower() in ("yes", "on", "1", "true")
    return value == 1


def setting(settings: Any, key: str, owner: str) -> Any:
    """settings[key], or an error that names what is missing."""
    if not isinstance(settings, Mapping):
        raise NodeDaemonSetError(f"{owner} expects the role's settings (a dict), got {type(settings).__name__}")
    try:
        return settings[key]
    except KeyError:
        raise NodeDaemonSetError(f"{owner}: the settings lack {key!r}") from None


def settings_of(settings: Any, keys: Sequence[str], owner: str) -> dict:
    """The ``keys`` of a role's settings as plain data (setting, plain), each one there or an error naming it; their
    labels, where they have them, a non-empty dict (the selector of the role's objects)."""
    s = {key: plain(setting(settings, key, owner)) for key in keys}
    if "labels" in s and (not isinstance(s["labels"], dict) or not s["labels"]):
        raise NodeDaemonSetError(f"{owner}: labels must be a non-empty dict, got {s['labels']!r}")
    return s


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise NodeDaemonSetError(f"node_daemonset: {what} must be a non-empty string, got {value!r}")
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
        raise NodeDaemonSetError(f"node_daemonset expects the pod's spec (a dict with containers), got {pod!r}")
    if not isinstance(labels, Mapping) or not labels:
        raise NodeDaemonSetError(f"node_daemonset: labels must be a non-empty dict (the selector), got {labels!r}")
    if not isinstance(tolerations, Sequence) or isinstance(tolerations, str):
        raise NodeDaemonSetError(f"node_daemonset: tolerations must be a list, got {tolerations!r}")
    secrets = pull_secrets or []
    if isinstance(secrets, str) or not isinstance(secrets, Sequence):
        raise NodeDaemonSetError(f"node_daemonset: pull_secrets must be a list of Secret names, got {pull_secrets!r}")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise NodeDaemonSetError(f"node_daemonset: annotations must be a dict, got {annotations!r}")
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
