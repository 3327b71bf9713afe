"""eks_cluster against moto's HTTP server (tests/cloud/conftest.py), run as `ansible localhost -m`.

What these prove: the module's requests are accepted by moto's EKS (boto3 validates each against botocore's model
before sending it), it sends only what differs, a second run sends nothing, check mode sends no write, fields it
does not change fail naming them with no request, a cluster with nodegroups is not deleted. What they do not
prove: that EKS accepts these requests, its asynchronous states (moto is ACTIVE at once, and its
UpdateClusterConfig answers with no update to follow), the authentication mode (moto 5.2.5 neither stores
accessConfig nor returns it), and the endpoint-access updates (moto replaces the whole resourcesVpcConfig with the
request's, where EKS merges it).
"""
from __future__ import annotations

import logging
import sys
import uuid

import pytest

from conftest import CREDS, REGION, run_module


@pytest.fixture
def run_cluster(run):
    def runner(args: dict, *, check: bool = False, diff: bool = False, connection: bool = True) -> dict:
        if connection:
            args = {"endpoint_url": run.endpoint, "region": REGION, **CREDS, **args}
        return run_module("k8sgpu.nvidia.eks_cluster", args, run.env, check=check, diff=diff, python=sys.executable)
    return runner


@pytest.fixture
def spec(network):
    return {"name": f"train-{uuid.uuid4().hex[:8]}", "version": "1.33", "role_arn": network["role"],
            "subnets": network["subnets"], "logging": ["api", "audit"], "tags": {"team": "ml"},
            "authentication_mode": "API_AND_CONFIG_MAP", "bootstrap_cluster_creator_admin_permissions": True}


def ok(result):
    assert not result.get("failed"), result.get("msg")
    return result


def exists(aws, name) -> bool:
    return name in aws["eks"].list_clusters()["clusters"]


def test_create_second_run_and_check_mode(run_cluster, aws, spec, caplog):
    r = ok(run_cluster(spec, check=True, diff=True))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["CreateCluster"]
    assert r["diff"]["before"] == {} and r["diff"]["after"]["logging"] == ["api", "audit"]
    assert r["diff"]["after"]["authenticationMode"] == "API_AND_CONFIG_MAP"
    assert not exists(aws, spec["name"])

    r = ok(run_cluster(spec))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["CreateCluster"]
    req = r["requests"][0]["params"]
    assert req["accessConfig"] == {"authenticationMode": "API_AND_CONFIG_MAP",
                                   "bootstrapClusterCreatorAdminPermissions": True}
    assert req["logging"] == {"clusterLogging": [{"types": ["api", "audit"], "enabled": True},
                                                 {"types": ["authenticator", "controllerManager", "scheduler"],
                                                  "enabled": False}]}
    live = aws["eks"].describe_cluster(name=spec["name"])["cluster"]
    assert live["status"] == "ACTIVE" and live["version"] == "1.33" and live["roleArn"] == spec["role_arn"]
    assert sorted(live["resourcesVpcConfig"]["subnetIds"]) == sorted(spec["subnets"])
    assert live["tags"] == {"team": "ml"}
    assert r["cluster"]["name"] == spec["name"]

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        again = ok(run_cluster(spec))
    assert not again["changed"] and again["requests"] == []
    lines = [m.getMessage() for m in caplog.records if m.name == "werkzeug"]
    assert lines and all('"GET ' in line for line in lines), lines  # reads only


def test_logging_and_tags_only_differences(run_cluster, aws, spec):
    ok(run_cluster(spec))
    changed = {**spec, "logging": ["api", "audit", "authenticator"], "tags": {"team": "ml", "cost": "gpu"}}
    r = ok(run_cluster(changed, check=True, diff=True))
    assert [q["operation"] for q in r["requests"]] == ["UpdateClusterConfig", "TagResource"]
    assert r["diff"]["after"]["logging"] == ["api", "audit", "authenticator"]
    assert r["diff"]["after"]["tags"] == {"team": "ml", "cost": "gpu"}
    assert aws["eks"].describe_cluster(name=spec["name"])["cluster"]["tags"] == {"team": "ml"}

    r = ok(run_cluster(changed, diff=True))
    assert [q["operation"] for q in r["requests"]] == ["UpdateClusterConfig", "TagResource"]
    assert r["requests"][0]["params"]["logging"]["clusterLogging"][0] == {
        "types": ["api", "audit", "authenticator"], "enabled": True}
    assert r["requests"][1]["params"]["tags"] == {"cost": "gpu"}
    live = aws["eks"].describe_cluster(name=spec["name"])["cluster"]
    assert live["tags"] == {"team": "ml", "cost": "gpu"}
    assert r["diff"]["before"]["logging"] == ["api", "audit"]
    assert not ok(run_cluster(changed))["changed"]

    r = ok(run_cluster({**changed, "tags": {"team": "ml"}}))
    assert [q["operation"] for q in r["requests"]] == ["UntagResource"]
    assert aws["eks"].describe_cluster(name=spec["name"])["cluster"]["tags"] == {"team": "ml"}


