"""k8s_namespace_objects: one result per kind, in the shape of a k8s_info loop; kinds the API does not serve give
api_found false; an API error names the kind and the namespace."""

from __future__ import annotations

import pytest
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from ansible_collections.k8sgpu.nvidia.plugins.filter._namespace_leftovers import namespace_leftovers
from ansible_collections.k8sgpu.nvidia.plugins.modules import k8s_namespace_objects as module


class FakeResource:
    def __init__(self, prefix, plural):
        self.prefix, self.plural = prefix, plural

    def path(self, namespace):
        return f"{self.prefix}/namespaces/{namespace}/{self.plural}"


class FakeResources:
    def __init__(self, served):
        self.served = served

    def get(self, api_version, kind):
        if (api_version, kind) not in self.served:
            raise ResourceNotFoundError(f"No matches found for {{'api_version': '{api_version}', 'kind': '{kind}'}}")
        return self.served[(api_version, kind)]


class FakeApi:
    def __init__(self, served, objects, fail=None, status=403):
        self.resources = FakeResources(served)
        self.objects, self.fail, self.status, self.paths = objects, fail, status, []

    def request(self, method, path, serializer=None):
        assert method == "get" and serializer is module.raw_json
        self.paths.append(path)
        if path == self.fail:
            exc = RuntimeError(f"HTTP {self.status}")
            exc.status = self.status
            raise exc
        return {"items": self.objects.get(path, [])}


SERVED = {
    ("v1", "ConfigMap"): FakeResource("/api/v1", "configmaps"),
    ("apps/v1", "Deployment"): FakeResource("/apis/apps/v1", "deployments"),
}
KINDS = [
    {"api_version": "v1", "kind": "ConfigMap"},
    {"api_version": "monitoring.coreos.com/v1", "kind": "ServiceMonitor"},
    {"api_version": "apps/v1", "kind": "Deployment"},
]


def cm(name, **meta):
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u", "managedFields": [{}], **meta}, "data": {"k": "v"}}


def test_one_result_per_kind_in_order_slim_objects_and_unserved_kinds():
    api = FakeApi(SERVED, {
        "/api/v1/namespaces/ns/configmaps": [cm("kube-root-ca.crt"), cm("mine", ownerReferences=[{"kind": "X"}])],
        "/apis/apps/v1/namespaces/ns/deployments": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                    "metadata": {"name": "adapter", "deletionTimestamp": "now"}}],
    })
    listed = module.list_kinds(api, "ns", KINDS)
    assert [r["item"]["kind"] for r in listed] == ["ConfigMap", "ServiceMonitor", "Deployment"]
    assert [r["api_found"] for r in listed] == [True, False, True]
    assert listed[0]["resources"][1] == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "mine", "namespace": "ns", "ownerReferences": [{"kind": "X"}]},
    }
    assert listed[1]["resources"] == []
    assert listed[2]["resources"][0]["metadata"] == {"name": "adapter", "deletionTimestamp": "now"}
    assert api.paths == ["/api/v1/namespaces/ns/configmaps", "/apis/apps/v1/namespaces/ns/deployments"]


def test_the_leftovers_filter_reads_the_result_as_it_read_a_k8s_info_loop():
    api = FakeApi(SERVED, {"/api/v1/namespaces/ns/configmaps": [cm("kube-root-ca.crt"), cm("planted"),
                                                                cm("owned", ownerReferences=[{}])]})
    listed = module.list_kinds(api, "ns", KINDS)
    assert namespace_leftovers(listed, ["ConfigMap/kube-root-ca.crt"]) == ["ConfigMap/planted"]


def test_an_api_error_names_the_kind_and_the_namespace():
    api = FakeApi(SERVED, {}, fail="/apis/apps/v1/namespaces/ns/deployments")
    with pytest.raises(RuntimeError, match=r"listing Deployment \(apps/v1\) in namespace ns: HTTP 403"):
        module.list_kinds(api, "ns", KINDS)


def test_a_kind_discovery_still_lists_but_the_list_answers_404_is_not_served():
    """The client's discovery cache still has a CRD that was just removed: its LIST answers 404."""
    api = FakeApi(SERVED, {"/api/v1/namespaces/ns/configmaps": [cm("mine")]},
                  fail="/apis/apps/v1/namespaces/ns/deployments", status=404)
    listed = module.list_kinds(api, "ns", KINDS)
    assert [(r["item"]["kind"], r["api_found"], len(r["resources"])) for r in listed] == [
        ("ConfigMap", True, 1), ("ServiceMonitor", False, 0), ("Deployment", False, 0)]
