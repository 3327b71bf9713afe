"""playbooks/gke.yml from no cluster (issue 22): k8sgpu_gke_cluster_state present makes the cluster with its
always-on CPU pool (gke_cluster) before the GPU pool, against the GKE contract server; the lab's API server and the
stand-in autoscaler (k8sgpu_testlib.scale_from_zero) play the cluster's Kubernetes side for the scale-from-zero check.
A second run changes nothing; the documented undo (-e k8sgpu_gke_state=absent) deletes the pool, then the cluster.

Stood in for: GKE's API (k8sgpu_testlib.gke_contract_server) and its autoscaler; the lab's API server is not the
new cluster's (the contract server makes none), so nothing proves that GKE's cluster comes up or that its nodes
join it.
"""
from __future__ import annotations

import uuid

from k8sgpu_testlib.gke_contract_server import running
from k8sgpu_testlib.scale_from_zero import FakeAutoscaler
from test_gke_playbook import GPU_TAINT, PROJECT, REGION, namespace, playbook  # noqa: F401  # pylint: disable=unused-import


def test_gke_playbook_from_no_cluster_and_back(core, namespace, kubeconfig, tmp_path):  # noqa: F811  # pylint: disable=redefined-outer-name
    cluster, pool = f"made-{uuid.uuid4().hex[:6]}", f"gpu-{uuid.uuid4().hex[:6]}"
    with running() as gke:
        extra = {
            "k8sgpu_gke_cluster_state": "present",
            "k8sgpu_gke_cluster": {"release_channel": "REGULAR", "node_locations": ["us-central1-a", "us-central1-b"],
                                   "logging_components": ["SYSTEM_COMPONENTS", "WORKLOADS"],
                                   "cpu_pool": {"machine_type": "e2-standard-2", "node_count": 1}},
            "k8sgpu_gke_node_pool": {
                "project": PROJECT, "location": REGION, "cluster": cluster, "name": pool,
                "api_endpoint": gke.base, "access_token": "contract-token", "machine_type": "g2-standard-4",
                "accelerator": {"type": "nvidia-l4", "gpu_driver_version": "LATEST"},   # GKE installs the driver
                "labels": {"role": "train-gpu"}, "autoscaling": {"min_node_count": 0, "max_node_count": 1}},
            "k8sgpu_gke_verify_namespace": namespace, "k8sgpu_gke_verify_timeout": 120,
            "k8sgpu_gke_verify_require_logs": False, "k8sgpu_gke_scale_down_poll": 1, "k8sgpu_kubeconfig": kubeconfig}
        node_labels = {"cloud.google.com/gke-nodepool": pool, "cloud.google.com/gke-accelerator": "nvidia-l4",
                       "role": "train-gpu"}
        # Check mode from nothing: the cluster and the pool are planned; nothing is made.
        proc, stats = playbook("playbooks/gke.yml", {**extra, "k8sgpu_gke_verify": False}, tmp_path, "--check")
        assert proc.returncode == 0 and stats["changed"] == 2, proc.stdout[-4000:]
        assert gke.clusters == {} and gke.writes() == []

        with FakeAutoscaler(core, node_prefix="k8sgpu-gkec-sfz", labels=node_labels, taints=[GPU_TAINT],
                            node_selector={"cloud.google.com/gke-nodepool": pool}, gpus=1, delay=2.0,
                            namespaces=[namespace], scale_down_after=2.0) as autoscaler:
            proc, stats = playbook("playbooks/gke.yml", extra, tmp_path)
            assert proc.returncode == 0 and stats["changed"] == 2, proc.stdout[-4000:]  # the cluster, the pool
            assert f"node pool {pool}: PASSED" in proc.stdout
            assert f"node pool {pool}: back to zero nodes after the check" in proc.stdout
            pools = gke.clusters[(PROJECT, REGION, cluster)]["pools"]
            assert sorted(pools) == ["cpu", pool] and pools["cpu"].config.machine_type == "e2-standard-2"
            assert not pools["cpu"].config.accelerators and pools[pool].config.accelerators[0].accelerator_type == \
                "nvidia-l4"
            methods = [(w["method"], w["path"].rsplit("/", 2)[-2:]) for w in gke.writes()]
            assert methods[0] == ("POST", ["us-central1", "clusters"]), methods
            assert len(autoscaler.scale_ups) == 1 and autoscaler.scale_ups[0].pod_running
            assert autoscaler.wait_scaled_to_zero(60), autoscaler.errors

            proc, stats = playbook("playbooks/gke.yml", extra, tmp_path)
            assert proc.returncode == 0 and stats["changed"] == 0, proc.stdout[-4000:]
            assert autoscaler.wait_scaled_to_zero(60), autoscaler.errors
        assert autoscaler.errors == []

        proc, stats = playbook("playbooks/gke.yml", {**extra, "k8sgpu_gke_state": "absent"}, tmp_path)
        assert proc.returncode == 0 and stats["changed"] == 2, proc.stdout[-4000:]  # the pool, then the cluster
        assert proc.stdout.index("Teardown - the node pool") < proc.stdout.index("Teardown - the cluster")
        assert gke.clusters == {}
        proc, stats = playbook("playbooks/gke.yml", {**extra, "k8sgpu_gke_state": "absent"}, tmp_path)
        assert proc.returncode == 0 and stats["changed"] == 0, proc.stdout[-4000:]


