"""gke_cluster against the GKE contract server (k8sgpu_testlib.gke_contract_server), run as `ansible localhost -m`.

A contract test, as test_gke_node_pool.py: every request parses strictly into google-cloud-container's proto types,
the server keeps the cluster and its pools and applies GKE's documented rules it models (one ClusterUpdate field
per request, the logging components' rule, defaults for the network, release channel and logging). It does not
prove that GKE creates such a cluster (quotas, versions, networks, organisation policies), nor its timing.
"""
from __future__ import annotations

import json
import uuid

import pytest
import requests

from conftest import GKE_PROJECT, GKE_REGION, GKE_TOKEN

MODULE = "k8sgpu.nvidia.gke_cluster"


@pytest.fixture
def spec():
    return {"name": f"made-{uuid.uuid4().hex[:8]}", "release_channel": "STABLE",
            "node_locations": ["us-central1-a", "us-central1-b"], "logging_components": ["SYSTEM_COMPONENTS"],
            "cpu_pool": {"machine_type": "e2-standard-2", "node_count": 1}}


def ok(result):
    assert not result.get("failed"), result.get("msg")
    return result


def writes_since(state, mark):
    return [r for r in state.log[mark:] if r["method"] != "GET"]


def cluster_json(state, name):
    from google.cloud.container_v1 import types  # pylint: disable=import-outside-toplevel

    if (GKE_PROJECT, GKE_REGION, name) not in state.clusters:
        return None
    from k8sgpu_testlib import gke_contract_server as srv  # pylint: disable=import-outside-toplevel

    h = srv.Handler.__new__(srv.Handler)  # the server's view, as its get_cluster answers
    h.state = state
    return json.loads(types.Cluster.to_json(h.cluster_pb(GKE_PROJECT, GKE_REGION, name), use_integers_for_enums=False))


def test_create_second_run_check_mode(gke_run, gke_server, spec):
    mark = len(gke_server.log)
    r = ok(gke_run(spec, module=MODULE, check=True, diff=True))
    assert r["changed"] and [q["method"] for q in r["requests"]] == ["create_cluster"]
    assert r["diff"]["before"] == {} and r["diff"]["after"]["node_pools"] == ["cpu"]
    assert r["diff"]["after"]["release_channel"] == "STABLE"
    assert writes_since(gke_server, mark) == [] and cluster_json(gke_server, spec["name"]) is None

    r = ok(gke_run(spec, module=MODULE))
    assert r["changed"] and [o["operation_type"] for o in r["operations"]] == ["CREATE_CLUSTER"]
    c = cluster_json(gke_server, spec["name"])
    assert c["status"] == "RUNNING" and c["releaseChannel"] == {"channel": "STABLE"}
    assert c["loggingConfig"]["componentConfig"]["enableComponents"] == ["SYSTEM_COMPONENTS"]
    assert c["locations"] == ["us-central1-a", "us-central1-b"] and c["network"] == "default"
    pools = {p["name"]: p for p in c["nodePools"]}
    assert list(pools) == ["cpu"] and pools["cpu"]["config"]["machineType"] == "e2-standard-2"
    assert pools["cpu"]["initialNodeCount"] == 1 and not pools["cpu"]["config"].get("accelerators")
    assert r["cluster"]["name"] == spec["name"] and "node_pools" not in r["cluster"]

    mark = len(gke_server.log)
    again = ok(gke_run(spec, module=MODULE))
    assert not again["changed"] and writes_since(gke_server, mark) == []


def test_one_update_per_field_then_nothing(gke_run, gke_server, spec):
    ok(gke_run(spec, module=MODULE))
    changed = {**spec, "release_channel": "REGULAR", "logging_components": ["SYSTEM_COMPONENTS", "WORKLOADS"],
               "node_locations": ["us-central1-a"]}
    mark = len(gke_server.log)
    r = ok(gke_run(changed, module=MODULE, diff=True))
    bodies = [json.loads(w["body"]) for w in writes_since(gke_server, mark)]
    assert [list(b["update"]) for b in bodies] == [["desiredReleaseChannel"], ["desiredLoggingConfig"],
                                                   ["desiredLocations"]]
    assert [o["operation_type"] for o in r["operations"]] == ["UPDATE_CLUSTER"] * 3
    c = cluster_json(gke_server, spec["name"])
    assert c["releaseChannel"] == {"channel": "REGULAR"} and c["locations"] == ["us-central1-a"]
    assert sorted(c["loggingConfig"]["componentConfig"]["enableComponents"]) == ["SYSTEM_COMPONENTS", "WORKLOADS"]
    assert r["diff"]["before"]["release_channel"] == "STABLE" and r["diff"]["after"]["release_channel"] == "REGULAR"
    mark = len(gke_server.log)
    assert not ok(gke_run(changed, module=MODULE))["changed"] and writes_since(gke_server, mark) == []

    # The server refuses two ClusterUpdate fields in one request, as GKE does.
    url = f"{gke_server.base}/v1/projects/{GKE_PROJECT}/locations/{GKE_REGION}/clusters/{spec['name']}"
    raw = requests.put(url, headers={"Authorization": f"Bearer {GKE_TOKEN}"}, timeout=10, json={"update": {
        "desiredReleaseChannel": {"channel": "RAPID"}, "desiredLocations": ["us-central1-b"]}})
    assert raw.status_code == 400 and "exactly one update" in raw.json()["error"]["message"]


@pytest.mark.parametrize("bad, named", [({"release_channel": "BETA"}, "ReleaseChannel.Channel"),
                                        ({"logging_components": ["SYSTEM_COMPONENTS", "KUBELET"]}, "Component"),
                                        ({"logging_components": ["WORKLOADS"]}, "needs SYSTEM_COMPONENTS"),
                                        ({"cpu_pool": {"node_count": 0}}, "1 or more")])
def test_bad_values_before_any_request(gke_run, gke_server, spec, bad, named):
    mark = len(gke_server.log)
    r = gke_run({**spec, **bad}, module=MODULE)
    assert r.get("failed") and named in r["msg"], r.get("msg")
    assert gke_server.log[mark:] == []


def test_network_not_changed_and_delete(gke_run, gke_server, spec):
    ok(gke_run(spec, module=MODULE))
    mark = len(gke_server.log)
    r = gke_run({**spec, "network": "gpu-vpc"}, module=MODULE)
    assert r.get("failed") and "network: live 'default', asked 'gpu-vpc'" in r["msg"]
    assert writes_since(gke_server, mark) == []
    # A pool made afterwards goes with the cluster.
    ok(gke_run({"cluster": spec["name"], "name": "gpu", "accelerator": {"type": "nvidia-tesla-t4"},
                "autoscaling": {"min_node_count": 0, "max_node_count": 1}}))

    absent = {"name": spec["name"], "state": "absent"}
    r = ok(gke_run(absent, module=MODULE, check=True))
    assert r["changed"] and cluster_json(gke_server, spec["name"]) is not None
    r = ok(gke_run(absent, module=MODULE, diff=True))
    assert [o["operation_type"] for o in r["operations"]] == ["DELETE_CLUSTER"]
    assert r["diff"]["before"]["node_pools"] == ["cpu", "gpu"] and r["diff"]["after"] == {}
    assert cluster_json(gke_server, spec["name"]) is None
    assert not ok(gke_run(absent, module=MODULE))["changed"]
