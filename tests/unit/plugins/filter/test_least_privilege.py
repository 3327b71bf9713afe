"""Least privilege (issue 19): the Pod Security labels of the namespaces the roles create, the check of an existing
namespace, the adapter's RBAC from its rules, and the verify Job's security context."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._adapter_rbac_rules import adapter_rbac_rules
from ansible_collections.k8sgpu.nvidia.plugins.filter._gpu_adapter_rules import gpu_adapter_rules
from ansible_collections.k8sgpu.nvidia.plugins.filter._pod_security_conflict import pod_security_conflict
from ansible_collections.k8sgpu.nvidia.plugins.filter._pod_security_namespace import pod_security_namespace
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gpu_verify import job_manifest

PSA = "pod-security.kubernetes.io/"


def test_namespace_carries_enforce_audit_warn_and_their_versions():
    ns = pod_security_namespace("gpu-monitoring", "restricted")
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == "gpu-monitoring"
    labels = ns["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/managed-by": "k8sgpu.nvidia",
                      f"{PSA}enforce": "restricted", f"{PSA}enforce-version": "latest",
                      f"{PSA}audit": "restricted", f"{PSA}audit-version": "latest",
                      f"{PSA}warn": "restricted", f"{PSA}warn-version": "latest"}
    assert pod_security_namespace("x", "privileged", "v1.31")["metadata"]["labels"][f"{PSA}enforce-version"] == "v1.31"


@pytest.mark.parametrize("args, message", [
    (("gpu-monitoring", "strict"), "level 'strict' is not one of restricted, baseline, privileged"),
    (("gpu-monitoring", "restricted", "1.31"), "version '1.31' is neither 'latest' nor 'v1.<minor>'"),
    (("GPU_Monitoring", "restricted"), "namespace 'GPU_Monitoring' is not a DNS label"),
])
def test_bad_levels_and_names_are_named(args, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pod_security_namespace(*args)


def _ns(enforce: str | None) -> dict:
    labels = {f"{PSA}enforce": enforce} if enforce else {}
    return {"metadata": {"name": "shared", "labels": labels}}


@pytest.mark.parametrize("enforce, needed, refused", [
    (None, "privileged", False),           # no enforce label: the cluster's default admits
    ("privileged", "privileged", False),
    ("baseline", "privileged", True),
    ("restricted", "privileged", True),
    ("restricted", "restricted", False),
    ("baseline", "restricted", False),
    ("restricted", "baseline", True),
])
def test_existing_namespace_refuses_pods_that_need_more(enforce, needed, refused):
    msg = pod_security_conflict(_ns(enforce), needed)
    assert bool(msg) is refused
    if refused:
        assert f"namespace shared enforces Pod Security level {enforce}, but these pods need {needed}" in msg
        assert f"kubectl label --overwrite namespace shared {PSA}enforce={needed}" in msg
    assert pod_security_conflict(None, needed) == ""


def test_adapter_rbac_lists_exactly_what_the_default_rules_read():
    rbac = adapter_rbac_rules(gpu_adapter_rules("dcgm-exporter"))
    assert rbac["adapter"] == [{"apiGroups": [""], "resources": ["namespaces", "pods", "services"],
                                "verbs": ["get", "list", "watch"]}]
    assert rbac["metrics_reader"] == [{"apiGroups": ["custom.metrics.k8s.io"],
                                       "resources": ["pods/DCGM_FI_DEV_GPU_UTIL", "services/DCGM_FI_DEV_GPU_UTIL_AVG"],
                                       "verbs": ["get", "list"]}]
    for rules in rbac.values():
        for rule in rules:
            assert "*" not in rule["resources"] and "*" not in rule["verbs"] and "*" not in rule["apiGroups"]


def test_adapter_rbac_follows_extra_rules():
    extra = [{"seriesQuery": "DCGM_FI_DEV_FB_USED{exported_namespace!=\"\"}",
              "resources": {"overrides": {"exported_namespace": {"resource": "namespace"},
                                          "deploy": {"group": "apps", "resource": "deployment"}}},
              "name": {"as": "FB_USED"}}]
    rbac = adapter_rbac_rules(gpu_adapter_rules("dcgm-exporter", extra_rules=extra))
    assert {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]} in rbac["adapter"]
    assert "deployments.apps/FB_USED" in rbac["metrics_reader"][0]["resources"]
    # A computed name or a template resource cannot be listed: refused (tests/unit/plugins/filter/
    # test_adapter_rbac_no_wildcard.py), never widened to *.
    with pytest.raises(AnsibleFilterError, match="expects the adapter configuration"):
        adapter_rbac_rules([])


def _job(**kw) -> dict:
    return job_manifest("j", "default", "r1", "img:1", 1, None, {}, [], 60, None, [], None, **kw)["spec"]["template"]["spec"]


def test_verify_job_runs_unprivileged_with_runtime_default_seccomp():
    spec = _job()
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    ctx = spec["containers"][0]["securityContext"]
    assert ctx == {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]},
                   "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["automountServiceAccountToken"] is False
    assert "env" not in spec["containers"][0]  # GPUs from the device plugin, never NVIDIA_VISIBLE_DEVICES
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_verify_job_with_a_user_is_restricted():
    spec = _job(run_as_user=1000)
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True,
                                       "runAsUser": 1000}
