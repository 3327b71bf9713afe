"""k8s_cluster_nodes: the /version answer and every Node (following the LIST's continue token), sorted by name;
the label selector reaches the LIST; an error names what could not be read."""

from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.modules import k8s_cluster_nodes as module

VERSION = {"major": "1", "minor": "37", "gitVersion": "v1.37.2", "platform": "linux/amd64"}


def node(name):
    return {"metadata": {"name": name, "labels": {}}, "spec": {}, "status": {"capacity": {}}}


class FakeApi:
    """Two pages of Nodes, as an API server with more Nodes than the LIST's limit answers."""

    def __init__(self, fail=None):
        self.fail, self.calls = fail, []

    def request(self, method, path, serializer=None, **params):
        assert method == "get" and serializer is module.raw_json
        self.calls.append((path, params))
        if path == self.fail:
            raise RuntimeError("HTTP 403: Forbidden")
        if path == "/version":
            return dict(VERSION)
        assert path == "/api/v1/nodes"
        if params.get("_continue") == "page2":
            return {"items": [node("gpu-01")], "metadata": {}}
        return {"items": [node("gpu-02"), node("cp-1")], "metadata": {"continue": "page2"}}


def test_version_and_every_node_sorted_by_name():
    api = FakeApi()
    version, nodes = module.read(api, None)
    assert version == VERSION
    assert [n["metadata"]["name"] for n in nodes] == ["cp-1", "gpu-01", "gpu-02"]
    assert [c[0] for c in api.calls] == ["/version", "/api/v1/nodes", "/api/v1/nodes"]
    assert all("label_selector" not in c[1] for c in api.calls)


def test_label_selector_reaches_the_list():
    api = FakeApi()
    module.read(api, "gpu=true")
    assert [c[1].get("label_selector") for c in api.calls[1:]] == ["gpu=true", "gpu=true"]


@pytest.mark.parametrize("path, what", [("/version", "reading the API server's version (/version)"),
                                        ("/api/v1/nodes", "listing the Nodes (/api/v1/nodes)")])
def test_an_error_names_what_could_not_be_read(path, what):
    with pytest.raises(RuntimeError, match=rf"^{what}: HTTP 403: Forbidden$".replace("(", r"\(").replace(")", r"\)")):
        module.read(FakeApi(fail=path), None)
