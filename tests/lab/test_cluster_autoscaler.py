"""The cluster_autoscaler role against the lab's real API server (issue 22 item 2).

What runs for real: the role (server-side apply of the ServiceAccount, RBAC and Deployment), the lab's
kube-apiserver (validation, RBAC authorisation through SubjectAccessReview, Pod Security admission of the pod the
Deployment's ReplicaSet creates) and kube-controller-manager. What is not proven: the autoscaler itself against AWS
(the lab has no Auto Scaling groups; its pod "runs" on a kwok node, no image is pulled).
"""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from ansible_output import recap
from conftest import run

PS = {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")}


@pytest.fixture
def namespace(core):
    name = f"k8sgpu-ca-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": PS}})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def api(kubeconfig):
    c = config.new_client_from_config(config_file=kubeconfig)
    return {"apps": client.AppsV1Api(c), "rbac": client.RbacAuthorizationV1Api(c),
            "authz": client.AuthorizationV1Api(c), "core": client.CoreV1Api(c)}


def role(tmp_path: Path, extra: dict, *args: str) -> tuple[int, str, dict]:
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"name": "cluster-autoscaler", "hosts": "localhost", "connection": "local",
                                 "gather_facts": False, "roles": [{"role": "k8sgpu.nvidia.cluster_autoscaler"}]}]))
    vars_file = tmp_path / f"vars-{uuid.uuid4().hex[:6]}.json"
    vars_file.write_text(json.dumps(extra))
    proc = run(["ansible-playbook", "-i", "localhost,", str(play), "-e", f"@{vars_file}",
                "-e", "ansible_python_interpreter={{ ansible_playbook_python }}", *args],
               env_extra={"ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_NOCOLOR": "1"})
    out = proc.stdout + proc.stderr
    return proc.returncode, out, recap(proc.stdout).get("localhost", {})


def gone(fn, *args) -> bool:
    try:
        fn(*args)
    except client.ApiException as e:
        return e.status == 404
    return False


def can(api, ns: str, name: str, verb: str, resource: str, group: str = "", resource_name: str = "",
        namespace: str | None = None) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{ns}:{name}", groups=["system:serviceaccounts", f"system:serviceaccounts:{ns}"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group=group,
                                                        name=resource_name or None, namespace=namespace)))
    return api["authz"].create_subject_access_review(review).status.allowed


def test_cluster_autoscaler_objects_check_mode_second_run_and_absent(api, namespace, kubeconfig, tmp_path):
    name = f"k8sgpu-ca-{namespace[-6:]}"
    extra = {"cluster_autoscaler_name": name, "cluster_autoscaler_namespace": namespace,
             "cluster_autoscaler_cluster_name": "train", "cluster_autoscaler_aws_region": "eu-west-1",
             "cluster_autoscaler_irsa_role_arn": "arn:aws:iam::111122223333:role/train-ca",
             "cluster_autoscaler_kubeconfig": kubeconfig}

    # The lab's API server is 1.37: no release pinned for it, a clear failure naming the fix, nothing written.
    rc, out, stats = role(tmp_path, extra)
    msg = " ".join(out.split())
    assert rc != 0 and "Kubernetes minor '1.37' has no pinned cluster-autoscaler release" in msg, out[-3000:]
    assert "set cluster_autoscaler_image to registry.k8s.io/autoscaling/cluster-autoscaler:v1.37.N" in msg
    assert gone(api["apps"].read_namespaced_deployment, name, namespace)

    # A minor the role pins: the image follows it.
    extra["cluster_autoscaler_kubernetes_version"] = "1.33"
    rc, out, stats = role(tmp_path, extra, "--check")
    assert rc == 0 and stats["changed"] == 1, out[-3000:]
    assert gone(api["apps"].read_namespaced_deployment, name, namespace), "check mode wrote the Deployment"
    assert gone(api["rbac"].read_cluster_role, name)

    rc, out, stats = role(tmp_path, extra)
    assert rc == 0 and stats["changed"] == 1, out[-3000:]
    dep = api["apps"].read_namespaced_deployment(name, namespace)
    c = dep.spec.template.spec.containers[0]
    assert c.image == "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0"
    assert "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/train" \
        in c.args
    assert {"--scale-down-enabled=true", "--scale-down-unneeded-time=5m", "--expander=least-waste",
            "--balance-similar-node-groups=true"} <= set(c.args)
    assert [(e.name, e.value) for e in c.env] == [("AWS_REGION", "eu-west-1")]
    assert c.security_context.read_only_root_filesystem and c.security_context.capabilities.drop == ["ALL"]
    sa = api["core"].read_namespaced_service_account(name, namespace)
    assert sa.metadata.annotations["eks.amazonaws.com/role-arn"] == "arn:aws:iam::111122223333:role/train-ca"
    # Pod Security (restricted) admitted the pod the ReplicaSet made.
    end = time.monotonic() + 60
    while time.monotonic() < end and not api["core"].list_namespaced_pod(namespace).items:
        time.sleep(1)
    assert api["core"].list_namespaced_pod(namespace).items, api["core"].list_namespaced_event(namespace).items[-3:]

    # What the ServiceAccount may do: the autoscaler's needs, not more.
    assert can(api, namespace, name, "update", "nodes")
    assert can(api, namespace, name, "create", "pods/eviction", namespace="default")
    assert can(api, namespace, name, "update", "leases", "coordination.k8s.io", name, namespace)
    assert can(api, namespace, name, "update", "configmaps", resource_name="cluster-autoscaler-status",
               namespace=namespace)
    assert not can(api, namespace, name, "delete", "nodes")
    assert not can(api, namespace, name, "get", "secrets", namespace=namespace)
    assert not can(api, namespace, name, "update", "leases", "coordination.k8s.io", "kube-scheduler", namespace)
    assert not can(api, namespace, name, "update", "configmaps", resource_name="other", namespace=namespace)

    rc, out, stats = role(tmp_path, extra)
    assert rc == 0 and stats["changed"] == 0, out[-3000:]
    rc, out, stats = role(tmp_path, extra, "--check")
    assert rc == 0 and stats["changed"] == 0, out[-3000:]

    rc, out, stats = role(tmp_path, {**extra, "cluster_autoscaler_state": "absent"})
    assert rc == 0 and stats["changed"] == 1, out[-3000:]
    assert gone(api["apps"].read_namespaced_deployment, name, namespace)
    assert gone(api["rbac"].read_cluster_role, name) and gone(api["rbac"].read_cluster_role_binding, name)
    assert gone(api["rbac"].read_namespaced_role, name, namespace)
    assert gone(api["core"].read_namespaced_service_account, name, namespace)
    rc, out, stats = role(tmp_path, {**extra, "cluster_autoscaler_state": "absent"})
    assert rc == 0 and stats["changed"] == 0, out[-3000:]
