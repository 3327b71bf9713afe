"""What the private role k8s_apply and the module k8s_rollout_wait rely on in module_utils/_k8s_namespace.py and
_k8s_rollout.py."""
from __future__ import annotations

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_namespace import namespace_leftovers
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_rollout import deployment_rolled_out


def _obj(kind: str, name: str, **meta) -> dict:
    return {"kind": kind, "metadata": {"name": name, **meta}}


def test_leftovers_leave_out_defaults_removed_owned_and_terminating():
    results = [
        {"item": {"kind": "ConfigMap"}, "resources": [
            {"metadata": {"name": "kube-root-ca.crt"}},
            {"metadata": {"name": "counters"}},
            {"metadata": {"name": "planted"}}]},
        {"item": {"kind": "Pod"}, "resources": [
            {"metadata": {"name": "ds-x", "ownerReferences": [{"kind": "DaemonSet"}]}},
            {"metadata": {"name": "bare"}},
            {"metadata": {"name": "going", "deletionTimestamp": "now"}}]},
        {"item": {"kind": "ServiceMonitor"}, "skipped": True},
    ]
    left = namespace_leftovers(results, ["ConfigMap/kube-root-ca.crt"], [_obj("ConfigMap", "counters")])
    assert left == ["ConfigMap/planted", "Pod/bare"]


def test_leftovers_of_an_empty_namespace_are_none():
    assert namespace_leftovers([{"item": {"kind": "Secret"}, "resources": []}], [], []) == []
    assert namespace_leftovers([], None, None) == []


def test_deployment_rolled_out_needs_the_latest_spec_on_every_replica():
    dep = {"metadata": {"generation": 2}, "spec": {"replicas": 2},
           "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}}
    assert deployment_rolled_out(dep)
    assert not deployment_rolled_out({**dep, "status": {**dep["status"], "observedGeneration": 1}})
    assert not deployment_rolled_out({**dep, "status": {**dep["status"], "availableReplicas": 1}})
    assert not deployment_rolled_out({**dep, "status": {**dep["status"], "replicas": 3}})  # an old one still runs
    assert not deployment_rolled_out(None)
