"""Unit tests of _eks_cluster: what eks_cluster sends, and what moto cannot show (the authentication mode)."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_cluster as plan

LIVE = {"name": "train", "version": "1.33", "roleArn": "arn:r", "status": "ACTIVE",
        "resourcesVpcConfig": {"subnetIds": ["s-1", "s-2"], "securityGroupIds": [], "endpointPublicAccess": True,
                               "endpointPrivateAccess": False, "publicAccessCidrs": ["0.0.0.0/0"]},
        "logging": {"clusterLogging": [{"types": ["api"], "enabled": True},
                                       {"types": ["audit", "scheduler"], "enabled": False}]},
        "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"}}


def test_one_update_per_kind_only_what_differs():
    p = {"logging": ["api"], "endpoint_public_access": True, "endpoint_private_access": True,
         "public_access_cidrs": ["0.0.0.0/0"], "authentication_mode": "API"}
    assert plan.config_updates(LIVE, p) == [{"resourcesVpcConfig": {"endpointPrivateAccess": True}},
                                            {"accessConfig": {"authenticationMode": "API"}}]
    assert plan.config_updates(LIVE, {"logging": ["api"], "authentication_mode": "API_AND_CONFIG_MAP"}) == []
    assert plan.config_updates(LIVE, {"logging": []}) == [{"logging": {"clusterLogging": [
        {"types": list(plan.LOG_TYPES), "enabled": False}]}}]


def test_authentication_mode_only_forward():
    with pytest.raises(plan.PlanError, match="never back"):
        plan.config_updates(LIVE, {"authentication_mode": "CONFIG_MAP"})


def test_immutable_named_and_order_free():
    assert plan.immutable_changes(LIVE, {"subnets": ["s-2", "s-1"], "role_arn": "arn:r", "version": "1.33"}) == []
    changes = plan.immutable_changes(LIVE, {"version": "1.34", "security_groups": ["sg-1"]})
    assert [c[0] for c in changes] == ["security_groups", "version"]
    msg = plan.immutable_message("train", changes)
    assert "update-cluster-version" in msg and "update-cluster-config" in msg


def test_planned_after_updates():
    after = plan.planned(LIVE, None, [{"logging": plan.logging_request(["api", "audit"])},
                                      {"accessConfig": {"authenticationMode": "API"}}], {"a": "b"})
    assert after["logging"] == ["api", "audit"] and after["authenticationMode"] == "API" and after["tags"] == {"a": "b"}
