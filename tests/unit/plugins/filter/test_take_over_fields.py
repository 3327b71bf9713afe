from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._take_over_fields import take_over_fields

# managedFields of a DaemonSet created by kubernetes.core.k8s (state: present, no field manager, so the API server
# names the manager after the Python client's User-Agent), with the controller's status entry.
LEGACY = [
    {"manager": "OpenAPI-Generator", "operation": "Update", "apiVersion": "apps/v1", "time": "2026-11-23T10:00:00Z",
     "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                                            "f:spec": {"f:template": {"f:spec": {"f:runtimeClassName": {}}}}}},
    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1", "subresource": "status",
     "time": "2026-11-23T10:00:01Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:numberReady": {}}}},
]


def test_legacy_update_entry_becomes_ours_as_apply():
    out = take_over_fields(LEGACY, ["OpenAPI-Generator"], "k8sgpu.nvidia")
    assert out == [
        {"manager": "k8sgpu.nvidia", "operation": "Apply", "apiVersion": "apps/v1", "time": "2026-11-23T10:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": LEGACY[0]["fieldsV1"]},
        LEGACY[1],  # status belongs to the controller, untouched
    ]


def test_merged_into_our_existing_apply_entry():
    ours = {"manager": "k8sgpu.nvidia", "operation": "Apply", "apiVersion": "apps/v1", "time": "2026-11-23T11:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:version": {}}}, "f:spec": {"f:selector": {}}}}
    before = copy.deepcopy(LEGACY + [ours])
    out = take_over_fields(LEGACY + [ours], ["OpenAPI-Generator"], "k8sgpu.nvidia")
    assert before == LEGACY + [ours]  # the input is not modified
    assert [e["manager"] for e in out] == ["kube-controller-manager", "k8sgpu.nvidia"]
    assert out[1]["time"] == "2026-11-23T11:00:00Z"
    assert out[1]["fieldsV1"] == {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:version": {}}},
                                  "f:spec": {"f:selector": {}, "f:template": {"f:spec": {"f:runtimeClassName": {}}}}}


def test_nothing_to_take_over_returns_the_same_list():
    entries = [LEGACY[1], {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1",
                           "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {}}}}]
    assert take_over_fields(entries, ["OpenAPI-Generator"], "k8sgpu.nvidia") == entries
    assert take_over_fields(None, ["OpenAPI-Generator"], "k8sgpu.nvidia") == []


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="metadata.managedFields"):
        take_over_fields({"manager": "x"}, ["OpenAPI-Generator"], "k8sgpu.nvidia")
