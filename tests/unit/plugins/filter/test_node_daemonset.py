from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._node_daemonset import NodeDaemonSetError, node_daemonset

POD = {"containers": [{"name": "agent", "image": "registry.example/agent:1.0"}],
       "volumes": [{"name": "dev", "hostPath": {"path": "/dev/null", "type": "CharDevice"}}]}
LABELS = {"app.kubernetes.io/name": "agent", "app.kubernetes.io/instance": "agent"}
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_the_shared_daemonset_with_every_optional_setting():
    ds = node_daemonset(POD, "agent", "kube-system", LABELS, "v1.0", "nvidia.com/gpu.present", [GPU_TAINT],
                        "system-node-critical", "nvidia", ["regcred"], {"k8sgpu.nvidia/config-sha256": "abc"})
    assert ds["apiVersion"] == "apps/v1" and ds["kind"] == "DaemonSet"
    assert ds["metadata"] == {"name": "agent", "namespace": "kube-system",
                              "labels": {**LABELS, "app.kubernetes.io/version": "v1.0",
                                         "app.kubernetes.io/managed-by": "k8sgpu.nvidia"}}
    assert ds["spec"]["selector"] == {"matchLabels": LABELS}
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    template = ds["spec"]["template"]
    assert template["metadata"] == {"labels": LABELS, "annotations": {"k8sgpu.nvidia/config-sha256": "abc"}}
    assert template["spec"] == {
        "priorityClassName": "system-node-critical",
        "runtimeClassName": "nvidia",
        "automountServiceAccountToken": False,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}},
        "tolerations": [GPU_TAINT],
        "imagePullSecrets": [{"name": "regcred"}],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        **POD,
    }


def test_optional_settings_left_out_when_empty():
    ds = node_daemonset(POD, "agent", "ns", LABELS, "1", "gpu", [], "system-node-critical")
    spec = ds["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec and "imagePullSecrets" not in spec
    assert ds["spec"]["template"]["metadata"] == {"labels": LABELS}
    # The selector and the labels are copies: changing one does not change the others.
    ds["spec"]["selector"]["matchLabels"]["x"] = "y"
    assert "x" not in ds["spec"]["template"]["metadata"]["labels"] and "x" not in LABELS


def test_the_pods_own_fields_win():
    pod = {**POD, "securityContext": {"runAsUser": 0}, "hostPID": True}
    spec = node_daemonset(pod, "agent", "ns", LABELS, "1", "gpu", [], "p")["spec"]["template"]["spec"]
    assert spec["securityContext"] == {"runAsUser": 0} and spec["hostPID"] is True


@pytest.mark.parametrize("args, message", [
    (({"volumes": []}, "a", "ns", LABELS, "1", "gpu", [], "p"), "pod's spec"),
    ((POD, "a", "ns", {}, "1", "gpu", [], "p"), "labels must be a non-empty dict"),
    ((POD, "", "ns", LABELS, "1", "gpu", [], "p"), "name must be a non-empty string"),
    ((POD, "a", "ns", LABELS, "1", "gpu", "nvidia.com/gpu", "p"), "tolerations must be a list"),
    ((POD, "a", "ns", LABELS, "1", "gpu", [], "p", "", "regcred"), "pull_secrets must be a list"),
    ((POD, "a", "ns", LABELS, "1", "gpu", [], "p", "", [], ["x"]), "annotations must be a dict"),
])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(NodeDaemonSetError, match=message):
        node_daemonset(*args)