def test_scale_down_check_fails_naming_the_node_left(core, namespace, kubeconfig, tmp_path):  # noqa: F811  # pylint: disable=redefined-outer-name
    """A pool that does not go back to zero (the stand-in autoscaler here never removes its node): the playbook fails
    after the timeout the user set, naming the node that keeps costing."""
    cluster, pool = f"train-{uuid.uuid4().hex[:6]}", f"gpu-{uuid.uuid4().hex[:6]}"
    with running() as gke:
        gke.add_cluster(PROJECT, REGION, cluster)
        extra = {
            "k8sgpu_gke_node_pool": {
                "project": PROJECT, "location": REGION, "cluster": cluster, "name": pool,
                "api_endpoint": gke.base, "access_token": "contract-token",
                "accelerator": {"type": "nvidia-tesla-t4", "gpu_driver_version": "LATEST"},
                "autoscaling": {"min_node_count": 0, "max_node_count": 1}},
            "k8sgpu_gke_verify_namespace": namespace, "k8sgpu_gke_verify_timeout": 120,
            "k8sgpu_gke_verify_require_logs": False, "k8sgpu_gke_scale_down_poll": 1,
            "k8sgpu_gke_scale_down_timeout": 4, "k8sgpu_kubeconfig": kubeconfig}
        labels = {"cloud.google.com/gke-nodepool": pool, "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
        with FakeAutoscaler(core, node_prefix="k8sgpu-gkesd", labels=labels, taints=[GPU_TAINT],
                            node_selector={"cloud.google.com/gke-nodepool": pool}, gpus=1, delay=1.0,
                            namespaces=[namespace]) as autoscaler:
            proc, stats = playbook("playbooks/gke.yml", extra, tmp_path)
            out = " ".join(proc.stdout.split())
            assert proc.returncode != 0 and stats["failed"] == 1, proc.stdout[-4000:]
            assert f"node pool {pool}: PASSED" in proc.stdout
            assert f"node pool {pool} still has node(s) {autoscaler.nodes[0]} 4 s after the check" in out, out[-3000:]
            assert "they keep costing" in out
        proc, stats = playbook("playbooks/gke.yml", {**extra, "k8sgpu_gke_state": "absent"}, tmp_path)
        assert proc.returncode == 0 and gke.pool(PROJECT, REGION, cluster, pool) is None, proc.stdout[-3000:]
