"""The filter device_plugin_objects gives the objects the device_plugin role's templates gave before it (issue 35
item 6): tests/unit/fixtures/role_objects/before_issue_35.json holds, per case, the variables, the settings the role's
vars build from them, and the ConfigMap and DaemonSet the removed templates configmap.yml.j2 and daemonset.yml.j2
gave (rendered to text and parsed back). Equal as data, and the ConfigMap's config.yaml byte for byte."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._device_plugin_objects import device_plugin_objects

ROOT = Path(__file__).resolve().parents[4]
FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "role_objects" / "before_issue_35.json").read_text())


def test_the_frozen_cases_cover_the_settings():
    variables = {name for case in FROZEN["device_plugin"] for name in case["variables"]}
    spec = (ROOT / "roles" / "device_plugin" / "meta" / "argument_specs.yml").read_text()
    # every variable that reaches an object is set to something else than its default in some case
    reaching = {"device_plugin_" + key for key in (
        "name", "namespace", "version", "image_registry", "image_repository", "image_digest", "image_pull_policy",
        "image_pull_secrets", "mig_strategy", "fail_on_init_error", "device_list_strategy", "device_id_strategy",
        "time_slicing_replicas", "time_slicing_rename_by_default", "time_slicing_fail_requests_greater_than_one",
        "node_affinity_label", "tolerate_control_plane", "extra_tolerations", "priority_class", "runtime_class",
        "resources")}
    assert all(name + ":" in spec for name in reaching)
    assert reaching <= variables


@pytest.mark.parametrize("case", FROZEN["device_plugin"], ids=lambda case: case["case"])
def test_the_objects_are_the_templates(case):
    got = device_plugin_objects(case["settings"])
    assert got == case["objects"]
    assert [o["kind"] for o in got] == ["ConfigMap", "DaemonSet"]  # the order the role applies them in
    assert got[0]["data"]["config.yaml"] == case["objects"][0]["data"]["config.yaml"]


def test_a_missing_setting_is_named():
    settings = dict(FROZEN["device_plugin"][0]["settings"])
    del settings["resources"]
    with pytest.raises(AnsibleFilterError, match="device_plugin_objects: the settings lack 'resources'"):
        device_plugin_objects(settings)


@pytest.mark.parametrize("key, value, message", [
    ("labels", {}, "labels must be a non-empty dict"),
    ("tolerations", "nvidia.com/gpu", "tolerations must be a list"),
    ("image_pull_secrets", "regcred", "pull_secrets must be a list"),
    ("priority_class", "", "priority_class must be a non-empty string"),
])
def test_bad_settings_are_named(key, value, message):
    settings = {**FROZEN["device_plugin"][0]["settings"], key: value}
    with pytest.raises(AnsibleFilterError, match=message):
        device_plugin_objects(settings)


def test_not_a_dict():
    with pytest.raises(AnsibleFilterError, match="expects the role's settings"):
        device_plugin_objects(["name"])
