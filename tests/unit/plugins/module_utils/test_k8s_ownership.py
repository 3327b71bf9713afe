"""Issue 34.8: the private role _k8s neither takes over (server-side apply, conflicts forced) nor deletes an object
another manager owns unless asked. The decision (module_utils/_k8s_ownership.foreign_owner) and the module that
reads the live objects (k8s_namespace_objects objects=...), with a fake API; 1.0.0 read nothing and forced."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_ownership import foreign_owner, refusal
from ansible_collections.k8sgpu.nvidia.plugins.modules import k8s_namespace_objects as module

ROOT = Path(__file__).resolve().parents[4]


def entry(manager, operation="Apply", subresource=None):
    e = {"manager": manager, "operation": operation, "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}
    return {**e, "subresource": subresource} if subresource else e


def obj(managed=(), labels=None, annotations=None, kind="ConfigMap", name="cm"):
    meta = {"name": name, "namespace": "ns", "managedFields": list(managed)}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


@pytest.mark.parametrize("live", [
    None,  # not there: created
    obj([entry("k8sgpu.nvidia")]),
    obj([entry("k8sgpu.nvidia"), entry("kube-controller-manager", "Update")]),  # Deployment revision annotation
    obj([entry("k8sgpu.nvidia"), entry("kube-controller-manager", "Update", "status")]),
    obj([entry("k8sgpu.nvidia")], labels={"app.kubernetes.io/managed-by": "k8sgpu.nvidia"}),
    obj([]),  # no managedFields at all: nothing says whose
    obj([entry("helm"), entry("k8sgpu.nvidia")]),  # taken over when asked: ours from then on
])
def test_the_collections_objects_are_not_foreign(live):
    assert foreign_owner(live) is None


@pytest.mark.parametrize("live,words", [
    (obj([entry("helm", "Update")]), ["created by another field manager", "helm"]),
    (obj([entry("helm")]), ["helm"]),
    (obj([entry("kubectl-client-side-apply", "Update")]), ["kubectl-client-side-apply"]),
    (obj([entry("k8sgpu.nvidia")], labels={"app.kubernetes.io/managed-by": "Helm"}), ["managed-by", "Helm"]),
    (obj([entry("k8sgpu.nvidia")],
         annotations={"meta.helm.sh/release-name": "gpu", "meta.helm.sh/release-namespace": "ops"}),
     ["Helm release ops/gpu"]),
])
def test_another_managers_object_is_foreign(live, words):
    why = foreign_owner(live)
    assert why
    for word in words:
        assert word in why


def test_take_over_managers_count_as_ours():
    legacy = obj([entry("OpenAPI-Generator", "Update")])
    assert "OpenAPI-Generator" in foreign_owner(legacy)
    assert foreign_owner(legacy, take_over_managers=["OpenAPI-Generator"]) is None


def test_refusal_names_the_object_the_action_and_the_option():
    msg = refusal([(obj(name="x"), "it was created by another field manager (helm)")], "dcgm_exporter", "absent")
    assert "ConfigMap ns/x" in msg and "delete" in msg and "_k8s_take_over=true" in msg and "Nothing was changed" in msg
    assert "take over" in refusal([(obj(), "why")], "dcgm_exporter", "present")


class FakeResource:
    namespaced = True

    def path(self, name=None, namespace=None):
        return f"/api/v1/namespaces/{namespace}/configmaps/{name}"


class FakeResources:
    def get(self, api_version, kind):
        if kind != "ConfigMap":
            raise ResourceNotFoundError(kind)
        return FakeResource()


class FakeApi:
    def __init__(self, live):
        self.resources, self.live = FakeResources(), live

    def request(self, method, path, serializer=None):
        assert method == "get"
        if path not in self.live:
            exc = RuntimeError("HTTP 404")
            exc.status = 404
            raise exc
        return self.live[path]


def test_module_reads_each_object_and_names_the_foreign_ones():
    helm = obj([entry("helm", "Update")], name="helms")
    ours = obj([entry("k8sgpu.nvidia")], name="ours")
    api = FakeApi({"/api/v1/namespaces/ns/configmaps/helms": helm, "/api/v1/namespaces/ns/configmaps/ours": ours})
    wanted = [obj(name="ours"), obj(name="helms"), obj(name="absent"), obj(kind="Widget", name="w")]
    found = module.foreign_objects(api, wanted, "k8sgpu.nvidia", [])
    assert [(o["metadata"]["name"], "helm" in why) for o, why in found] == [("helms", True)]


def test_the_private_role_checks_before_it_applies_or_deletes():
    tasks = yaml.safe_load((ROOT / "roles/_k8s/tasks/apply.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    names = [t["name"] for t in block]
    check = names.index("Refuse to take over or delete objects another manager owns")
    assert check < names.index("Apply the objects") and check < names.index("Delete the objects the role made, last first")
    task = block[check]["k8sgpu.nvidia.k8s_namespace_objects"]
    assert task["fail_on_foreign"] == "{{ not _k8s_take_over | bool }}" and task["state"] == "{{ _k8s_state }}"
    assert block[check]["when"][0].startswith("not _k8s_take_over | bool or ")
    assert check < names.index("Delete the objects the role made, last first, one at a time (with --diff)")


class NamespacedFakeResources(FakeResources):
    """Serves Namespace (cluster-scoped) besides ConfigMap."""

    def get(self, api_version, kind):
        if kind == "Namespace":
            res = FakeResource()
            res.namespaced = False
            res.path = lambda name=None, namespace=None: f"/api/v1/namespaces/{name}"
            return res
        return super().get(api_version, kind)


def test_missing_namespaces_are_read_once_each_in_the_objects_order():
    api = FakeApi({"/api/v1/namespaces/there": {"metadata": {"name": "there"}}})
    api.resources = NamespacedFakeResources()
    seen = []
    request = api.request
    api.request = lambda method, path, serializer=None: seen.append(path) or request(method, path, serializer)
    wanted = [obj(name="a"), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "there"}},
              {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "c"}},
              obj(name="d"), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "e", "namespace": "new"}}]
    assert module.missing_namespaces(api, wanted) == ["ns", "new"]
    assert seen == ["/api/v1/namespaces/ns", "/api/v1/namespaces/there", "/api/v1/namespaces/new"]
