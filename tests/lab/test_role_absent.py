"""state: absent for the Kubernetes roles that go through the private role k8s_apply, against the lab's real API server:
snapshot the cluster's objects of the kinds the role makes, create with the role, plant an unrelated object in the
same namespace, remove with state=absent (check mode first: nothing changes), compare with the snapshot. The planted
object survives and keeps the namespace the role created; once it is gone, the namespace goes too; a second removal
changes nothing."""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, dynamic

from ansible_output import recap
from conftest import GPU_NODES, KUBECTL, run

# The kinds the converted roles make, and the Namespaces.
KINDS = [("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "Service"), ("v1", "Secret"), ("v1", "ServiceAccount"),
         ("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("autoscaling/v2", "HorizontalPodAutoscaler"),
         ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
         ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("apiregistration.k8s.io/v1", "APIService"),
         ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")]
# Karpenter's kinds, looked at only by the karpenter_gpu test (its CRDs come and go with the test).
KARPENTER_KINDS = [("karpenter.sh/v1", "NodePool"), ("karpenter.k8s.aws/v1", "EC2NodeClass")]
# Karpenter's own AWS CRDs (v1.14.1), from ../shared (not committed), as tests/lab/test_karpenter.py uses them.
KARPENTER_CRDS = Path(__file__).resolve().parents[3] / "shared" / "crds" / "karpenter"


def role(name: str, extra: dict, *args: str):
    return run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "-e", f"role={name}",
                "-e", json.dumps(extra), *args])


def changed(res) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


@pytest.fixture(scope="module")
def dyn(core) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(core.api_client)


def snapshot(dyn: dynamic.DynamicClient, namespace: str, kinds: list | None = None) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every cluster-scoped object of KINDS, of the namespaced ones in the test's namespace,
    the RoleBindings in kube-system (the adapter's), and the test's Namespace (other tests' namespaces come and go);
    kinds the cluster does not serve have none, and objects being deleted do not count."""
    out = set()
    for api_version, kind in kinds or KINDS:
        try:
            res = dyn.resources.get(api_version=api_version, kind=kind)
        except dynamic.exceptions.ResourceNotFoundError:
            continue
        for item in res.get().to_dict().get("items") or []:
            meta = item["metadata"]
            ns = meta.get("namespace") or namespace
            if meta.get("deletionTimestamp") or (ns != namespace and (kind, ns) != ("RoleBinding", "kube-system")):
                continue
            if kind == "Namespace" and meta["name"] != namespace:
                continue
            out.add((kind, meta.get("namespace") or "", meta["name"]))
    return out


def wait_gone(core, namespace: str) -> None:
    for _attempt in range(300):
        try:
            core.read_namespace(namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.2)
    raise AssertionError(f"namespace {namespace} not deleted after 60 s")


def wait_namespace_defaults(core, namespace: str) -> None:
    """Until Kubernetes' own objects of a new namespace (kube-root-ca.crt, ServiceAccount default) exist: the
    controllers add them shortly after the namespace is created, possibly after the role has finished."""
    for _attempt in range(150):
        try:
            core.read_namespaced_config_map("kube-root-ca.crt", namespace)
            core.read_namespaced_service_account("default", namespace)
            return
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.2)
    raise AssertionError(f"namespace {namespace}: no kube-root-ca.crt or ServiceAccount default after 30 s")


def create_namespace(core, namespace: str) -> None:
    """A namespace made by the test, once Kubernetes' own objects are in it (so that the test's snapshot before the
    role runs already holds them)."""
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_namespace_defaults(core, namespace)


def plant(core, namespace: str) -> str:
    name = f"planted-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name),
                                                                    data={"owner": "someone else"}))
    return name


def remove_and_compare(dyn, core, name: str, extra: dict, before: set, namespace: str, plant_it: bool = True,
                       kinds: list | None = None) -> None:
    """The removal sequence every role goes through (see the module's docstring)."""
    created = snapshot(dyn, namespace, kinds)
    if ("Namespace", "", namespace) in created - before:
        # A namespace the role created: its Kubernetes-made objects may appear after the role's run.
        wait_namespace_defaults(core, namespace)
        created = snapshot(dyn, namespace, kinds)
    assert created - before, f"{name} created nothing"
    planted = plant(core, namespace) if plant_it else None
    absent = {**extra, f"{name}_state": "absent"}

    check = role(name, absent, "--check")
    assert check.returncode == 0, check.stdout[-3000:]
    assert changed(check) > 0, check.stdout[-3000:]
    assert snapshot(dyn, namespace, kinds) == created | ({("ConfigMap", namespace, planted)} if planted else set())

    gone = role(name, absent)
    assert gone.returncode == 0, gone.stdout[-3000:]
    after = snapshot(dyn, namespace, kinds)
    if planted:
        # The planted object survives, and keeps the namespace the role created.
        assert after == before | {("Namespace", "", namespace), ("ConfigMap", namespace, planted),
                                  ("ConfigMap", namespace, "kube-root-ca.crt"),
                                  ("ServiceAccount", namespace, "default")}, sorted(after ^ before)
        assert f"Namespace {namespace} stays: it still holds ConfigMap/{planted}" in " ".join(gone.stdout.split())
        again = role(name, absent)
        assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
        core.delete_namespaced_config_map(planted, namespace)
        last = role(name, absent)
        assert last.returncode == 0 and changed(last) == 1, last.stdout[-3000:]
        wait_gone(core, namespace)
        after = snapshot(dyn, namespace, kinds)
    assert after == before, sorted(after ^ before)
    again = role(name, absent)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]


@pytest.fixture
def fresh_namespace(core):
    ns = f"k8sgpu-absent-{uuid.uuid4().hex[:6]}"
    yield ns
    try:
        core.delete_namespace(ns)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def test_dcgm_exporter_absent(dyn, core, fresh_namespace, tmp_path):
    extra = {"dcgm_exporter_namespace": fresh_namespace, "dcgm_exporter_wait": False,
             "dcgm_exporter_scrape_config_path": str(tmp_path / "scrape.yml")}
    before = snapshot(dyn, fresh_namespace)
    res = role("dcgm_exporter", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert (tmp_path / "scrape.yml").is_file() or ("ServiceMonitor", fresh_namespace, "dcgm-exporter") in snapshot(dyn, fresh_namespace)
    remove_and_compare(dyn, core, "dcgm_exporter", extra, before, fresh_namespace)
    assert not (tmp_path / "scrape.yml").exists()


def test_gpu_dashboard_absent(dyn, core, fresh_namespace):
    extra = {"gpu_dashboard_namespace": fresh_namespace}
    before = snapshot(dyn, fresh_namespace)
    res = role("gpu_dashboard", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    remove_and_compare(dyn, core, "gpu_dashboard", extra, before, fresh_namespace)


def test_gpu_alerts_absent_rules_file(dyn, core, fresh_namespace, tmp_path):
    """Without the PrometheusRule CRD the role writes a file, and touches no namespace."""
    path = tmp_path / "rules.yml"
    extra = {"gpu_alerts_namespace": fresh_namespace, "gpu_alerts_rules_file_path": str(path),
             "gpu_alerts_prometheus_rule": "never"}
    before = snapshot(dyn, fresh_namespace)
    res = role("gpu_alerts", extra)
    assert res.returncode == 0 and path.is_file(), res.stdout[-3000:]
    assert snapshot(dyn, fresh_namespace) == before
    gone = role("gpu_alerts", {**extra, "gpu_alerts_state": "absent"})
    assert gone.returncode == 0 and changed(gone) == 1 and not path.exists(), gone.stdout[-3000:]
    assert snapshot(dyn, fresh_namespace) == before
    again = role("gpu_alerts", {**extra, "gpu_alerts_state": "absent"})
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]


def test_gpu_metrics_adapter_absent(dyn, core, fresh_namespace):
    before = snapshot(dyn, fresh_namespace)
    if any(kind == "APIService" and name.endswith("custom.metrics.k8s.io") for kind, _namespace, name in before):
        pytest.skip("a custom metrics APIService is registered in the lab already (another test's adapter)")
    extra = {"gpu_metrics_adapter_namespace": fresh_namespace, "gpu_metrics_adapter_wait": False,
             "gpu_metrics_adapter_prometheus_check": "none", "gpu_metrics_adapter_name": "absent-adapter"}
    res = role("gpu_metrics_adapter", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert ("Secret", fresh_namespace, "absent-adapter-serving-cert") in snapshot(dyn, fresh_namespace)
    remove_and_compare(dyn, core, "gpu_metrics_adapter", extra, before, fresh_namespace)


def test_gpu_autoscaling_absent(dyn, core, fresh_namespace):
    """The HPA goes; the workload it scaled, in the same namespace, stays."""
    create_namespace(core, fresh_namespace)
    apps = client.AppsV1Api(core.api_client)
    labels = {"app": "gpu-work"}
    apps.create_namespaced_deployment(fresh_namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="gpu-work"),
        spec=client.V1DeploymentSpec(replicas=0, selector=client.V1LabelSelector(match_labels=labels),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels=labels),
                                         spec=client.V1PodSpec(containers=[client.V1Container(name="w", image="w")])))))
    extra = {"gpu_autoscaling_namespace": fresh_namespace, "gpu_autoscaling_target_name": "gpu-work",
             "gpu_autoscaling_check_metrics_api": False}
    before = snapshot(dyn, fresh_namespace)
    res = role("gpu_autoscaling", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert snapshot(dyn, fresh_namespace) - before == {("HorizontalPodAutoscaler", fresh_namespace, "gpu-work")}
    remove_and_compare(dyn, core, "gpu_autoscaling", extra, before, fresh_namespace, plant_it=False)
    assert apps.read_namespaced_deployment("gpu-work", fresh_namespace).metadata.name == "gpu-work"


def own_namespace(core, namespace: str) -> str:
    """The namespace made by the test (roles that never create one), with an object of someone else's in it."""
    create_namespace(core, namespace)
    return plant(core, namespace)


def test_device_plugin_absent(dyn, core, fresh_namespace):
    """The ConfigMap and the DaemonSet go; the namespace and what else is in it stay."""
    planted = own_namespace(core, fresh_namespace)
    extra = {"device_plugin_namespace": fresh_namespace, "device_plugin_wait": False}
    before = snapshot(dyn, fresh_namespace)
    res = role("device_plugin", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert snapshot(dyn, fresh_namespace) - before == {
        ("ConfigMap", fresh_namespace, "nvidia-device-plugin-daemonset-config"),
        ("DaemonSet", fresh_namespace, "nvidia-device-plugin-daemonset")}
    remove_and_compare(dyn, core, "device_plugin", extra, before, fresh_namespace, plant_it=False)
    assert ("ConfigMap", fresh_namespace, planted) in snapshot(dyn, fresh_namespace)


def test_gke_driver_installer_absent(dyn, core, fresh_namespace):
    planted = own_namespace(core, fresh_namespace)
    extra = {"gke_driver_installer_namespace": fresh_namespace}
    before = snapshot(dyn, fresh_namespace)
    res = role("gke_driver_installer", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    assert snapshot(dyn, fresh_namespace) - before == {("DaemonSet", fresh_namespace, "nvidia-driver-installer")}
    remove_and_compare(dyn, core, "gke_driver_installer", extra, before, fresh_namespace, plant_it=False)
    assert ("ConfigMap", fresh_namespace, planted) in snapshot(dyn, fresh_namespace)


@pytest.fixture
def karpenter_crds():
    """Karpenter's AWS CRDs, installed for the test when the lab does not have them (and removed after)."""
    # Asked of the API server, not of a client's discovery cache, which can still list the CRD of an earlier lab.
    installed = run([*KUBECTL, "get", "crd", "nodepools.karpenter.sh"]).returncode != 0
    if installed:
        if not KARPENTER_CRDS.is_dir():
            pytest.skip(f"{KARPENTER_CRDS} is absent: Karpenter's AWS CRDs come from ../shared (not committed)")
        for args in (["apply", "--server-side", "--force-conflicts", "-f", str(KARPENTER_CRDS)],
                     ["wait", "--for", "condition=Established", "--timeout", "60s", "-f", str(KARPENTER_CRDS)]):
            res = run([*KUBECTL, *args])
            assert res.returncode == 0, res.stderr
    yield
    if installed:
        run([*KUBECTL, "delete", "--ignore-not-found", "--wait", "--timeout", "120s", "-f", str(KARPENTER_CRDS)])


def karpenter_extra(name: str) -> dict:
    return {"karpenter_gpu_nodepool_name": name, "karpenter_gpu_ec2nodeclass_name": name,
            "karpenter_gpu_cluster_name": "train", "karpenter_gpu_node_role": "KarpenterNodeRole-train"}


def test_karpenter_gpu_absent(dyn, core, karpenter_crds, fresh_namespace):
    """The role's NodePool and EC2NodeClass go; another pool (made by the role under other names) stays."""
    kinds = KINDS + KARPENTER_KINDS
    other = karpenter_extra(f"k8sgpu-other-{uuid.uuid4().hex[:6]}")
    ours = karpenter_extra(f"k8sgpu-absent-{uuid.uuid4().hex[:6]}")
    try:
        res = role("karpenter_gpu", other)
        assert res.returncode == 0, res.stdout[-3000:]
        before = snapshot(dyn, fresh_namespace, kinds)
        assert ("NodePool", "", other["karpenter_gpu_nodepool_name"]) in before
        res = role("karpenter_gpu", ours)
        assert res.returncode == 0, res.stdout[-3000:]
        name = ours["karpenter_gpu_nodepool_name"]
        assert snapshot(dyn, fresh_namespace, kinds) - before == {("NodePool", "", name), ("EC2NodeClass", "", name)}
        remove_and_compare(dyn, core, "karpenter_gpu", ours, before, fresh_namespace, plant_it=False, kinds=kinds)
    finally:
        role("karpenter_gpu", {**other, "karpenter_gpu_state": "absent"})
        role("karpenter_gpu", {**ours, "karpenter_gpu_state": "absent"})


# --- node_labels: labels on the lab's GPU Nodes, not objects -------------------------------------------------------

def _role_keys(labels: dict) -> dict:
    """The labels node_labels may set (its GPU labels, GFD's names, the test's)."""
    return {k: v for k, v in labels.items()
            if k in ("gpu", "role", "team") or k.startswith(("nvidia.com/gpu.", "nvidia.com/cuda."))}


def _node_state(core) -> dict:
    out = {}
    for name in GPU_NODES:
        node = core.read_node(name)
        out[name] = (dict(node.metadata.labels or {}),
                     sorted((t.key, t.value, t.effect) for t in node.spec.taints or []))
    return out


@pytest.fixture
def gpu_nodes_without_role_labels(core):
    """The GPU Nodes without the labels and taint node_labels sets, and with a label of someone else's; as they were
    after the test."""
    start = _node_state(core)
    for name, (labels, _taints) in start.items():
        core.patch_node(name, {"metadata": {"labels": {**{k: None for k in _role_keys(labels)},
                                                       "k8sgpu-test/keep": "yes"}}})
    yield
    for name, (labels, taints) in start.items():
        now = core.read_node(name).metadata.labels or {}
        body = {k: None for k in _role_keys(now)}
        body.update(_role_keys(labels))
        body["k8sgpu-test/keep"] = labels.get("k8sgpu-test/keep")
        core.patch_node(name, {"metadata": {"labels": body}})
        core.patch_node(name, {"spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints] or None}})


def test_node_labels_absent(core, gpu_nodes_without_role_labels):
    """state=absent removes exactly the labels (and the taint) the role set; every other label stays."""
    extra = {"node_labels_labels": {"role": "absent-test"}, "k8sgpu_node_labels": {"team": "t"},
             "node_labels_taint": "present"}
    before = _node_state(core)
    res = role("node_labels", extra)
    assert res.returncode == 0 and changed(res) == 1, res.stdout[-3000:]
    created = _node_state(core)
    for name in GPU_NODES:
        labels, taints = created[name]
        assert {k: labels.get(k) for k in ("gpu", "nvidia.com/gpu.present", "role", "team", "k8sgpu-test/keep")} == {
            "gpu": "true", "nvidia.com/gpu.present": "true", "role": "absent-test", "team": "t", "k8sgpu-test/keep": "yes"}
        assert ("nvidia.com/gpu", "present", "NoSchedule") in taints

    absent = {**extra, "node_labels_state": "absent"}
    check = role("node_labels", absent, "--check")
    assert check.returncode == 0 and changed(check) == 1, check.stdout[-3000:]
    assert _node_state(core) == created

    gone = role("node_labels", absent)
    assert gone.returncode == 0 and changed(gone) == 1, gone.stdout[-3000:]
    assert _node_state(core) == before
    again = role("node_labels", absent)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
