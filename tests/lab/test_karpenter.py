"""Role karpenter_gpu against the lab's real API server, and Karpenter's scale from zero for real.

TestEc2NodeClass: the role's NodePool and EC2NodeClass are applied with Karpenter's own AWS CRDs installed
(../shared/crds/karpenter, v1.14.1), so the API server's OpenAPI schema and CEL rules check every field we
render; idempotence, check mode, diff, removal of a dropped setting, a clear preflight failure, and deletion.
What this does not prove: that AWS launches the instances (no EC2 here).

TestKarpenterRole: the role karpenter (Karpenter's controller as its chart renders it) with Karpenter's AWS CRDs from
../shared/crds/karpenter given as karpenter_crds_path: the API server accepts the CRDs and the objects (Pod Security
restricted on the test's namespace), check mode writes nothing, a second run changes nothing, the ServiceAccount may
do what the chart grants and not more, and absent removes exactly what the role made (CRDs last).

TestKarpenterKwok: Karpenter v1.14.1's own controller with its kwok cloud provider
(~/.cache/k8sgpu-lab/bin/karpenter-kwok-v1.14.1/kwok, CRDs from ../shared/crds/karpenter-kwok) runs against the
lab with GPU instance types that carry nvidia.com/gpu; the role's NodePool (node class: a KWOKNodeClass) makes
it launch a GPU node for a pending pod, stop at the NodePool's nvidia.com/gpu limit, never place a pod without
the toleration there, and remove the node once empty. The NodePool carries an extra taint only our pods
tolerate, so Karpenter never launches nodes for other tests' pending pods in the shared lab. The same controller
scales the pool of playbooks/eks.yml, run from an empty moto account (IAM roles, the cluster, the Pod Identity
role and association, Karpenter's controller objects applied by the role karpenter) and torn down again.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import KUBECTL, LAB_STATE, ROOT, run

# tests/cloud's moto fixtures (a ThreadedMotoServer on 127.0.0.1, boto3 clients, a VPC), reused, and the Pod
# Identity stand-in for moto (it must be added before moto answers its first EKS request: here, at import).
_spec = importlib.util.spec_from_file_location("cloud_conftest", ROOT / "tests" / "cloud" / "conftest.py")
cloud = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cloud)
_spec = importlib.util.spec_from_file_location("cloud_pod_identity", ROOT / "tests" / "cloud" / "test_eks_pod_identity.py")
cloud_pi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cloud_pi)
endpoint, aws, network = cloud.endpoint, cloud.aws, cloud.network

SHARED_CRDS = Path(__file__).resolve().parents[3] / "shared" / "crds"
AWS_CRDS = SHARED_CRDS / "karpenter"
KWOK_CRDS = SHARED_CRDS / "karpenter-kwok"
KARPENTER_VERSION = "v1.14.1"
KARPENTER_BIN = Path.home() / ".cache" / "k8sgpu-lab" / "bin" / f"karpenter-kwok-{KARPENTER_VERSION}" / "kwok"
TEST_TAINT = {"key": "k8sgpu.nvidia/karpenter-test", "value": "true", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}

# Instance types of the kwok provider: names in AWS's family.size form, so the provider's
# karpenter.kwok.sh/instance-family label is g5, g6, m5 ... as the role's family requirement expects.
INSTANCE_TYPES = [
    {"name": name, "architecture": "amd64", "operatingSystems": ["linux"],
     "resources": {"cpu": cpu, "memory": mem, "pods": "58", "ephemeral-storage": "200Gi", **extra},
     "offerings": [{"Price": price * factor, "Available": True, "requirements": [
         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ctype]},
         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}
         for ctype, factor in (("spot", 0.4), ("on-demand", 1.0))]}
    for name, cpu, mem, extra, price in (
        ("g5.xlarge", "4", "16Gi", {"nvidia.com/gpu": "1"}, 1.006),
        ("g6.xlarge", "4", "16Gi", {"nvidia.com/gpu": "1"}, 0.805),
        ("g5.12xlarge", "48", "192Gi", {"nvidia.com/gpu": "4"}, 5.672),
        ("m5.large", "2", "8Gi", {}, 0.096),
    )
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubectl(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    res = run([*KUBECTL, *args], input=stdin)
    if check and res.returncode:
        raise AssertionError(f"kubectl {' '.join(args)}: {res.stderr}")
    return res


def install_crds(folder: Path) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(folder))
    kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", str(folder))


def remove_crds(folder: Path) -> None:
    kubectl("delete", "--ignore-not-found", "--wait", "--timeout", "120s", "-f", str(folder))


def role(extra: dict, *args: str) -> subprocess.CompletedProcess:
    """The role through tests/lab/playbooks/role.yml on localhost (the GPU containers' play is limited away)."""
    return run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "--limit", "localhost",
                "-e", "role=karpenter_gpu", "-e", json.dumps(extra), *args])


