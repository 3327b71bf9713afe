"""module_utils/_device_plugin.py: the device_plugin role's ConfigMap and DaemonSet as data (the frozen comparison with
the templates they replace is tests/unit/plugins/filter/test_device_plugin_objects.py)."""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _device_plugin as m

ROOT = Path(__file__).resolve().parents[4]
FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "role_objects" / "before_issue_35.json").read_text())
SETTINGS = FROZEN["device_plugin"][0]["settings"]


class Recording(Mapping):
    """The settings, counting each read (Ansible templates a setting each time it is read)."""

    def __init__(self, data):
        self.data, self.reads = data, {}

    def __getitem__(self, key):
        self.reads[key] = self.reads.get(key, 0) + 1
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def shared(value, seen=None):
    """Dicts and lists that appear twice in value (yaml would write them as anchors and aliases)."""
    seen = set() if seen is None else seen
    out = []
    if isinstance(value, (dict, list)):
        if id(value) in seen:
            return [value]
        seen.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            out += shared(item, seen)
    return out


def test_the_configmap_is_the_daemonsets_and_its_checksum_follows_the_configuration():
    config_map, daemonset = m.objects(SETTINGS)
    pod = daemonset["spec"]["template"]["spec"]
    assert {"name": "config", "configMap": {"name": config_map["metadata"]["name"]}} in pod["volumes"]
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == SETTINGS["config"]
    checksum = daemonset["spec"]["template"]["metadata"]["annotations"]["k8sgpu.nvidia/config-sha256"]
    changed = copy.deepcopy(SETTINGS)
    changed["config"]["flags"]["migStrategy"] = "single"
    assert m.objects(changed)[1]["spec"]["template"]["metadata"]["annotations"]["k8sgpu.nvidia/config-sha256"] != checksum
    # the pod spec of the plugin: no capabilities, the kubelet's socket directory, every GPU as /dev/null
    container = pod["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert {"name": "nvidia-all-gpus", "hostPath": {"path": "/dev/null", "type": "CharDevice"}} in pod["volumes"]


def test_each_setting_read_once_and_no_object_shared():
    settings = Recording(SETTINGS)
    objects = m.objects(settings)
    assert settings.reads == {key: 1 for key in m.SETTINGS}
    assert shared(objects) == []
    # the objects are new data: changing them leaves the settings alone
    objects[1]["spec"]["template"]["spec"]["tolerations"][0]["key"] = "x"
    objects[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1Gi"
    assert SETTINGS["tolerations"][0]["key"] == "nvidia.com/gpu" and SETTINGS["resources"]["limits"]["memory"] == "128Mi"


@pytest.mark.parametrize("hostile", ["x\n---\nkind: Secret", "x: y", "'\"}, {\"evil\": 1}: [{", "- a\n- b"])
def test_no_configuration_value_adds_structure_to_config_yaml(hostile):
    settings = copy.deepcopy(SETTINGS)
    settings["config"]["flags"]["migStrategy"] = hostile
    settings["config"]["flags"]["plugin"]["deviceListStrategy"] = [hostile]
    text = m.objects(settings)[0]["data"]["config.yaml"]
    assert yaml.safe_load(text) == settings["config"]
