"""Planning for gke_node_pool (plugins/module_utils/_gke_node_pool.py): pure functions on the API's dicts."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gke_node_pool as gke

EFFECTS = ["EFFECT_UNSPECIFIED", "NO_SCHEDULE", "PREFER_NO_SCHEDULE", "NO_EXECUTE"]


def test_taints_kubernetes_effects_mapped_gpu_taint_dropped_sorted():
    out = gke.normalize_taints([{"key": "b", "value": "", "effect": "NoExecute"},
                                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                {"key": "a", "value": "x", "effect": "PREFER_NO_SCHEDULE"}], EFFECTS)
    assert out == [{"key": "a", "value": "x", "effect": "PREFER_NO_SCHEDULE"}, {"key": "b", "effect": "NO_EXECUTE"}]


@pytest.mark.parametrize("taints, words", [
    ([{"key": "a", "effect": "Sometimes"}], ["NodeTaint.Effect", "NoSchedule"]),
    ([{"key": "a", "effect": "EFFECT_UNSPECIFIED"}], ["NodeTaint.Effect"]),
    ([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "y", "effect": "NO_SCHEDULE"}], ["twice"]),
    ([{"key": "", "effect": "NoSchedule"}], ["no key"]),
])
def test_taints_refused(taints, words):
    with pytest.raises(gke.PlanError) as e:
        gke.normalize_taints(taints, EFFECTS)
    assert all(w in str(e.value) for w in words)


def test_live_taints_ignore_gke_gpu_taint():
    cfg = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
                      {"key": "x", "effect": "NO_EXECUTE"}]}
    assert gke.live_taints(cfg) == [{"key": "x", "effect": "NO_EXECUTE"}]


@pytest.mark.parametrize("auto, words", [
    ({"min_node_count": 0, "max_node_count": 2, "total_max_node_count": 4}, ["exclude each other"]),
    ({"min_node_count": 3, "max_node_count": 2}, ["greater than"]),
    ({"min_node_count": 0}, ["max_node_count or total_max_node_count"]),
])
def test_autoscaling_refused(auto, words):
    with pytest.raises(gke.PlanError) as e:
        gke.autoscaling_config(auto)
    assert all(w in str(e.value) for w in words)


def test_autoscaling_enabled_by_default_and_disabled_alone():
    expected = {"enabled": True, "max_node_count": 2}
    assert gke.autoscaling_config({"max_node_count": 2, "location_policy": None}) == expected
    assert gke.autoscaling_config({"enabled": False, "max_node_count": 2}) == {"enabled": False}


def test_enum_check_names_enum_and_values():
    with pytest.raises(gke.PlanError) as e:
        gke.check_enum("x", "NEWEST", ["GPU_DRIVER_VERSION_UNSPECIFIED", "DEFAULT", "LATEST"], "GPUDriverVersion")
    assert "GPUDriverVersion" in str(e.value) and "DEFAULT, LATEST" in str(e.value)
    gke.check_enum("x", None, ["A"], "E")


def test_immutable_only_given_accelerator_subfields():
    live = {"config": {"accelerators": [{"accelerator_type": "nvidia-tesla-t4", "accelerator_count": "1",
                                         "gpu_driver_installation_config": {"gpu_driver_version": "DEFAULT"}}],
                       "spot": True}}
    same = {"config": {"accelerators": [{"accelerator_type": "nvidia-tesla-t4", "accelerator_count": "1"}],
                       "spot": True}, "_set": {"accelerator", "spot"}}
    assert gke.immutable_changes(live, same) == []
    other = {"config": {"accelerators": [{"accelerator_type": "nvidia-tesla-t4", "accelerator_count": "1",
                                          "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"}}]},
             "_set": {"accelerator", "spot"}}
    # The driver installation alone changes in place (UpdateNodePoolRequest.accelerators), spot does not.
    fields = [f for f, _old, _new in gke.immutable_changes(live, other)]
    assert fields == ["config.spot"]
    msg = gke.immutable_message("pool p", gke.immutable_changes(live, other))
    assert "live True, asked False" in msg and "recreate: true" in msg
    assert gke.accelerator_update(live, other) == [{
        "accelerator_type": "nvidia-tesla-t4", "accelerator_count": 1,
        "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"}}]
    assert gke.accelerator_update(live, same) is None
    l4 = {"config": {"accelerators": [{"accelerator_type": "nvidia-l4", "accelerator_count": "1",
                                       "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"}}]},
          "_set": {"accelerator"}}
    assert [f for f, _o, _n in gke.immutable_changes(live, l4)] == ["config.accelerators"]


def test_sharing_strategy_needs_clients():
    with pytest.raises(gke.PlanError, match="needs accelerator.max_shared_clients_per_gpu"):
        gke.accelerator_config({"type": "nvidia-l4", "gpu_sharing_strategy": "MPS"})
    with pytest.raises(gke.PlanError, match="1 or more"):
        gke.accelerator_config({"type": "nvidia-l4", "gpu_sharing_strategy": "MPS", "max_shared_clients_per_gpu": 0})
    assert gke.accelerator_config({"type": "nvidia-l4", "gpu_sharing_strategy": "MPS",
                                   "max_shared_clients_per_gpu": 2})[0]["gpu_sharing_config"] == {
        "gpu_sharing_strategy": "MPS", "max_shared_clients_per_gpu": 2}


def test_zones_lacking_names_zone_and_offer():
    lacking = gke.zones_lacking("nvidia-l4", {"z-a": ["nvidia-l4"], "z-b": ["nvidia-tesla-t4"]})
    assert lacking == {"z-b": ["nvidia-tesla-t4"]}
    msg = gke.accelerator_type_message("pool p", "nvidia-l4", lacking)
    assert "zone(s) z-b" in msg and "z-b offers nvidia-tesla-t4" in msg


def test_update_requests_one_group_each_with_version_and_image():
    live = {"version": "1.33.5", "locations": ["z-a", "z-b"],
            "config": {"image_type": "COS_CONTAINERD", "labels": {"a": "1"}, "machine_type": "n1-standard-4",
                       "taints": [gke.GPU_TAINT]}}
    want = {"locations": ["z-b", "z-a"], "config": {"labels": {"a": "2"}, "taints": [], "machine_type": "n1-standard-8",
                                                    "image_type": "UBUNTU_CONTAINERD"},
            "_set": {"labels", "taints", "node_locations", "machine_type", "image_type"}}
    reqs = gke.update_requests(live, want)
    assert reqs == [{"node_version": "1.33.5", "image_type": "UBUNTU_CONTAINERD", "labels": {"labels": {"a": "2"}}},
                    {"node_version": "1.33.5", "image_type": "UBUNTU_CONTAINERD", "machine_type": "n1-standard-8"}]
    # the image type alone
    want = {"config": {"image_type": "UBUNTU_CONTAINERD"}, "_set": {"image_type"}}
    assert gke.update_requests(live, want) == [{"node_version": "1.33.5", "image_type": "UBUNTU_CONTAINERD"}]
    assert gke.update_requests(live, {"config": {}, "_set": set()}) == []


def test_autoscaling_request_ignores_what_gke_fills():
    live = {"autoscaling": {"enabled": True, "max_node_count": 3, "location_policy": "BALANCED"}}
    want = {"autoscaling": {"enabled": True, "max_node_count": 3}, "_set": {"autoscaling"}}
    assert gke.autoscaling_request(live, want, ["max_node_count"]) is None
    any_zone = {**want, "autoscaling": {"enabled": True, "max_node_count": 3, "location_policy": "ANY"}}
    req = gke.autoscaling_request(live, any_zone, ["max_node_count", "location_policy"])
    assert req["location_policy"] == "ANY"
    total = {"autoscaling": {"enabled": True, "total_max_node_count": 3}, "_set": {"autoscaling"}}
    req = gke.autoscaling_request(live, total, ["total_max_node_count"])
    assert req == {"enabled": True, "total_max_node_count": 3}
    off = {"autoscaling": {"enabled": False}, "_set": {"autoscaling"}}
    assert gke.autoscaling_request(live, off, ["enabled"]) == {"enabled": False}
    assert gke.autoscaling_request({}, off, ["enabled"]) is None


def test_initial_node_count():
    assert gke.initial_node_count(2, None) == 2
    assert gke.initial_node_count(None, {"enabled": True, "max_node_count": 3}) == 0
    with pytest.raises(gke.PlanError, match="node_count"):
        gke.initial_node_count(None, None)


def test_selector_and_tolerations():
    assert gke.node_selector("p", {"type": "nvidia-l4"}) == {"cloud.google.com/gke-nodepool": "p",
                                                             "cloud.google.com/gke-accelerator": "nvidia-l4"}
    tol = gke.tolerations([{"key": "d", "effect": "NO_EXECUTE"}], gpu=True)
    assert tol == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
                   {"key": "d", "operator": "Equal", "value": "", "effect": "NoExecute"}]