def changed(res: subprocess.CompletedProcess) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return res


def custom(api: client.ApiClient):
    return client.CustomObjectsApi(api)


def get_obj(api, group: str, plural: str, name: str) -> dict | None:
    try:
        return custom(api).get_cluster_custom_object(group, "v1", plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


# --------------------------------------------------------------------------------------------------------------
# The role with Karpenter's AWS CRDs
# --------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def aws_crds(core):
    if not AWS_CRDS.is_dir():
        pytest.skip(f"{AWS_CRDS} is absent: Karpenter's AWS CRDs come from ../shared (not committed)")
    install_crds(AWS_CRDS)
    yield core.api_client
    remove_crds(AWS_CRDS)


@pytest.fixture
def aws_pool(aws_crds):
    name = f"k8sgpu-test-{uuid.uuid4().hex[:6]}"
    extra = {"karpenter_gpu_nodepool_name": name, "karpenter_gpu_ec2nodeclass_name": name,
             "karpenter_gpu_cluster_name": "train", "karpenter_gpu_node_role": "KarpenterNodeRole-train"}
    yield extra
    for group, plural in (("karpenter.sh", "nodepools"), ("karpenter.k8s.aws", "ec2nodeclasses")):
        try:
            custom(aws_crds).delete_cluster_custom_object(group, "v1", plural, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


class TestEc2NodeClass:
    def test_objects_pass_karpenters_validation_and_a_second_run_changes_nothing(self, aws_crds, aws_pool):
        first = ok(role(aws_pool))
        assert changed(first) == 2
        pool = get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"])
        spec = pool["spec"]
        assert spec["limits"] == {"nvidia.com/gpu": "8"}
        assert spec["template"]["metadata"]["labels"] == {"role": "train-gpu"}
        assert spec["template"]["spec"]["taints"] == [GPU_TAINT]
        assert spec["template"]["spec"]["nodeClassRef"] == {
            "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": aws_pool["karpenter_gpu_ec2nodeclass_name"]}
        reqs = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
        assert reqs["karpenter.k8s.aws/instance-family"] == ["g5", "g6", "g6e", "p4d", "p5"]
        assert reqs["karpenter.sh/capacity-type"] == ["spot", "on-demand"]
        assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m",
                                      "budgets": [{"nodes": "10%"}]}
        nc = custom(aws_crds).get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses",
                                                        aws_pool["karpenter_gpu_ec2nodeclass_name"])["spec"]
        assert nc["amiSelectorTerms"] == [{"alias": "al2023@latest"}] and nc["role"] == "KarpenterNodeRole-train"
        assert nc["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "train"}}]
        assert nc["blockDeviceMappings"][0]["ebs"]["volumeSize"] == "200Gi"
        assert changed(ok(role(aws_pool))) == 0

    def test_check_mode_and_diff_then_a_dropped_setting_is_removed(self, aws_crds, aws_pool):
        ok(role(aws_pool))
        name = aws_pool["karpenter_gpu_nodepool_name"]
        more = {**aws_pool, "karpenter_gpu_gpu_limit": 16, "karpenter_gpu_termination_grace_period": "48h"}
        dry = ok(role(more, "--check", "--diff"))
        assert changed(dry) == 1
        assert '-    nvidia.com/gpu: "8"' in dry.stdout or "nvidia.com/gpu: '8'" in dry.stdout, dry.stdout[-3000:]
        assert "48h" in dry.stdout
        live = get_obj(aws_crds, "karpenter.sh", "nodepools", name)["spec"]
        assert live["limits"] == {"nvidia.com/gpu": "8"} and "terminationGracePeriod" not in live["template"]["spec"]

        assert changed(ok(role(more))) == 1
        live = get_obj(aws_crds, "karpenter.sh", "nodepools", name)["spec"]
        assert live["limits"] == {"nvidia.com/gpu": "16"} and live["template"]["spec"]["terminationGracePeriod"] == "48h"
        # Back to the defaults: server-side apply drops the field the role no longer renders.
        assert changed(ok(role(aws_pool))) == 1
        live = get_obj(aws_crds, "karpenter.sh", "nodepools", name)["spec"]
        assert live["limits"] == {"nvidia.com/gpu": "8"} and "terminationGracePeriod" not in live["template"]["spec"]

    def test_karpenters_cel_rules_reject_a_restricted_tag_with_their_message(self, aws_crds, aws_pool):
        res = role({**aws_pool, "karpenter_gpu_ec2_tags": {"kubernetes.io/cluster/train": "owned"}})
        assert res.returncode != 0
        assert "tag contains a restricted tag matching kubernetes.io/cluster/" in res.stdout, res.stdout[-3000:]
        assert get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"]) is None

    def test_preflight_names_the_settings_before_any_write(self, aws_crds, aws_pool):
        # the AMI alias's form: the role's first task (k8sgpu.nvidia.role_inputs); the relation: its preflight
        res = role({**aws_pool, "karpenter_gpu_ami_alias": "al2023"})
        assert res.returncode != 0 and "karpenter_gpu_ami_alias is 'al2023'; give an AMI alias family@version" in res.stdout
        res = role({**aws_pool, "karpenter_gpu_instance_profile": "gpu-nodes"})
        assert res.returncode != 0
        assert "exactly one of node_role='KarpenterNodeRole-train' and instance_profile='gpu-nodes'" in res.stdout
        res = role({**aws_pool, "karpenter_gpu_cluster_name": ""})
        assert res.returncode != 0 and "empty now: karpenter.sh/discovery, karpenter.sh/discovery" in res.stdout
        assert get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"]) is None

    def test_absent_deletes_both_and_then_changes_nothing(self, aws_crds, aws_pool):
        ok(role(aws_pool))
        gone = {**aws_pool, "karpenter_gpu_state": "absent"}
        assert changed(ok(role(gone))) == 1
        assert get_obj(aws_crds, "karpenter.sh", "nodepools", aws_pool["karpenter_gpu_nodepool_name"]) is None
        assert get_obj(aws_crds, "karpenter.k8s.aws", "ec2nodeclasses", aws_pool["karpenter_gpu_ec2nodeclass_name"]) is None
        assert changed(ok(role(gone))) == 0


def test_missing_crds_fail_with_the_fix(core):
    if get_obj(core.api_client, "apiextensions.k8s.io", "customresourcedefinitions", "nodepools.karpenter.sh"):
        pytest.skip("Karpenter's CRDs are installed in the lab right now")
    res = role({"karpenter_gpu_cluster_name": "train", "karpenter_gpu_node_role": "r"})
    assert res.returncode != 0
    # The YAML callback folds long messages at a width that depends on the terminal: compare without the folds.
    assert "the cluster has no CRD ec2nodeclasses.karpenter.k8s.aws, nodepools.karpenter.sh" in " ".join(res.stdout.split())


# --------------------------------------------------------------------------------------------------------------
# The role karpenter: Karpenter's controller objects and its AWS CRDs
# --------------------------------------------------------------------------------------------------------------
PS = {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")}
CRDS = ("ec2nodeclasses.karpenter.k8s.aws", "nodeclaims.karpenter.sh", "nodepools.karpenter.sh")


def karpenter_role(extra: dict, *args: str) -> subprocess.CompletedProcess:
    return run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml", "--limit", "localhost",
                "-e", "role=karpenter", "-e", json.dumps(extra), *args])