def test_fields_not_changed_fail_by_name(run_cluster, aws, spec, network):
    ok(run_cluster(spec))
    r = run_cluster({**spec, "version": "1.34", "role_arn": network["role"] + "-other",
                     "subnets": network["subnets"][:1], "logging": ["api"]})
    assert r.get("failed") and r["requests"] == []
    assert "version (EKS field version) is '1.33', the task asks for '1.34'" in r["msg"]
    assert "role_arn (EKS field roleArn)" in r["msg"] and "resourcesVpcConfig.subnetIds" in r["msg"]
    assert "aws eks update-cluster-version" in r["msg"]
    # Same subnets in another order: no difference.
    assert not ok(run_cluster({**spec, "subnets": list(reversed(spec["subnets"]))}))["changed"]


@pytest.mark.parametrize("bad, named", [({"logging": ["api", "kubelet"]}, "LogType"),
                                        ({"authentication_mode": "IAM"}, "AuthenticationMode")])
def test_bad_enum_fails_before_any_request(run_cluster, aws, spec, caplog, bad, named):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        r = run_cluster({**spec, **bad})
    assert r.get("failed") and named in r["msg"]
    assert [m for m in caplog.records if m.name == "werkzeug"] == []
    assert not exists(aws, spec["name"])


def test_delete_refused_with_nodegroups_then_done(run_cluster, aws, spec, network):
    ok(run_cluster(spec))
    aws["eks"].create_nodegroup(clusterName=spec["name"], nodegroupName="gpu", nodeRole=network["role"],
                                subnets=network["subnets"])
    r = run_cluster({"name": spec["name"], "state": "absent"})
    assert r.get("failed") and "still has nodegroup(s) gpu" in r["msg"] and exists(aws, spec["name"])
    aws["eks"].delete_nodegroup(clusterName=spec["name"], nodegroupName="gpu")

    r = ok(run_cluster({"name": spec["name"], "state": "absent"}, check=True))
    assert r["changed"] and exists(aws, spec["name"])
    r = ok(run_cluster({"name": spec["name"], "state": "absent"}, diff=True))
    assert r["changed"] and [q["operation"] for q in r["requests"]] == ["DeleteCluster"]
    assert r["diff"]["before"]["version"] == "1.33" and r["diff"]["after"] == {}
    assert not exists(aws, spec["name"])
    assert not ok(run_cluster({"name": spec["name"], "state": "absent"}))["changed"]


def test_missing_create_options_and_unknown_region(run_cluster, aws, spec):
    r = run_cluster({"name": spec["name"], "version": "1.33"})
    assert r.get("failed") and "give role_arn and subnets" in r["msg"] and not exists(aws, spec["name"])
    r = run_cluster({**spec, "region": "us-east-8", **CREDS}, connection=False)
    assert r.get("failed") and "region 'us-east-8'" in r["msg"] and "endpoint_url" in r["msg"]
    assert "testing-secret" not in r["_stdout"]


def test_an_open_endpoint_and_no_audit_log_are_warned_about(run_cluster, aws, spec):
    # Issue 46: EKS's create default is a public endpoint open to 0.0.0.0/0; the module says so, and an audit log off.
    r = ok(run_cluster({**spec, "logging": ["api"]}))
    warnings = r.get("warnings") or []
    assert any("API server endpoint is public to any address (0.0.0.0/0)" in w for w in warnings), warnings
    assert any("audit log is off" in w for w in warnings), warnings
    vpc = aws["eks"].describe_cluster(name=spec["name"])["cluster"]["resourcesVpcConfig"]
    assert vpc.get("endpointPublicAccess", True)
    # A new cluster (moto's UpdateClusterConfig drops the subnets): private endpoint, public access limited to the
    # site's addresses, the audit log on - no warning.
    safe = {**spec, "name": spec["name"] + "-safe", "endpoint_private_access": True,
            "public_access_cidrs": ["203.0.113.0/24"], "logging": ["api", "audit", "authenticator"]}
    r = ok(run_cluster(safe))
    assert not r.get("warnings"), r.get("warnings")
    live = aws["eks"].describe_cluster(name=safe["name"])["cluster"]
    assert live["resourcesVpcConfig"]["endpointPrivateAccess"] is True
    assert live["resourcesVpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]
