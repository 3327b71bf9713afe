"""Least privilege for the workloads the roles create (issue 19), read from the lab's real API server, whose
PodSecurity admission plugin (on by default) enforces the namespaces' labels:

- the namespaces the roles create carry Pod Security labels at the strictest level their pods pass, the API server
  refuses a pod that violates the level there and admits the role's own pods;
- the DCGM exporter: a namespace of its own, privileged (hostPath), its pods unprivileged with RuntimeDefault
  seccomp even with profiling; a namespace enforcing baseline is named as the reason it cannot run there;
- the metrics adapter in the cluster: restricted namespace and pods, ClusterRoles without wildcards, the APIServices
  verified by the CA of the serving certificate the role keeps in a Secret, not remade on a second run;
- the verify Job: RuntimeDefault seccomp, no capability; restricted with a non-root user, refused without one in a
  namespace that enforces restricted (and the reason says so).

The aggregator's use of the CA against the real prometheus-adapter is in test_monitoring_chain.py.
"""
from __future__ import annotations

import base64
import json
import time

import pytest
import yaml
from kubernetes import client

from conftest import GPU_NODES, ROOT
from k8sgpu_testlib.k8s_api import ignore_404
# gpu_labelled is a fixture, found by pytest by name.
from test_dcgm_exporter import changed, flat, gpu_labelled, role  # noqa: F401  # pylint: disable=unused-import
from test_verify import verify

PSA = "pod-security.kubernetes.io/"
NS_EXPORTER = "k8sgpu-lp-exporter"
NS_BASELINE = "k8sgpu-lp-baseline"
NS_ADAPTER = "k8sgpu-lp-adapter"
NS_VERIFY = "k8sgpu-lp-verify"
ADAPTER = "prometheus-adapter-lp"


def psa_labels(ns: client.V1Namespace) -> dict:
    return {k: v for k, v in (ns.metadata.labels or {}).items() if k.startswith(PSA)}


def levels(level: str) -> dict:
    return {f"{PSA}{mode}{suffix}": value for mode in ("enforce", "audit", "warn")
            for suffix, value in (("", level), ("-version", "latest"))}


def delete_namespace(core, name: str) -> None:
    ignore_404(core.delete_namespace, name)
    for _attempt in range(300):
        try:
            core.read_namespace(name)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.2)
    raise AssertionError(f"namespace {name} not deleted after 60 s")


@pytest.fixture(scope="module")
def deleted_by_the_end(core):
    """Namespaces a test deleted without waiting (the API server takes 2-10 s per namespace, while the next tests
    run): each is gone before the next test file starts."""
    names: list[str] = []
    yield names
    for name in names:
        delete_namespace(core, name)


@pytest.fixture
def fresh(core, deleted_by_the_end):
    """Namespaces absent before the test (waited for) and deleted after it (gone by the end of this file)."""
    made = []

    def make(name: str) -> str:
        delete_namespace(core, name)
        made.append(name)
        return name

    yield make
    for name in made:
        ignore_404(core.delete_namespace, name)
        deleted_by_the_end.append(name)


def bare_pod(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}], **spec}}


def refused(core, namespace: str, pod: dict) -> str:
    """The API server's message refusing the pod (fails the test when it is admitted)."""
    try:
        core.create_namespaced_pod(namespace, pod)
    except client.ApiException as exc:
        assert exc.status == 403, exc
        return json.loads(exc.body)["message"]
    core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)
    raise AssertionError(f"pod {pod['metadata']['name']} was admitted in {namespace}")


# --- defaults -----------------------------------------------------------------------------------------------------

def _defaults(name: str) -> dict:
    return yaml.safe_load((ROOT / "roles" / name / "defaults" / "main.yml").read_text())


def test_the_exporter_lives_apart_from_the_adapter_by_default():
    exporter = _defaults("dcgm_exporter")["dcgm_exporter_namespace"]
    adapter = _defaults("gpu_metrics_adapter")["gpu_metrics_adapter_namespace"]
    assert exporter != adapter
    # Inventories that set one namespace keep them apart too.
    for group_vars in sorted((ROOT / "inventories").glob("**/group_vars/**/*.yml")):
        data = yaml.safe_load(group_vars.read_text()) or {}
        ns = (data.get("dcgm_exporter_namespace", exporter), data.get("gpu_metrics_adapter_namespace", adapter))
        assert ns[0] != ns[1], group_vars


# --- the DCGM exporter ----------------------------------------------------------------------------------------

