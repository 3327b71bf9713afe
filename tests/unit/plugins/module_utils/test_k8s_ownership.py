"""Issue 34.8: the private role k8s_apply neither takes over (server-side apply, conflicts forced) nor deletes an object
another manager owns unless asked. The decision (module_utils/_k8s_ownership.foreign_owner) and the module that
reads the live objects (k8s_namespace_objects objects=...), with a fake API; 1.0.0 read nothing and forced."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_ownership import earlier_writes, foreign_owner, refusal
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
    assert "ConfigMap ns/x" in msg and "delete" in msg and "_k8s_apply_take_over=true" in msg and "Nothing was changed" in msg
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


def test_the_private_role_checks_before_it_writes_anything():
    """The entry point objects: one read (ownership, namespace, CRDs) and one check before the namespace is created,
    the earlier writers' fields handed over or the objects applied; the deletions (remove.yml) after them too."""
    tasks = yaml.safe_load((ROOT / "roles/k8s_apply/tasks/objects.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    names = [t["name"] for t in block]
    read = names.index("Refuse to take over or delete objects another manager owns")
    check = next(i for i, n in enumerate(names) if n.startswith("Fail when a CRD the objects need is missing"))
    writes = [next(i for i, n in enumerate(names) if n.startswith("Create the namespace")),
              names.index("Give the fields the collection's earlier writers set to its field manager"),
              names.index("Apply the objects"),
              names.index("Apply the objects one at a time"),
              next(i for i, t in enumerate(block) if t.get("ansible.builtin.include_tasks") == "remove.yml")]
    assert read < check < min(writes)
    task = block[read]["k8sgpu.nvidia.k8s_namespace_objects"]
    assert task["fail_on_foreign"] == "{{ not _k8s_apply_take_over | bool }}" and task["state"] == "{{ _k8s_apply_state }}"
    assert "_k8s_apply_crds" in task["crds"] and "_k8s_apply_namespace" in task["namespace"]
    # With _k8s_apply_take_over it still reads (refusing nothing): the namespace, the CRDs and what to delete come from it.
    assert "_k8s_apply_take_over" not in block[read]["when"]
    removal = yaml.safe_load((ROOT / "roles/k8s_apply/tasks/remove.yml").read_text())
    assert [t["name"] for t in removal][:2] == ["Delete the objects the role made, last first",
                                                "Delete the objects the role made, last first, one at a time (with --diff)"]
    assert all("__k8s_apply_deleted" in str(t) for t in removal[:2])


def test_take_over_managers_earlier_writes_are_their_updates_of_the_main_resource():
    fields = [entry("OpenAPI-Generator", "Update"), entry("OpenAPI-Generator", "Update", "status"),
              entry("OpenAPI-Generator"), entry("kubectl-edit", "Update"), entry("k8sgpu.nvidia")]
    assert earlier_writes(fields, ["OpenAPI-Generator"]) == [fields[0]]
    assert earlier_writes(fields, []) == [] and earlier_writes(None, ["OpenAPI-Generator"]) == []


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


class CrdFakeResources(NamespacedFakeResources):
    """Serves CustomResourceDefinition (cluster-scoped) besides Namespace and ConfigMap."""

    def get(self, api_version, kind):
        if kind == "CustomResourceDefinition":
            res = FakeResource()
            res.namespaced = False
            res.path = lambda name=None, namespace=None: f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            return res
        return super().get(api_version, kind)


def crd(name, established="True"):
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": established}]}}


def test_missing_crds_are_those_absent_or_not_established_in_order():
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
    api = FakeApi({path + "a.x.io": crd("a.x.io"), path + "b.x.io": crd("b.x.io", "False")})
    api.resources = CrdFakeResources()
    assert module.missing_crds(api, ["c.x.io", "a.x.io", "b.x.io"]) == ["c.x.io", "b.x.io"]
    assert module.crd_established(crd("a.x.io")) and not module.crd_established(None)
    assert not module.crd_established({"status": {}})


def test_one_read_tells_what_is_served_foreign_and_to_take_over():
    legacy = obj([entry("OpenAPI-Generator", "Update"), entry("kube-controller-manager", "Update", "status")],
                 name="legacy")
    legacy["metadata"]["resourceVersion"] = "42"
    helm = obj([entry("helm", "Update")], name="helms")
    api = FakeApi({"/api/v1/namespaces/ns/configmaps/legacy": legacy, "/api/v1/namespaces/ns/configmaps/helms": helm})
    wanted = [obj(name="legacy"), obj(name="helms"), obj(name="absent"), obj(kind="Widget", name="w")]
    seen = module.inspect_objects(api, wanted, "k8sgpu.nvidia", ["OpenAPI-Generator"])
    assert [(o["metadata"]["name"], "helm" in why) for o, why in seen["foreign"]] == [("helms", True)]
    # The Widget's kind is not served: nothing of it to delete. The others are, existing or not.
    assert [o["metadata"]["name"] for o in seen["served"]] == ["legacy", "helms", "absent"]
    assert seen["served"][0] == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "legacy", "namespace": "ns"}}
    assert seen["take_over"] == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "legacy", "namespace": "ns", "resourceVersion": "42", "managedFields": legacy["metadata"]["managedFields"]}}]
    # Looked for with state present only.
    assert module.inspect_objects(api, wanted, "k8sgpu.nvidia", ["OpenAPI-Generator"], False)["take_over"] == []


def test_the_role_namespace_is_read_with_the_objects_once():
    api = FakeApi({"/api/v1/namespaces/there": {"metadata": {"name": "there"}}})
    api.resources = NamespacedFakeResources()
    seen = []
    request = api.request
    api.request = lambda method, path, serializer=None: seen.append(path) or request(method, path, serializer)
    wanted = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "there"}}]
    missing, live = module.read_namespaces(api, wanted, "there")
    assert missing == [] and live == {"there": {"metadata": {"name": "there"}}}
    assert seen == ["/api/v1/namespaces/there"]
    missing, live = module.read_namespaces(api, [], "gone")
    assert missing == [] and live == {"gone": None}