def can(api, sa_ns: str, sa: str, verb: str, resource: str, group: str = "", name: str = "",
        namespace: str | None = None) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{sa_ns}:{sa}", groups=["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, group=group, name=name or None,
                                                        namespace=namespace)))
    return client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed


def karpenter_objects(api, name: str, ns: str) -> dict:
    """What of the role's objects exists: kind/namespace/name -> bool."""
    apps, rbac, core, policy = (client.AppsV1Api(api), client.RbacAuthorizationV1Api(api), client.CoreV1Api(api),
                                client.PolicyV1Api(api))
    reads = {
        f"ServiceAccount/{ns}/{name}": lambda: core.read_namespaced_service_account(name, ns),
        f"ClusterRole/{name}-core": lambda: rbac.read_cluster_role(f"{name}-core"),
        f"ClusterRoleBinding/{name}-core": lambda: rbac.read_cluster_role_binding(f"{name}-core"),
        f"ClusterRole/{name}": lambda: rbac.read_cluster_role(name),
        f"ClusterRoleBinding/{name}": lambda: rbac.read_cluster_role_binding(name),
        f"Role/{ns}/{name}": lambda: rbac.read_namespaced_role(name, ns),
        f"RoleBinding/{ns}/{name}": lambda: rbac.read_namespaced_role_binding(name, ns),
        f"Role/kube-system/{name}-dns": lambda: rbac.read_namespaced_role(f"{name}-dns", "kube-system"),
        f"RoleBinding/kube-system/{name}-dns": lambda: rbac.read_namespaced_role_binding(f"{name}-dns", "kube-system"),
        f"Role/kube-node-lease/{name}-lease": lambda: rbac.read_namespaced_role(f"{name}-lease", "kube-node-lease"),
        f"RoleBinding/kube-node-lease/{name}-lease":
            lambda: rbac.read_namespaced_role_binding(f"{name}-lease", "kube-node-lease"),
        f"Deployment/{ns}/{name}": lambda: apps.read_namespaced_deployment(name, ns),
        f"PodDisruptionBudget/{ns}/{name}": lambda: policy.read_namespaced_pod_disruption_budget(name, ns),
        **{f"CustomResourceDefinition/{c}": (lambda c=c: get_obj(api, "apiextensions.k8s.io",
                                                                 "customresourcedefinitions", c) or None)
           for c in CRDS},
    }
    found = {}
    for key, read in reads.items():
        try:
            found[key] = read() is not None
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            found[key] = False
    return found