def test_exporter_namespace_is_privileged_and_its_pods_keep_runtime_default(core, gpu_labelled, fresh, tmp_path):
    ns = fresh(NS_EXPORTER)
    extra = {"dcgm_exporter_namespace": ns, "dcgm_exporter_wait_timeout": 120, "dcgm_exporter_service_monitor": "never",
             "dcgm_exporter_scrape_config_path": str(tmp_path / "scrape.yml")}
    res = role("dcgm_exporter", extra)
    assert res.returncode == 0, res.stdout[-4000:]
    live = core.read_namespace(ns)
    assert psa_labels(live) == levels("privileged")
    assert live.metadata.labels["app.kubernetes.io/managed-by"] == "k8sgpu.nvidia"
    # The role's pods were admitted; each live pod (not only the template) is unprivileged with RuntimeDefault,
    # profiling on (the default), so SYS_ADMIN and nothing else.
    pods = [p for p in core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/name=dcgm-exporter").items
            if not p.metadata.deletion_timestamp]
    assert set(GPU_NODES) <= {p.spec.node_name for p in pods}
    for pod in pods:
        ctr = pod.spec.containers[0]
        assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        assert ctr.security_context.seccomp_profile.type == "RuntimeDefault"
        assert ctr.security_context.privileged is False and ctr.security_context.allow_privilege_escalation is False
        assert ctr.security_context.capabilities.add == ["SYS_ADMIN"]
        assert ctr.security_context.capabilities.drop == ["ALL"]
        mounts = {m.mount_path: m.name for m in ctr.volume_mounts}
        assert "/var/run/nvidia-container-devices/all" in mounts
        assert not any(e.name == "NVIDIA_VISIBLE_DEVICES" and e.value != "all" for e in ctr.env)
    again = role("dcgm_exporter", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]


def test_a_namespace_enforcing_baseline_refuses_the_exporter_and_the_role_says_why(core, fresh, tmp_path):
    ns = fresh(NS_BASELINE)
    core.create_namespace({"metadata": {"name": ns, "labels": {f"{PSA}enforce": "baseline"}}})
    # The API server enforces it: a pod with a hostPath volume (as the exporter's) is refused.
    body = refused(core, ns, bare_pod("hostpath", volumes=[{"name": "h", "hostPath": {"path": "/dev/null"}}]))
    assert 'violates PodSecurity "baseline:latest"' in body and "hostPath" in body, body
    res = role("dcgm_exporter", {"dcgm_exporter_namespace": ns, "dcgm_exporter_wait": False,
                                 "dcgm_exporter_scrape_config_path": str(tmp_path / "scrape.yml")})
    assert res.returncode != 0
    assert (f"namespace {ns} enforces Pod Security level baseline, but these pods need privileged"
            in flat(res.stdout)), flat(res.stdout)[-2000:]
    assert not client.AppsV1Api(core.api_client).list_namespaced_daemon_set(ns).items
    assert psa_labels(core.read_namespace(ns)) == {f"{PSA}enforce": "baseline"}  # left as the site set it


# --- the metrics adapter in the cluster ------------------------------------------------------------------------

@pytest.fixture
def adapter_cleanup(core):
    api = core.api_client
    reg = client.ApiregistrationV1Api(api)
    if any(s.spec.group == "custom.metrics.k8s.io" for s in reg.list_api_service().items):
        pytest.skip("a custom metrics adapter is registered in this cluster; the role would replace its APIServices")
    yield
    rbac = client.RbacAuthorizationV1Api(api)
    for version in ("v1beta1", "v1beta2"):
        ignore_404(reg.delete_api_service, f"{version}.custom.metrics.k8s.io")
    for name in ("custom-metrics-reader", "resource-reader"):
        ignore_404(rbac.delete_cluster_role, f"k8sgpu:{ADAPTER}:{name}")
    for name in ("hpa-custom-metrics", "resource-reader", "auth-delegator"):
        ignore_404(rbac.delete_cluster_role_binding, f"k8sgpu:{ADAPTER}:{name}")
    ignore_404(rbac.delete_namespaced_role_binding, f"k8sgpu:{ADAPTER}:auth-reader", "kube-system")


