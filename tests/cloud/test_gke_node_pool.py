"""gke_node_pool against the GKE contract server (k8sgpu_testlib.gke_contract_server), run as `ansible localhost -m`.

A contract test. What it proves: every request the module sends through google-cloud-container's REST client
parses strictly into the API's own proto types (unknown fields and enum values are refused), the module sends
only what differs, a second run sends nothing, check mode sends no write, it waits for each operation and
reports an operation's error, fields GKE cannot change fail before any write, and bad enum values and missing
credentials fail before any request. What it does not prove: that GKE accepts these requests (quotas, machine
and GPU type availability, version rules), nor GKE's real timing; the server's GKE behaviours (the GPU taint,
exclusive autoscaling limits, one operation at a time) are modelled from Google's documentation.
"""
from __future__ import annotations

import json
import subprocess

import pytest
import requests

from conftest import GKE_PROJECT, GKE_REGION, GKE_TOKEN

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}


@pytest.fixture
def gpu_pool():
    """A spot T4 pool that scales from zero per zone, the driver installed by GKE."""
    return {"name": "gpu-t4", "machine_type": "n1-standard-4", "spot": True, "image_type": "COS_CONTAINERD",
            "accelerator": {"type": "nvidia-tesla-t4", "count": 1, "gpu_driver_version": "LATEST"},
            "labels": {"role": "train-gpu", "tier": "a"},
            "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            "autoscaling": {"min_node_count": 0, "max_node_count": 3, "location_policy": "ANY"}}


def ok(result):
    assert not result.get("failed"), result.get("msg")
    return result


def pool_dict(state, cluster, name="gpu-t4"):
    from google.cloud.container_v1 import types  # pylint: disable=import-outside-toplevel

    pool = state.pool(GKE_PROJECT, GKE_REGION, cluster, name)
    return None if pool is None else json.loads(types.NodePool.to_json(pool, use_integers_for_enums=False))


def writes_since(state, mark: int) -> list[dict]:
    return [r for r in state.log[mark:] if r["method"] != "GET"]


def sizes(state, pool: dict) -> list[int]:
    return [state.migs["/compute" + u.split("/compute", 1)[1]] for u in pool["instanceGroupUrls"]]


def test_create_then_second_run_changes_nothing(gke_run, gke_server, gke_cluster, gpu_pool):
    r = ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    assert r["changed"] and [q["method"] for q in r["requests"]] == ["create_node_pool"]
    assert r["requests"][0]["request"]["node_pool"]["initial_node_count"] == 0  # from zero
    assert [o["status"] for o in r["operations"]] == ["DONE"]
    pool = pool_dict(gke_server, gke_cluster)
    assert pool["status"] == "RUNNING" and pool["config"]["spot"] is True
    acc = pool["config"]["accelerators"]
    assert [(a["acceleratorType"], a["acceleratorCount"]) for a in acc] == [("nvidia-tesla-t4", "1")]
    assert pool["config"]["accelerators"][0]["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "LATEST"}
    assert pool["config"]["labels"] == {"role": "train-gpu", "tier": "a"}
    # The server added GKE's GPU taint; Kubernetes' NoSchedule was sent as GKE's NO_SCHEDULE.
    taints = sorted((t["key"], t["value"], t["effect"]) for t in pool["config"]["taints"])
    assert taints == [("dedicated", "ml", "NO_SCHEDULE"), ("nvidia.com/gpu", "present", "NO_SCHEDULE")]
    assert pool["autoscaling"] == {"enabled": True, "minNodeCount": 0, "maxNodeCount": 3, "autoprovisioned": False,
                                   "locationPolicy": "ANY", "totalMinNodeCount": 0, "totalMaxNodeCount": 0}
    assert sizes(gke_server, pool) == [0, 0]
    assert r["node_selector"] == {"cloud.google.com/gke-nodepool": "gpu-t4",
                                  "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in r["tolerations"]
    assert r["driver_installed_by_gke"] is True and r["image_type"] == "COS_CONTAINERD"
    assert r["node_count"] == {"us-central1-a": 0, "us-central1-b": 0}

    mark = len(gke_server.log)
    again = ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    assert not again["changed"] and again["requests"] == [] and again["operations"] == []
    assert writes_since(gke_server, mark) == []  # GKE's GPU taint was no difference
    assert pool_dict(gke_server, gke_cluster) == pool


def test_labels_taints_autoscaling_size_only_differences(gke_run, gke_server, gke_cluster, gpu_pool):
    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    version = pool_dict(gke_server, gke_cluster)["version"]
    changed = {**gpu_pool, "labels": {"role": "infer-gpu", "zone": "b"},
               "taints": [{"key": "dedicated", "value": "ml", "effect": "NO_EXECUTE"}],
               "autoscaling": {"total_min_node_count": 0, "total_max_node_count": 4, "location_policy": "BALANCED"},
               "node_count": 1}
    mark = len(gke_server.log)
    r = ok(gke_run({"cluster": gke_cluster, **changed}, diff=True))
    assert r["changed"]
    assert [q["method"] for q in r["requests"]] == ["update_node_pool", "update_node_pool",
                                                    "set_node_pool_autoscaling", "set_node_pool_size"]
    # What reached the server, as the client serialised it: one field group per update, the pool's own version.
    bodies = [(w["method"], w["path"].rsplit("/", 1)[1], json.loads(w["body"] or "{}"))
              for w in writes_since(gke_server, mark)]
    assert bodies[0] == ("PUT", "gpu-t4", {"nodeVersion": version, "imageType": "COS_CONTAINERD",
                                           "labels": {"labels": {"role": "infer-gpu", "zone": "b"}}})
    # The REST client sends enums as numbers (enum-encoding=int): NO_EXECUTE is 3 in NodeTaint.Effect.
    assert bodies[1][2]["taints"] == {"taints": [{"key": "dedicated", "value": "ml", "effect": 3}]}
    assert bodies[2][1] == "gpu-t4:setAutoscaling" and bodies[2][2]["autoscaling"]["totalMaxNodeCount"] == 4
    assert "maxNodeCount" not in bodies[2][2]["autoscaling"]
    assert bodies[3] == ("POST", "gpu-t4:setSize", {"nodeCount": 1})
    assert r["diff"]["before"]["labels"] == {"role": "train-gpu", "tier": "a"}
    assert r["diff"]["after"]["labels"] == {"role": "infer-gpu", "zone": "b"}

    pool = pool_dict(gke_server, gke_cluster)
    assert pool["config"]["labels"] == {"role": "infer-gpu", "zone": "b"}
    assert sorted((t["key"], t["effect"]) for t in pool["config"]["taints"]) == [
        ("dedicated", "NO_EXECUTE"), ("nvidia.com/gpu", "NO_SCHEDULE")]
    assert pool["autoscaling"]["totalMaxNodeCount"] == 4 and pool["autoscaling"]["maxNodeCount"] == 0
    assert pool["autoscaling"]["locationPolicy"] == "BALANCED"
    assert sizes(gke_server, pool) == [1, 1]

    mark = len(gke_server.log)
    again = ok(gke_run({"cluster": gke_cluster, **changed}))
    assert not again["changed"] and writes_since(gke_server, mark) == []


def test_machine_and_locations_in_place(gke_run, gke_server, gke_cluster, gpu_pool):
    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    changed = {**gpu_pool, "machine_type": "n1-standard-8", "disk_size_gb": 200, "node_locations": ["us-central1-a"]}
    r = ok(gke_run({"cluster": gke_cluster, **changed}))
    reqs = [q["request"] for q in r["requests"]]
    assert [sorted(k for k in q if k not in ("node_version", "image_type")) for q in reqs] == [
        ["locations"], ["disk_size_gb", "machine_type"]]
    pool = pool_dict(gke_server, gke_cluster)
    assert pool["locations"] == ["us-central1-a"] and pool["config"]["machineType"] == "n1-standard-8"
    assert pool["config"]["diskSizeGb"] == 200
    assert not ok(gke_run({"cluster": gke_cluster, **changed}))["changed"]


def test_fields_gke_fills_are_no_difference(gke_run, gke_server, gke_cluster):
    """GKE fills the location policy (BALANCED off spot) and the GPU taint; neither makes a second run change."""
    pool = {"name": "gpu-t4", "accelerator": {"type": "nvidia-tesla-t4"}, "autoscaling": {"max_node_count": 2}}
    ok(gke_run({"cluster": gke_cluster, **pool}))
    assert pool_dict(gke_server, gke_cluster)["autoscaling"]["locationPolicy"] == "BALANCED"
    mark = len(gke_server.log)
    r = ok(gke_run({"cluster": gke_cluster, **pool, "taints": []}))
    assert not r["changed"] and writes_since(gke_server, mark) == []
    assert r["driver_installed_by_gke"] is False  # no gpu_driver_version: GKE's default may install nothing


def test_check_mode_sends_no_write(gke_run, gke_server, gke_cluster, gpu_pool):
    mark = len(gke_server.log)
    r = ok(gke_run({"cluster": gke_cluster, **gpu_pool}, check=True, diff=True))
    assert r["changed"] and [q["method"] for q in r["requests"]] == ["create_node_pool"]
    assert r["diff"]["before"] == {} and r["diff"]["after"]["spot"] is True
    assert pool_dict(gke_server, gke_cluster) is None and writes_since(gke_server, mark) == []

    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    before = pool_dict(gke_server, gke_cluster)
    mark = len(gke_server.log)
    r = ok(gke_run({"cluster": gke_cluster, **gpu_pool, "labels": {"role": "x"}, "taints": [],
                    "autoscaling": {"min_node_count": 1, "max_node_count": 2}, "node_count": 2},
                   check=True, diff=True))
    assert [q["method"] for q in r["requests"]] == ["update_node_pool", "update_node_pool",
                                                    "set_node_pool_autoscaling", "set_node_pool_size"]
    assert r["diff"]["after"]["labels"] == {"role": "x"} and r["diff"]["after"]["taints"] == []
    assert r["diff"]["after"]["node_count"] == {"us-central1-a": 2, "us-central1-b": 2}
    assert pool_dict(gke_server, gke_cluster) == before
    assert writes_since(gke_server, mark) == [], "check mode sent a write"


def test_immutable_field_fails_unless_recreate(gke_run, gke_server, gke_cluster, gpu_pool):
    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    mark = len(gke_server.log)
    other = {**gpu_pool, "accelerator": {"type": "nvidia-l4", "gpu_driver_version": "LATEST"}, "spot": False}
    r = gke_run({"cluster": gke_cluster, **other})
    assert r.get("failed")
    assert "config.accelerators" in r["msg"] and "config.spot" in r["msg"]
    assert "nvidia-tesla-t4" in r["msg"] and "nvidia-l4" in r["msg"] and "recreate: true" in r["msg"]
    assert writes_since(gke_server, mark) == []

    r = ok(gke_run({"cluster": gke_cluster, **other, "recreate": True}, check=True, diff=True))
    assert [q["method"] for q in r["requests"]] == ["delete_node_pool", "create_node_pool"]
    assert r["diff"]["after"]["accelerators"][0]["accelerator_type"] == "nvidia-l4"
    assert writes_since(gke_server, mark) == []

    r = ok(gke_run({"cluster": gke_cluster, **other, "recreate": True}))
    assert [q["method"] for q in r["requests"]] == ["delete_node_pool", "create_node_pool"]
    pool = pool_dict(gke_server, gke_cluster)
    assert pool["config"]["accelerators"][0]["acceleratorType"] == "nvidia-l4" and not pool["config"].get("spot")


@pytest.mark.parametrize("bad, named", [
    ({"accelerator": {"type": "nvidia-tesla-t4", "gpu_driver_version": "NEWEST"}}, "GPUDriverVersion"),
    ({"accelerator": {"type": "nvidia-tesla-t4", "gpu_sharing_strategy": "SHARED"}}, "GPUSharingStrategy"),
    ({"autoscaling": {"max_node_count": 3, "location_policy": "CHEAPEST"}}, "LocationPolicy"),
    ({"taints": [{"key": "a", "effect": "NoWay"}]}, "NodeTaint.Effect"),
    ({"autoscaling": {"max_node_count": 3, "total_max_node_count": 3}}, "exclude each other"),
    # GKE requires the number of clients with a sharing strategy (GPUSharingConfig): refused before any call.
    ({"accelerator": {"type": "nvidia-tesla-t4", "gpu_sharing_strategy": "TIME_SHARING"}},
     "needs accelerator.max_shared_clients_per_gpu"),
    ({"accelerator": {"type": "nvidia-tesla-t4", "gpu_sharing_strategy": "MPS"}},
     "needs accelerator.max_shared_clients_per_gpu"),
])
def test_bad_value_rejected_before_any_request(gke_run, gke_server, gke_cluster, gpu_pool, bad, named):
    mark = len(gke_server.log)
    r = gke_run({"cluster": gke_cluster, **gpu_pool, **bad})
    assert r.get("failed") and named in r["msg"], r.get("msg")
    assert gke_server.log[mark:] == [], "a request was sent before the value was checked"


def test_operation_error_is_reported(gke_run, gke_server, gke_cluster, gpu_pool):
    quota = 'Insufficient regional quota to satisfy request: resource "NVIDIA_T4_GPUS"'
    gke_server.fail_next.append({"code": 8, "message": quota})
    r = gke_run({"cluster": gke_cluster, **gpu_pool})
    assert r.get("failed") and quota in r["msg"] and "CREATE_NODE_POOL" in r["msg"]
    assert r["operations"][0]["error"] == {"code": 8, "message": quota}
    assert pool_dict(gke_server, gke_cluster)["status"] == "ERROR"


def test_delete_then_absent_is_no_change(gke_run, gke_server, gke_cluster, gpu_pool):
    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    r = ok(gke_run({"cluster": gke_cluster, "name": "gpu-t4", "state": "absent"}, check=True))
    assert r["changed"] and pool_dict(gke_server, gke_cluster) is not None
    r = ok(gke_run({"cluster": gke_cluster, "name": "gpu-t4", "state": "absent"}))
    assert r["changed"] and [q["method"] for q in r["requests"]] == ["delete_node_pool"]
    assert pool_dict(gke_server, gke_cluster) is None and not gke_server.migs.get(r["diff"]["before"].get("x", ""))
    assert not ok(gke_run({"cluster": gke_cluster, "name": "gpu-t4", "state": "absent"}))["changed"]


def test_missing_credentials_message(gke_run, gke_server, gke_cluster, gpu_pool):
    mark = len(gke_server.log)
    r = gke_run({"cluster": gke_cluster, **gpu_pool, "api_endpoint": gke_server.base, "project": GKE_PROJECT,
                 "location": GKE_REGION}, connection=False)
    assert r.get("failed") and "no Google Cloud credentials found" in r["msg"]
    assert "gcloud auth application-default login" in r["msg"] and "GOOGLE_APPLICATION_CREDENTIALS" in r["msg"]
    assert gke_server.log[mark:] == []


def test_wrong_token_is_the_apis_error(gke_run, gke_cluster, gpu_pool):
    r = gke_run({"cluster": gke_cluster, **gpu_pool, "access_token": "expired"})
    assert r.get("failed") and "get_node_pool" in r["msg"] and "refused" in r["msg"]
    assert "gcloud auth print-access-token" in r["msg"]
    assert "expired" not in r["_stdout"].replace('"access_token": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"', "")


def test_service_account_key_file(gke_run, gke_server, gke_cluster, gpu_pool, tmp_path):
    """A service-account key whose token_uri is the contract server: google-auth signs a JWT and gets a token."""
    from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import rsa  # pylint: disable=import-outside-toplevel

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    email = "pools@k8sgpu-test.iam.gserviceaccount.com"
    gke_server.service_accounts[email] = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    keyfile = tmp_path / "key.json"
    keyfile.write_text(json.dumps({
        "type": "service_account", "project_id": GKE_PROJECT, "private_key_id": "1", "client_email": email,
        "client_id": "1", "token_uri": f"{gke_server.base}/token",
        "private_key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode()}))
    args = {"cluster": gke_cluster, **gpu_pool, "api_endpoint": gke_server.base, "project": GKE_PROJECT,
            "location": GKE_REGION, "service_account_file": str(keyfile)}
    r = ok(gke_run(args, connection=False))
    assert r["changed"] and pool_dict(gke_server, gke_cluster) is not None
    # The API calls carried a JWT self-signed by the key; the Compute read (instance group sizes) got a token
    # from the key's token_uri.
    assert any(x["path"] == "/token" for x in gke_server.log)


def test_missing_library_named(gke_run, gke_cluster, gpu_pool):
    has = subprocess.run(["/usr/bin/python3", "-c", "import google.cloud.container_v1"], capture_output=True,
                         check=False).returncode == 0
    if has:
        pytest.skip("/usr/bin/python3 has google-cloud-container: no interpreter without it here")
    r = gke_run({"cluster": gke_cluster, **gpu_pool}, python="/usr/bin/python3")
    assert r.get("failed") and "google-cloud-container" in r["msg"] and "requirements-gke.txt" in r["msg"]


def test_server_is_strict(gke_server, gke_cluster, gke_run, gpu_pool):
    """The contract server refuses what Google's front end refuses, so the tests above can fail."""
    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    url = f"{gke_server.base}/v1/projects/{GKE_PROJECT}/locations/{GKE_REGION}/clusters/{gke_cluster}/nodePools/gpu-t4"
    auth = {"Authorization": f"Bearer {GKE_TOKEN}"}
    version = pool_dict(gke_server, gke_cluster)["version"]
    # google.cloud.gcp_container_node_pool's update: the whole NodePool in a PUT (its resource_to_request).
    r = requests.put(url, headers=auth, timeout=10, json={
        "name": "gpu-t4", "config": {"machineType": "n1-standard-4"}, "initialNodeCount": 0,
        "autoscaling": {"enabled": True, "minNodeCount": 0, "maxNodeCount": 3}})
    assert r.status_code == 400 and "has no field named \"config\"" in r.json()["error"]["message"]
    r = requests.put(url, headers=auth, timeout=10, json={"nodeVersion": version, "imageType": "COS_CONTAINERD",
                                                          "labels": {"labels": {"a": "b"}}, "colour": "red"})
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]
    r = requests.post(url + ":setAutoscaling", headers=auth, timeout=10,
                      json={"autoscaling": {"enabled": True, "maxNodeCount": 3, "locationPolicy": 9}})
    assert r.status_code == 400 and "LocationPolicy" in r.json()["error"]["message"]
    r = requests.put(url, headers=auth, timeout=10, json={"labels": {"labels": {"a": "b"}}})
    assert r.status_code == 400 and "node_version and image_type are required" in r.json()["error"]["message"]
    assert requests.get(url, timeout=10).status_code == 401


def test_time_sharing_pool_created_and_server_refuses_it_without_clients(gke_run, gke_server, gke_cluster):
    """The sharing rule as the server models it: a strategy without max_shared_clients_per_gpu is a 400; with it
    the module's pool is created and a second run sends nothing."""
    url = f"{gke_server.base}/v1/projects/{GKE_PROJECT}/locations/{GKE_REGION}/clusters/{gke_cluster}/nodePools"
    r = requests.post(url, headers={"Authorization": f"Bearer {GKE_TOKEN}"}, timeout=10, json={"nodePool": {
        "name": "raw", "initialNodeCount": 0, "config": {"accelerators": [{
            "acceleratorType": "nvidia-l4", "acceleratorCount": 1,
            "gpuSharingConfig": {"gpuSharingStrategy": "TIME_SHARING"}}]}}})
    assert r.status_code == 400 and "max_shared_clients_per_gpu must be set" in r.json()["error"]["message"]
    pool = {"name": "gpu-l4-shared", "machine_type": "g2-standard-8",
            "accelerator": {"type": "nvidia-l4", "gpu_sharing_strategy": "TIME_SHARING",
                            "max_shared_clients_per_gpu": 4},
            "autoscaling": {"total_min_node_count": 0, "total_max_node_count": 4}}
    ok(gke_run({"cluster": gke_cluster, **pool}))
    sharing = pool_dict(gke_server, gke_cluster, "gpu-l4-shared")["config"]["accelerators"][0]["gpuSharingConfig"]
    assert sharing == {"gpuSharingStrategy": "TIME_SHARING", "maxSharedClientsPerGpu": "4"}
    assert not ok(gke_run({"cluster": gke_cluster, **pool}))["changed"]


def test_driver_installation_changes_in_place(gke_run, gke_server, gke_cluster, gpu_pool):
    """A changed gpu_driver_version is an UpdateNodePoolRequest.accelerators (the pool's own accelerator with the new
    driver installation), not an immutable field: no delete, no recreate."""
    ok(gke_run({"cluster": gke_cluster, **gpu_pool}))
    version = pool_dict(gke_server, gke_cluster)["version"]
    manual = {**gpu_pool, "accelerator": {**gpu_pool["accelerator"], "gpu_driver_version": "INSTALLATION_DISABLED"}}

    mark = len(gke_server.log)
    r = ok(gke_run({"cluster": gke_cluster, **manual}, check=True, diff=True))
    assert [q["method"] for q in r["requests"]] == ["update_node_pool"]
    assert r["diff"]["after"]["accelerators"][0]["gpu_driver_installation_config"] == {
        "gpu_driver_version": "INSTALLATION_DISABLED"}
    assert r["driver_installed_by_gke"] is True  # check mode: the live pool, still LATEST
    assert writes_since(gke_server, mark) == []

    r = ok(gke_run({"cluster": gke_cluster, **manual}))
    assert [q["method"] for q in r["requests"]] == ["update_node_pool"]
    bodies = [json.loads(w["body"]) for w in writes_since(gke_server, mark)]
    # What reached the server: the pool's own type and count, the new driver installation (enum as number:
    # INSTALLATION_DISABLED is 1 in GPUDriverInstallationConfig.GPUDriverVersion).
    assert bodies == [{"nodeVersion": version, "imageType": "COS_CONTAINERD", "accelerators": [{
        "acceleratorType": "nvidia-tesla-t4", "acceleratorCount": "1",
        "gpuDriverInstallationConfig": {"gpuDriverVersion": 1}}]}]
    pool = pool_dict(gke_server, gke_cluster)
    assert pool["config"]["accelerators"][0]["gpuDriverInstallationConfig"] == {
        "gpuDriverVersion": "INSTALLATION_DISABLED"}
    assert r["driver_installed_by_gke"] is False
    assert ("nvidia.com/gpu", "NO_SCHEDULE") in [(t["key"], t["effect"]) for t in pool["config"]["taints"]]
    mark = len(gke_server.log)
    assert not ok(gke_run({"cluster": gke_cluster, **manual}))["changed"] and writes_since(gke_server, mark) == []

    # The type is still immutable; the server refuses a type change through accelerators as well.
    r = gke_run({"cluster": gke_cluster, **manual, "accelerator": {**manual["accelerator"], "type": "nvidia-l4"}})
    assert r.get("failed") and "config.accelerators" in r["msg"] and "recreate: true" in r["msg"]
    url = f"{gke_server.base}/v1/projects/{GKE_PROJECT}/locations/{GKE_REGION}/clusters/{gke_cluster}/nodePools/gpu-t4"
    raw = requests.put(url, headers={"Authorization": f"Bearer {GKE_TOKEN}"}, timeout=10, json={
        "nodeVersion": version, "imageType": "COS_CONTAINERD",
        "accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": 1}]})
    assert raw.status_code == 400 and "only gpu_driver_installation_config" in raw.json()["error"]["message"]


def test_unknown_accelerator_type_refused_before_any_write(gke_run, gke_server, gke_cluster, gpu_pool, monkeypatch):
    mark = len(gke_server.log)
    r = gke_run({"cluster": gke_cluster, **gpu_pool, "accelerator": {"type": "nvidia-tesla-t5"}})
    assert r.get("failed") and "'nvidia-tesla-t5' is not offered in zone(s) us-central1-a, us-central1-b" in r["msg"]
    assert "nvidia-tesla-t4" in r["msg"] and "node_locations" in r["msg"]
    assert writes_since(gke_server, mark) == [] and pool_dict(gke_server, gke_cluster) is None
    # The zones came from the cluster (regional, no node_locations), the types from acceleratorTypes.list.
    paths = [x["path"] for x in gke_server.log[mark:]]
    assert f"/v1/projects/{GKE_PROJECT}/locations/{GKE_REGION}/clusters/{gke_cluster}" in paths
    assert f"/compute/v1/projects/{GKE_PROJECT}/zones/us-central1-b/acceleratorTypes" in paths

    # A type one zone lacks: named with that zone only; the pool fits when node_locations leaves the zone out.
    monkeypatch.setitem(gke_server.accelerator_types, "us-central1-b", ["nvidia-tesla-t4"])
    l4 = {**gpu_pool, "accelerator": {"type": "nvidia-l4"}}
    r = gke_run({"cluster": gke_cluster, **l4})
    assert r.get("failed") and "zone(s) us-central1-b (" in r["msg"] and "us-central1-b offers nvidia-tesla-t4" \
        in r["msg"]
    assert writes_since(gke_server, mark) == []
    ok(gke_run({"cluster": gke_cluster, **l4, "node_locations": ["us-central1-a"]}))
    # The server itself refuses what the module refused (so the check matches GKE's rule as modelled).
    url = f"{gke_server.base}/v1/projects/{GKE_PROJECT}/locations/{GKE_REGION}/clusters/{gke_cluster}/nodePools"
    raw = requests.post(url, headers={"Authorization": f"Bearer {GKE_TOKEN}"}, timeout=10, json={"nodePool": {
        "name": "raw", "initialNodeCount": 0,
        "config": {"accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": 1}]}}})
    assert raw.status_code == 400 and "does not exist in zone us-central1-b" in raw.json()["error"]["message"]
    # Skipping the check: the request goes, and the API's own error is reported.
    r = gke_run({"cluster": gke_cluster, **l4, "name": "gpu-l4-b", "check_accelerator_type": False})
    assert r.get("failed") and "create_node_pool" in r["msg"] and "does not exist in zone us-central1-b" in r["msg"]