@pytest.fixture
def restricted_namespace(core):
    name = f"k8sgpu-kctl-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": PS}})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


class TestKarpenterRole:
    def test_objects_and_crds_check_mode_second_run_and_absent(self, core, restricted_namespace):
        if not AWS_CRDS.is_dir():
            pytest.skip(f"{AWS_CRDS} is absent: Karpenter's AWS CRDs come from ../shared (not committed)")
        api, ns = core.api_client, restricted_namespace
        if get_obj(api, "apiextensions.k8s.io", "customresourcedefinitions", "nodepools.karpenter.sh"):
            pytest.fail("Karpenter's CRDs are installed: this test installs and removes them itself")
        name = f"k8sgpu-karpenter-{ns[-6:]}"
        extra = {"karpenter_name": name, "karpenter_namespace": ns, "karpenter_cluster_name": "train",
                 "karpenter_interruption_queue": "train", "karpenter_crds_path": str(AWS_CRDS),
                 "karpenter_image_digest": "sha256:" + "0" * 64, "karpenter_feature_gates": {"NodeRepair": True}}
        try:
            # Check mode: the API server's dry run of every object (the CRDs too), nothing written.
            dry = ok(karpenter_role(extra, "--check"))
            assert changed(dry) == 1
            assert not any(karpenter_objects(api, name, ns).values())

            assert changed(ok(karpenter_role(extra))) == 1
            assert all(karpenter_objects(api, name, ns).values()), karpenter_objects(api, name, ns)
            crd = get_obj(api, "apiextensions.k8s.io", "customresourcedefinitions", "nodepools.karpenter.sh")
            assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
            dep = client.AppsV1Api(api).read_namespaced_deployment(name, ns)
            c = dep.spec.template.spec.containers[0]
            assert c.image == "public.ecr.aws/karpenter/controller:1.14.1@sha256:" + "0" * 64
            env = {e.name: e.value for e in c.env}
            assert env["CLUSTER_NAME"] == "train" and env["INTERRUPTION_QUEUE"] == "train"
            assert env["FEATURE_GATES"] == "NodeRepair=true" and env["BATCH_MAX_DURATION"] == "10s"
            assert c.security_context.read_only_root_filesystem and c.security_context.run_as_non_root
            assert dep.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
                .node_selector_terms[0].match_expressions[0].key == "karpenter.sh/nodepool"
            pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(name, ns)
            assert pdb.spec.max_unavailable == 1
            # Pod Security restricted admitted the pods the ReplicaSet made (an event says so otherwise).
            assert wait_until(lambda: client.CoreV1Api(api).list_namespaced_pod(ns).items, 60), \
                client.CoreV1Api(api).list_namespaced_event(ns).items[-3:]

            # The chart's rules, no more.
            assert can(api, ns, name, "create", "nodeclaims", "karpenter.sh")
            assert can(api, ns, name, "patch", "ec2nodeclasses/status", "karpenter.k8s.aws")
            assert can(api, ns, name, "delete", "nodes") and can(api, ns, name, "create", "pods/eviction", namespace="x")
            assert can(api, ns, name, "update", "leases", "coordination.k8s.io", "karpenter-leader-election", ns)
            assert can(api, ns, name, "get", "services", name="kube-dns", namespace="kube-system")
            assert can(api, ns, name, "delete", "leases", "coordination.k8s.io", "n1", "kube-node-lease")
            assert not can(api, ns, name, "create", "nodepools", "karpenter.sh")
            assert not can(api, ns, name, "delete", "ec2nodeclasses", "karpenter.k8s.aws")
            assert not can(api, ns, name, "get", "secrets", namespace=ns)
            assert not can(api, ns, name, "update", "leases", "coordination.k8s.io", "kube-scheduler", ns)
            assert not can(api, ns, name, "get", "services", name="other", namespace="kube-system")
            assert not can(api, ns, name, "create", "nodes")

            assert changed(ok(karpenter_role(extra))) == 0
        finally:
            gone = ok(karpenter_role({**extra, "karpenter_state": "absent"}))
        assert changed(gone) == 1
        assert not any(karpenter_objects(api, name, ns).values()), karpenter_objects(api, name, ns)

    def test_settings_are_checked_before_any_write(self, core):
        # the digest's form: the role's first task (k8sgpu.nvidia.role_inputs); the relation and the controller's
        # files: its preflight
        res = karpenter_role({"karpenter_image_digest": "latest", "karpenter_name": "k8sgpu-karpenter-bad"})
        assert res.returncode != 0
        assert "karpenter_image_digest is 'latest'; an image digest" in " ".join(res.stdout.split())
        res = karpenter_role({"karpenter_cluster_name": "", "karpenter_crds_path": "/nonexistent/crds",
                              "karpenter_name": "k8sgpu-karpenter-bad"})
        assert res.returncode != 0
        out = " ".join(res.stdout.split())
        assert "karpenter_cluster_name='' (required" in out and "it does not exist" in out, res.stdout[-3000:]
        assert not any(karpenter_objects(core.api_client, "k8sgpu-karpenter-bad", "kube-system").values())


