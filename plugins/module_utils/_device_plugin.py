# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the device_plugin role's objects (filter device_plugin_objects).

A pure function of the role's settings (the dict _device_plugin_settings of its vars): the ConfigMap with the
plugin's configuration file and the DaemonSet that runs the plugin (the node agents' DaemonSet of _node_daemonset.py),
as data, in the order the role applies them.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_daemonset as nd

OWNER = "device_plugin_objects"
CONFIG_DIR = "/etc/nvidia-device-plugin"
# The settings the objects are built from (the role's variables without the prefix, and what its vars derive from
# them: the image, the labels, the plugin configuration and the tolerations, which the Helm method shares).
SETTINGS = ("name", "namespace", "version", "image", "image_pull_policy", "image_pull_secrets", "labels", "config",
            "node_affinity_label", "tolerations", "priority_class", "runtime_class", "resources")


def objects(settings: Any) -> list[dict]:
    """[ConfigMap, DaemonSet]: the plugin's configuration file (config.yaml, the configuration as
    to_nice_yaml(indent=2) writes it) and the plugin's pod in the node agents' DaemonSet, whose pods roll when the
    configuration changes (the annotation k8sgpu.nvidia/config-sha256, of the configuration as to_json writes it)."""
    s = nd.settings_of(settings, SETTINGS, OWNER)
    name, namespace, labels = s["name"], s["namespace"], s["labels"]
    config_map_name = f"{name}-config"
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map_name, "namespace": namespace, "labels": {**labels, **nd.MANAGED_BY}},
        "data": {"config.yaml": nd.to_nice_yaml(s["config"], indent=2)},
    }
    pod = {
        "containers": [{
            "name": "nvidia-device-plugin-ctr",
            "image": s["image"],
            "imagePullPolicy": s["image_pull_policy"],
            "env": [{"name": "CONFIG_FILE", "value": f"{CONFIG_DIR}/config.yaml"}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "resources": s["resources"],
            "volumeMounts": [
                {"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"},
                {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                # Every GPU for NVML, asked for as the runtime takes it from an unprivileged container
                # (accept-nvidia-visible-devices-as-volume-mounts); the image's NVIDIA_VISIBLE_DEVICES=all is ignored
                # under isolation.
                {"name": "nvidia-all-gpus", "mountPath": "/var/run/nvidia-container-devices/all", "readOnly": True},
            ],
        }],
        "volumes": [
            {"name": "kubelet-device-plugins-dir",
             "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}},
            {"name": "config", "configMap": {"name": config_map_name}},
            {"name": "nvidia-all-gpus", "hostPath": {"path": "/dev/null", "type": "CharDevice"}},
        ],
    }
    # The DaemonSet around the pod (labels and selector, rolling updates, node affinity, tolerations, priority and
    # runtime class, pull secrets, RuntimeDefault seccomp, no service account token: the plugin talks to the kubelet
    # over its socket, not to the API server) is the node agents' (shared with dcgm_exporter). The pods roll when the
    # plugin configuration changes (its checksum).
    daemonset = nd.node_daemonset(
        pod, name, namespace, dict(labels), s["version"], s["node_affinity_label"], s["tolerations"],
        s["priority_class"], s["runtime_class"], s["image_pull_secrets"],
        {"k8sgpu.nvidia/config-sha256": nd.sha256(nd.to_json(s["config"]))})
    return [config_map, daemonset]