def test_adapter_in_cluster_restricted_least_rbac_and_verified_by_ca(core, fresh, adapter_cleanup, tmp_path):
    ns = fresh(NS_ADAPTER)
    api = core.api_client
    extra = {"gpu_metrics_adapter_mode": "in_cluster", "gpu_metrics_adapter_namespace": ns,
             "gpu_metrics_adapter_name": ADAPTER, "gpu_metrics_adapter_prometheus_check": "none",
             "gpu_metrics_adapter_wait": False}
    check = role("gpu_metrics_adapter", extra, "--check")
    assert check.returncode == 0 and changed(check) > 0, check.stdout[-3000:]
    with pytest.raises(client.ApiException):
        core.read_namespace(ns)  # check mode created nothing
    res = role("gpu_metrics_adapter", extra)
    assert res.returncode == 0, res.stdout[-4000:]
    assert "PRIVATE KEY" not in res.stdout

    assert psa_labels(core.read_namespace(ns)) == levels("restricted")
    # Enforced: a pod without the restricted security context is refused there ...
    body = refused(core, ns, bare_pod("plain"))
    assert 'violates PodSecurity "restricted:latest"' in body, body
    # ... and the adapter's own pods are admitted (the ReplicaSet made them).
    pods = []
    for _attempt in range(150):
        pods = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={ADAPTER}").items
        if pods:
            break
        time.sleep(0.2)
    assert pods, [rs.status.conditions for rs in client.AppsV1Api(api).list_namespaced_replica_set(ns).items]
    pod = pods[0]
    assert pod.spec.security_context.run_as_non_root is True
    assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    ctr = pod.spec.containers[0]
    assert ctr.security_context.capabilities.drop == ["ALL"] and ctr.security_context.allow_privilege_escalation is False
    assert "--tls-cert-file=/var/run/serving-cert/tls.crt" in ctr.args

    # RBAC: what the rules read, no wildcard.
    rbac = client.RbacAuthorizationV1Api(api)
    reader = rbac.read_cluster_role(f"k8sgpu:{ADAPTER}:resource-reader")
    assert [(r.api_groups, r.resources, r.verbs) for r in reader.rules] == [
        ([""], ["namespaces", "pods", "services"], ["get", "list", "watch"])]
    metrics = rbac.read_cluster_role(f"k8sgpu:{ADAPTER}:custom-metrics-reader")
    assert [(r.api_groups, r.resources, r.verbs) for r in metrics.rules] == [
        (["custom.metrics.k8s.io"], ["pods/DCGM_FI_DEV_GPU_UTIL", "services/DCGM_FI_DEV_GPU_UTIL_AVG"], ["get", "list"])]

    # The serving certificate: a Secret the role made; the APIServices trust its CA, and verify.
    secret = core.read_namespaced_secret(f"{ADAPTER}-serving-cert", ns)
    assert secret.type == "kubernetes.io/tls" and set(secret.data) == {"ca.crt", "tls.crt", "tls.key"}
    reg = client.ApiregistrationV1Api(api)
    for version in ("v1beta1", "v1beta2"):
        spec = reg.read_api_service(f"{version}.custom.metrics.k8s.io").spec
        assert not spec.insecure_skip_tls_verify
        assert spec.ca_bundle == secret.data["ca.crt"]  # both base64 of the CA's PEM
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{ADAPTER}.{ns}.svc" in names  # the name the aggregator checks

    # A second run changes nothing and does not remake the certificate.
    again = role("gpu_metrics_adapter", extra)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
    assert core.read_namespaced_secret(f"{ADAPTER}-serving-cert", ns).metadata.resource_version == \
        secret.metadata.resource_version

    # insecure only when asked for: the caBundle goes, insecureSkipTLSVerify comes, and back.
    insecure = role("gpu_metrics_adapter", {**extra, "gpu_metrics_adapter_serving_cert": "insecure"})
    assert insecure.returncode == 0, insecure.stdout[-3000:]
    spec = reg.read_api_service("v1beta2.custom.metrics.k8s.io").spec
    assert spec.insecure_skip_tls_verify is True and not spec.ca_bundle
    back = role("gpu_metrics_adapter", extra)
    assert back.returncode == 0, back.stdout[-3000:]
    spec = reg.read_api_service("v1beta2.custom.metrics.k8s.io").spec
    assert not spec.insecure_skip_tls_verify and spec.ca_bundle == secret.data["ca.crt"]


# --- the verify Job --------------------------------------------------------------------------------------------

def test_verify_jobs_restricted_with_a_user_and_refused_without_one(core, fresh):
    ns = fresh(NS_VERIFY)
    core.create_namespace({"metadata": {"name": ns, "labels": levels("restricted")}})
    args = {"namespace": ns, "per_node": True, "nodes": GPU_NODES[:1], "require_logs": False}
    rc, out = verify({**args, "timeout": 15})
    assert rc != 0
    reason = out["jobs"][0]["reason"]
    # Refused for the user alone: seccomp, capabilities and privilege escalation already pass restricted.
    assert 'violates PodSecurity "restricted:latest"' in reason and "runAsNonRoot" in reason, reason
    for passed in ("seccompProfile", "allowPrivilegeEscalation", "capabilities"):
        assert passed not in reason, reason

    rc, out = verify({**args, "timeout": 60, "run_as_user": 1000, "cleanup": False})
    assert rc == 0, out.get("msg")
    assert out["jobs"][0]["status"] == "completed_no_logs"
    pods = core.list_namespaced_pod(ns, label_selector="k8sgpu.nvidia/verify-run").items
    assert pods
    for pod in pods:
        ctx = pod.spec.security_context
        assert (ctx.run_as_non_root, ctx.run_as_user, ctx.seccomp_profile.type) == (True, 1000, "RuntimeDefault")
        ctr = pod.spec.containers[0]
        assert ctr.security_context.capabilities.drop == ["ALL"] and ctr.security_context.privileged is False
        assert ctr.resources.limits == {"nvidia.com/gpu": "1"}
    client.BatchV1Api(core.api_client).delete_collection_namespaced_job(
        ns, label_selector="k8sgpu.nvidia/verify-run", propagation_policy="Background")


def test_verify_jobs_pass_baseline_as_the_images_user(core, fresh):
    ns = fresh(NS_VERIFY)
    core.create_namespace({"metadata": {"name": ns, "labels": levels("baseline")}})
    rc, out = verify({"namespace": ns, "per_node": True, "nodes": GPU_NODES[:1], "require_logs": False,
                      "timeout": 60})
    assert rc == 0, out.get("msg")
    assert out["jobs"][0]["status"] == "completed_no_logs"