# --------------------------------------------------------------------------------------------------------------
# Karpenter's own controller with its kwok cloud provider
# --------------------------------------------------------------------------------------------------------------
class KarpenterKwok:
    """Karpenter's kwok provider running beside the lab: its CRDs, a KWOKNodeClass, the process (pid file under
    $K8SGPU_LAB_STATE/procs/), and on exit: NodePools and NodeClaims of ours deleted, the process stopped, the
    CRDs removed. Karpenter has no bind-address option (its operator listens on ":<port>"): the metrics and
    health ports are free ports chosen here."""

    node_class = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "k8sgpu-test"}

    def __init__(self, api: client.ApiClient, workdir: Path):
        self.api = api
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.pidfile = LAB_STATE / "procs" / "karpenter-kwok.pid"
        self.log = workdir / "karpenter.log"

    def __enter__(self) -> KarpenterKwok:
        if not KWOK_CRDS.is_dir():
            pytest.skip(f"{KWOK_CRDS} is absent: Karpenter's kwok CRDs come from ../shared (not committed)")
        if not KARPENTER_BIN.exists():
            pytest.skip(f"{KARPENTER_BIN} is absent: lab/build-binaries.sh builds Karpenter's kwok provider")
        if get_obj(self.api, "apiextensions.k8s.io", "customresourcedefinitions", "ec2nodeclasses.karpenter.k8s.aws"):
            pytest.fail("Karpenter's AWS CRDs are installed: one set at a time (both define nodepools.karpenter.sh)")
        install_crds(KWOK_CRDS)
        kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({
            "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": self.node_class["name"]}}))
        types = self.workdir / "instance-types.json"
        types.write_text(json.dumps(INSTANCE_TYPES))
        env = {**os.environ, "KUBECONFIG": str(LAB_STATE / "kubeconfig"), "SYSTEM_NAMESPACE": "kube-system",
               "INSTANCE_TYPES_FILE_PATH": str(types)}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [str(KARPENTER_BIN), "--disable-leader-election", "--metrics-port", str(free_port()),
                 "--health-probe-port", str(free_port()), "--log-level", "debug"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.write_text(f"{self.proc.pid}\n")
        return self

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def could_not_schedule(self, pod_name: str) -> list[str]:
        """The errors of Karpenter's provisioner for a pod it could not place on any NodePool (its JSON log)."""
        found = []
        for line in self.logs().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("message") == "could not schedule pod" and (entry.get("Pod") or {}).get("name") == pod_name:
                found.append(entry.get("error", ""))
        return found

    def claims(self, pool: str) -> list:
        return custom(self.api).list_cluster_custom_object(
            "karpenter.sh", "v1", "nodeclaims", label_selector=f"karpenter.sh/nodepool={pool}")["items"]

    def __exit__(self, *exc_info) -> None:
        co = custom(self.api)
        for pool in co.list_cluster_custom_object("karpenter.sh", "v1", "nodepools")["items"]:
            co.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool["metadata"]["name"])
        # Karpenter terminates the NodeClaims of a deleted NodePool (and their Nodes) while it still runs.
        end = time.monotonic() + 90
        while co.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"] and time.monotonic() < end:
            time.sleep(1)
        if self.proc:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.pidfile.unlink(missing_ok=True)
        # Whatever Karpenter left (finalizers it can no longer remove): nodes by its label, then claims and CRDs.
        core = client.CoreV1Api(self.api)
        for node in core.list_node(label_selector="karpenter.sh/nodepool").items:
            core.patch_node(node.metadata.name, {"metadata": {"finalizers": None}})
            core.delete_node(node.metadata.name)
        for claim in co.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]:
            name = claim["metadata"]["name"]
            co.patch_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name, {"metadata": {"finalizers": None}})
        kubectl("delete", "kwoknodeclass", self.node_class["name"], "--ignore-not-found", "--wait=false")
        kubectl("patch", "kwoknodeclass", self.node_class["name"], "--type", "merge", "-p",
                '{"metadata":{"finalizers":null}}', check=False)
        remove_crds(KWOK_CRDS)


