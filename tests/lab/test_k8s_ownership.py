"""Issue 34.8 against the lab's real kube-apiserver: the private role k8s_apply (here through gpu_dashboard, whose one
object is a ConfigMap) neither takes over nor deletes an object another field manager made - server-side apply with
field manager ``helm`` (what Helm 4 does), or a Helm 3 release's labels and annotations - and says which and how to
allow it; with ``-e _k8s_apply_take_over=true`` it takes it over (state present) and deletes it (state absent). 1.0.0
force-applied over the object and deleted it by name."""
from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import KUBECTL, run

NAME = "k8sgpu-gpu-dashboard"  # gpu_dashboard_name's default: the ConfigMap the role applies


def role(extra: dict, *args: str):
    cmd = ["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "-e", "role=gpu_dashboard",
           "-e", json.dumps(extra)]
    return run(cmd + list(args))


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def namespace(core):
    name = f"own-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def apply_as(manager: str, body: dict) -> None:
    res = run([*KUBECTL, "apply", "--server-side", f"--field-manager={manager}", "-f", "-"], input=json.dumps(body))
    assert res.returncode == 0, res.stderr


def managers(core, ns: str) -> set:
    cm = core.read_namespaced_config_map(NAME, ns)
    return {(f.manager, f.operation) for f in cm.metadata.managed_fields or []}


def test_helms_object_is_neither_taken_over_nor_deleted_unless_asked(core, namespace):
    apply_as("helm", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": namespace},
                      "data": {"helm.json": "{}"}})
    extra = {"gpu_dashboard_namespace": namespace}
    before = core.read_namespaced_config_map(NAME, namespace)

    for args in ((), ("--check",), ("-e", "gpu_dashboard_state=absent")):
        res = role(extra, *args)
        out = flat(res.stdout)
        assert res.returncode != 0, out[-3000:]
        assert f"ConfigMap {namespace}/{NAME}: it was created by another field manager (helm)" in out, out[-3000:]
        assert "_k8s_apply_take_over=true" in out and "Nothing was changed" in out
        assert ("would delete" if args and "absent" in args[-1] else "would take over") in out
        after = core.read_namespaced_config_map(NAME, namespace)  # still there, untouched
        assert after.metadata.resource_version == before.metadata.resource_version
    assert managers(core, namespace) == {("helm", "Apply")}

    res = role(extra, "-e", "_k8s_apply_take_over=true")
    assert res.returncode == 0, flat(res.stdout)[-3000:]
    cm = core.read_namespaced_config_map(NAME, namespace)
    assert ("k8sgpu.nvidia", "Apply") in managers(core, namespace) and "k8sgpu-gpu-dashboard.json" in cm.data
    # Taken over when asked: the collection's from then on.
    again = role(extra)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0, flat(again.stdout)[-3000:]


def test_a_helm3_release_object_is_not_deleted_unless_asked(core, namespace):
    core.create_namespaced_config_map(namespace, {
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/managed-by": "Helm"},
                     "annotations": {"meta.helm.sh/release-name": "dash",
                                     "meta.helm.sh/release-namespace": namespace}},
        "data": {"x": "y"}})
    extra = {"gpu_dashboard_namespace": namespace, "gpu_dashboard_state": "absent"}
    res = role(extra)
    assert res.returncode != 0
    assert "its label app.kubernetes.io/managed-by is 'Helm'" in flat(res.stdout), flat(res.stdout)[-3000:]
    core.read_namespaced_config_map(NAME, namespace)  # still there

    res = role(extra, "-e", "_k8s_apply_take_over=true")
    assert res.returncode == 0, flat(res.stdout)[-3000:]
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_config_map(NAME, namespace)
    assert gone.value.status == 404


def test_the_collections_own_object_is_applied_and_deleted_as_before(core, namespace):
    extra = {"gpu_dashboard_namespace": namespace}
    res = role(extra)
    assert res.returncode == 0, flat(res.stdout)[-3000:]
    assert ("k8sgpu.nvidia", "Apply") in managers(core, namespace)
    res = role({**extra, "gpu_dashboard_state": "absent"})
    assert res.returncode == 0, flat(res.stdout)[-3000:]
    with pytest.raises(client.ApiException):
        core.read_namespaced_config_map(NAME, namespace)