@pytest.fixture(scope="class")
def karpenter(core, tmp_path_factory):
    with KarpenterKwok(core.api_client, tmp_path_factory.mktemp("karpenter")) as k:
        yield k


@pytest.fixture
def namespace(core):
    name = f"k8sgpu-karpenter-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name, propagation_policy="Background", grace_period_seconds=0)


def kwok_pool_vars(pool: str, node_class: dict) -> dict:
    """The role's variables for a NodePool of Karpenter's kwok provider, fenced off by the test taint."""
    return {"karpenter_gpu_nodepool_name": pool, "karpenter_gpu_node_class": node_class,
            "karpenter_gpu_instance_family_key": "karpenter.kwok.sh/instance-family",
            "karpenter_gpu_instance_families": ["g5", "g6"],
            "karpenter_gpu_labels": {"role": "train-gpu", "k8sgpu-test/pool": pool},
            "karpenter_gpu_taints": [GPU_TAINT, TEST_TAINT], "karpenter_gpu_gpu_limit": 1,
            "karpenter_gpu_consolidate_after": "5s", "karpenter_gpu_disruption_budgets": [{"nodes": "100%"}]}


def pod(name: str, pool: str, *, gpus: int = 1, gpu_toleration: bool = True) -> dict:
    tolerations = [{"key": TEST_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
    if gpu_toleration:
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    resources = {"requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}
    return {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"role": "train-gpu", "k8sgpu-test/pool": pool}, "tolerations": tolerations,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.invalid/cuda-vector-add:none", "resources": resources}]}}


def wait_until(pred, timeout: float, step: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    return pred()


def pool_nodes(core, pool: str) -> list:
    return core.list_node(label_selector=f"karpenter.sh/nodepool={pool}").items


class TestKarpenterKwok:
    def test_gpu_node_from_zero_limit_toleration_and_consolidation(self, core, karpenter, namespace):
        pool = f"k8sgpu-test-{namespace[-6:]}"
        ok(role(kwok_pool_vars(pool, karpenter.node_class)))
        assert pool_nodes(core, pool) == []

        # A CPU pod that selects the pool and tolerates the test taint but not nvidia.com/gpu's: Karpenter finds
        # no node of the pool it could run on, and launches nothing.
        core.create_namespaced_pod(namespace, pod("intolerant", pool, gpus=0, gpu_toleration=False))
        refused = wait_until(lambda: karpenter.could_not_schedule("intolerant"), 60)
        assert refused and "did not tolerate" in refused[0], refused or karpenter.logs()[-4000:]
        assert pool_nodes(core, pool) == [] and karpenter.claims(pool) == []

        t0 = time.monotonic()
        core.create_namespaced_pod(namespace, pod("train", pool))
        running = wait_until(lambda: (p := core.read_namespaced_pod("train", namespace)).status.phase == "Running"
                             and p, 120)
        assert running, karpenter.logs()[-4000:]
        pending_to_running = time.monotonic() - t0
        nodes = pool_nodes(core, pool)
        assert [n.metadata.name for n in nodes] == [running.spec.node_name]
        node = nodes[0]
        labels = node.metadata.labels
        assert labels["role"] == "train-gpu" and labels["karpenter.sh/capacity-type"] == "spot"
        assert labels["node.kubernetes.io/instance-type"] == "g6.xlarge"     # the cheapest GPU type allowed
        assert node.status.allocatable["nvidia.com/gpu"] == "1"
        taints = {(t.key, t.effect) for t in node.spec.taints or []}
        assert taints >= {("nvidia.com/gpu", "NoSchedule"), (TEST_TAINT["key"], "NoSchedule")}

        # The NodePool's nvidia.com/gpu limit (1) is reached: a second GPU pod gets no second node.
        core.create_namespaced_pod(namespace, pod("second", pool))
        # Karpenter's provisioner has decided on the pod once it logs its refusal (each batch it evaluates logs it
        # again): two refusals, so a decision after the first could still show up as a node below.

        def refusals():
            return [e for e in karpenter.could_not_schedule("second") if "exceed limits for nodepool" in e]

        assert wait_until(lambda: len(refusals()) >= 2, 60), karpenter.logs()[-4000:]
        assert [n.metadata.name for n in pool_nodes(core, pool)] == [node.metadata.name]
        second = core.read_namespaced_pod("second", namespace)
        assert second.status.phase == "Pending" and not second.spec.node_name
        assert len(karpenter.claims(pool)) == 1
        assert any("exceed limits for nodepool" in e for e in karpenter.could_not_schedule("second")), karpenter.logs()[-4000:]
        # The pod without the toleration never landed on the GPU node, and got no node of its own.
        intolerant = core.read_namespaced_pod("intolerant", namespace)
        assert intolerant.status.phase == "Pending" and not intolerant.spec.node_name

        # Empty node: gone after consolidateAfter (5s) through Karpenter's disruption controller.
        for name in ("second", "train", "intolerant"):
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        t1 = time.monotonic()
        assert wait_until(lambda: not pool_nodes(core, pool), 120), karpenter.logs()[-4000:]
        empty_to_removed = time.monotonic() - t1
        print(f"pending-to-running {pending_to_running:.1f} s, empty-to-removed {empty_to_removed:.1f} s")

    def test_eks_playbook_with_karpenter_scales_from_zero_and_tears_down(self, core, karpenter, namespace, endpoint,
                                                                         aws, network):
        """playbooks/eks.yml from an empty moto account, provisioner karpenter: the cluster's and nodes' IAM roles,
        the cluster, Karpenter's IAM role (trusted by pods.eks.amazonaws.com, its controller policy) and Pod
        Identity association in moto; in the lab, Karpenter's controller objects (role karpenter), the role
        karpenter_gpu's NodePool, the device plugin, and the check's Job, Pending until Karpenter (its kwok
        controller, running beside the lab) launches a GPU node for it. The second run changes nothing and sees the
        pool back at zero; the teardown removes, in reverse order, everything the first run made."""
        pool = f"k8sgpu-eks-{namespace[-6:]}"
        cluster = f"kpt-{namespace[-6:]}"
        kname = f"karpenter-{namespace[-6:]}"
        dp_label = f"k8sgpu-test/eks-device-plugin-{namespace[-6:]}"
        extra = {
            "k8sgpu_aws_endpoint_url": endpoint, "k8sgpu_aws_region": cloud.REGION,
            "k8sgpu_eks_cluster_name": cluster, "k8sgpu_eks_cluster_state": "present",
            "k8sgpu_eks_cluster": {"subnets": network["subnets"], "version": "1.33"},
            "k8sgpu_eks_provisioner": "karpenter", "k8sgpu_eks_karpenter_install": True,
            "k8sgpu_eks_pod_identity": True, "karpenter_name": kname, "karpenter_namespace": namespace,
            "karpenter_replicas": 1,
            "k8sgpu_eks_gpu_labels": {"role": "train-gpu", "k8sgpu-test/pool": pool},
            "k8sgpu_eks_gpu_taints": [GPU_TAINT, TEST_TAINT],
            **{k: v for k, v in kwok_pool_vars(pool, karpenter.node_class).items()
               if k not in ("karpenter_gpu_labels", "karpenter_gpu_taints")},
            "device_plugin_namespace": namespace, "device_plugin_name": f"{pool}-dp",
            "device_plugin_node_affinity_label": dp_label,
            # The device plugin tolerates the test taint too: its rollout on a pool node Karpenter has not removed
            # yet when the second run starts is then a pod (kwok runs it), not an untolerated node.
            "device_plugin_extra_tolerations": [{"key": TEST_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
            "k8sgpu_eks_verify_namespace": namespace, "k8sgpu_eks_verify_timeout": 120,
            "k8sgpu_eks_verify_require_logs": False}
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret"}

        def eks(*args: str, **more) -> tuple[int, str, dict]:
            res = run(["ansible-playbook", "-i", "inventories/lab", "playbooks/eks.yml",
                       "-e", json.dumps({**extra, **more}), *args], env_extra=creds)
            return res.returncode, res.stdout + res.stderr, recap(res.stdout).get("localhost", {})

        def roles() -> set[str]:
            return {r["RoleName"] for r in aws["iam"].list_roles()["Roles"]}

        roles_before, clusters_before = roles(), set(aws["eks"].list_clusters()["clusters"])
        apps = client.AppsV1Api(core.api_client)

        rc, out = eks(k8sgpu_eks_scale_down_check=False)[:2]
        assert rc == 0, out[-5000:] + karpenter.logs()[-3000:]
        assert "karpenter pool: PASSED - completed_no_logs on " in out, out[-3000:]
        nodes = pool_nodes(core, pool)
        assert len(nodes) == 1 and nodes[0].metadata.labels[dp_label] == "true"
        assert "(timeout" not in out
        # moto: the cluster, its two roles and Karpenter's, trusted by Pod Identity, associated with its ServiceAccount.
        made = {f"{cluster}-eks-cluster", f"{cluster}-eks-nodes", f"{cluster}-karpenter"}
        assert roles() - roles_before == made and cluster in aws["eks"].list_clusters()["clusters"]
        krole = aws["iam"].get_role(RoleName=f"{cluster}-karpenter")["Role"]
        assert krole["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        policy = aws["iam"].get_role_policy(RoleName=f"{cluster}-karpenter",
                                            PolicyName="KarpenterControllerPolicy")["PolicyDocument"]
        sids = {st["Sid"]: st for st in policy["Statement"]}
        assert sids["AllowAPIServerEndpointDiscovery"]["Resource"].endswith(f":cluster/{cluster}")
        assert sids["AllowPassingInstanceRole"]["Resource"].endswith(f":role/{cluster}-eks-nodes")
        assert sids["AllowRegionalReadActions"]["Condition"] == {"StringEquals": {"aws:RequestedRegion": cloud.REGION}}
        [assoc] = cloud_pi.pod_identity_associations(aws, cluster)
        assert (assoc["namespace"], assoc["serviceAccount"], assoc["roleArn"]) == (namespace, kname, krole["Arn"])
        # The lab: Karpenter's controller objects, applied by the role karpenter.
        env = {e.name: e.value for e in apps.read_namespaced_deployment(kname, namespace).spec.template.spec
               .containers[0].env}
        assert env["CLUSTER_NAME"] == cluster and env["AWS_REGION"] == cloud.REGION
        assert client.CoreV1Api(core.api_client).read_namespaced_service_account(kname, namespace)

        # Second run, with the scale-down check: the check's pod done, Karpenter removes the empty node
        # (consolidateAfter 5s) and the playbook sees the pool back at zero.
        rc, out, stats = eks(k8sgpu_eks_scale_down_poll=1, k8sgpu_eks_scale_down_timeout=120)
        assert rc == 0 and stats["changed"] == 0, out[-5000:]
        assert "karpenter pool: back to zero nodes after the check" in out, out[-3000:]
        assert pool_nodes(core, pool) == []

        # The documented undo, in reverse order: the NodePool, Karpenter's controller, the association, its role, the
        # cluster, the cluster's roles.
        rc, out, stats = eks("--tags", "eks_teardown")
        assert rc == 0 and stats["changed"] == 6, out[-5000:]
        order = ["Teardown - the NodePool", "Teardown - Karpenter's controller", "Teardown - the controller's Pod Identity",
                 "Teardown - the controller's IAM role", "Teardown - the control plane", "Teardown - the nodes' and then"]
        assert [out.index(t) for t in order] == sorted(out.index(t) for t in order)
        assert get_obj(core.api_client, "karpenter.sh", "nodepools", pool) is None
        with pytest.raises(client.ApiException) as gone:
            apps.read_namespaced_deployment(kname, namespace)
        assert gone.value.status == 404
        assert roles() == roles_before and set(aws["eks"].list_clusters()["clusters"]) == clusters_before
        # Karpenter terminates the deleted NodePool's node.
        assert wait_until(lambda: not pool_nodes(core, pool), 120), karpenter.logs()[-3000:]
