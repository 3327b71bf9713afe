from __future__ import annotations

import json

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import (
    MaintenanceError,
    NodeMaintenance,
    classify,
    fleet_check,
    limit_of,
    parse_max_unavailable,
    wait_problems,
)


def pod(name="p", ns="default", owner=None, phase="Running", volumes=None, annotations=None, labels=None, uid=None):
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "labels": labels or {},
            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": f"{name}-owner", "controller": True}]
    return {"metadata": meta, "spec": {"volumes": volumes or []}, "status": {"phase": phase}}


EMPTYDIR = [{"name": "scratch", "emptyDir": {}}]


class TestClassify:
    def test_daemonset_pod_with_emptydir_is_skipped_not_refused_nor_deleted(self):
        # kubernetes.core.k8s_drain checked emptyDir first: refused, or deleted with delete_emptydir_data.
        for delete_emptydir in (False, True):
            assert classify(pod(owner="DaemonSet", volumes=EMPTYDIR), delete_emptydir, False).action == "skip"

    def test_mirror_pod_skipped(self):
        action = classify(pod(annotations={"kubernetes.io/config.mirror": "x"}), False, False)
        assert (action.action, action.reason) == ("skip", "mirror pod")

    def test_unmanaged_refused_unless_force(self):
        assert classify(pod(), False, False).action == "refuse"
        assert "no controller" in classify(pod(), False, False).reason
        assert classify(pod(), False, True).action == "evict"

    def test_owner_without_controller_flag_is_unmanaged(self):
        p = pod()
        p["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs"}]
        assert classify(p, False, False).action == "refuse"

    def test_emptydir_refused_unless_asked(self):
        assert classify(pod(owner="ReplicaSet", volumes=EMPTYDIR), False, False).action == "refuse"
        assert classify(pod(owner="ReplicaSet", volumes=EMPTYDIR), True, False).action == "evict"

    def test_finished_pods_deleted_even_unmanaged_or_emptydir(self):
        for p in (pod(phase="Succeeded"), pod(phase="Failed", volumes=EMPTYDIR), pod(owner="DaemonSet", phase="Failed")):
            assert classify(p, False, False).action == "delete"

    def test_orphaned_daemonset_pod_needs_force(self):
        assert classify(pod(owner="DaemonSet"), False, False, lambda ns, n: False).action == "refuse"
        assert classify(pod(owner="DaemonSet"), False, True, lambda ns, n: False).action == "evict"
        assert classify(pod(owner="DaemonSet"), False, False, lambda ns, n: True).action == "skip"


class TestLimit:
    @pytest.mark.parametrize("value,parsed", [(1, (1, False)), ("3", (3, False)), ("25%", (25, True)),
                                              (" 10 % ", (10, True))])
    def test_parse(self, value, parsed):
        assert parse_max_unavailable(value) == parsed

    @pytest.mark.parametrize("value", [0, "0", "0%", -1, "101%", "abc", "1.5", True, None, "%"])
    def test_refused(self, value):
        with pytest.raises(MaintenanceError):
            parse_max_unavailable(value)

    def test_percentage_rounds_down_at_least_one(self):
        assert limit_of("25%", 10) == 2
        assert limit_of("10%", 5) == 1
        assert limit_of("100%", 7) == 7
        assert limit_of(3, 2) == 3

    @staticmethod
    def node(unschedulable=False, ready=True, gpus=8):
        return {"spec": {"unschedulable": unschedulable} if unschedulable else {},
                "status": {"capacity": {"nvidia.com/gpu": str(gpus)} if gpus else {},
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}

    def test_counts_cordoned_and_notready_other_nodes(self):
        nodes = {"a": self.node(), "b": self.node(unschedulable=True), "c": self.node(ready=False), "d": self.node(),
                 "cpu": self.node(unschedulable=True, gpus=0)}
        check = fleet_check("a", nodes, set(), "nvidia.com/gpu", 2)
        assert check["out"] == {"b": "cordoned", "c": "NotReady"}
        assert check["fleet"] == 4 and check["limit"] == 2 and not check["allowed"]
        assert fleet_check("a", nodes, set(), "nvidia.com/gpu", 3)["allowed"]

    def test_the_node_itself_counts_once(self):
        nodes = {"a": self.node(unschedulable=True), "b": self.node()}
        assert fleet_check("a", nodes, set(), "nvidia.com/gpu", 1) == {"allowed": True, "limit": 1, "fleet": 2, "out": {}}

    def test_selector_adds_nodes_without_the_resource(self):
        nodes = {"a": self.node(), "b": self.node(unschedulable=True, gpus=0)}
        assert fleet_check("a", nodes, set(), "nvidia.com/gpu", 1)["allowed"]
        assert not fleet_check("a", nodes, {"b"}, "nvidia.com/gpu", 1)["allowed"]


class TestWaitProblems:
    @staticmethod
    def node(ready="True", gpus="8", boot="b1"):
        return {"status": {"allocatable": {"nvidia.com/gpu": gpus}, "nodeInfo": {"bootID": boot},
                           "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady"}]}}

    def test_back(self):
        assert not wait_problems(self.node(), "nvidia.com/gpu", 8, "b0")

    def test_a_gpu_missing(self):
        assert wait_problems(self.node(gpus="7"), "nvidia.com/gpu", 8) == [
            "1 GPU(s) missing: nvidia.com/gpu allocatable 7, 8 expected"]

    def test_not_ready_and_same_boot(self):
        problems = wait_problems(self.node(ready="False"), "nvidia.com/gpu", 8, "b1")
        assert problems[0].startswith("not Ready (KubeletNotReady")
        assert "same bootID" in problems[1]


class ApiError(Exception):
    def __init__(self, status, body=None):
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, json.dumps(body) if body else None


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        assert seconds > 0
        self.t += seconds


class FakeApi:
    """Pods of one Node; evictions of pods in `blocked` answer 429 `times` times (forever with None)."""

    def __init__(self, pods, blocked=None, times=None, pdbs=None):
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.blocked, self.times, self.pdbs = set(blocked or ()), times, pdbs or []
        self.calls = []

    def request(self, method, path, body=None, **params):
        self.calls.append((method, path))
        if method == "get" and path == "/api/v1/pods":
            return {"items": list(self.pods.values())}
        if method == "get" and "poddisruptionbudgets" in path:
            return {"items": self.pdbs}
        if method == "get" and "/pods/" in path:
            name = path.rsplit("/", 1)[1]
            if name not in self.pods:
                raise ApiError(404)
            return self.pods[name]
        if method == "post" and path.endswith("/eviction"):
            name = body["metadata"]["name"]
            if name in self.blocked and (self.times is None or self.times > 0):
                if self.times is not None:
                    self.times -= 1
                raise ApiError(429, {"message": "Cannot evict pod as it would violate the pod's disruption budget.",
                                     "details": {"causes": [{"reason": "DisruptionBudget", "message":
                                                 "The disruption budget web needs 2 healthy pods and has 2 currently"}]}})
            self.pods.pop(name)
            return {}
        if method == "delete":
            self.pods.pop(path.rsplit("/", 1)[1])
            return {}
        raise AssertionError((method, path))


def maintenance(api, clock, check_mode=False):
    return NodeMaintenance(api, "n1", check_mode=check_mode, clock=clock, sleep=clock.sleep)


class TestDrain:
    def test_evicts_deletes_and_skips(self):
        api = FakeApi([pod("web", owner="ReplicaSet"), pod("done", phase="Succeeded"), pod("ds", owner="DaemonSet")])
        clock = FakeClock()
        nm = maintenance(api, clock)
        nm.daemonset_exists = lambda ns, n: True
        report = nm.drain(nm.plan(False, False), timeout=30, retry_delay=5)
        assert report.evicted == ["default/web"] and report.deleted == ["default/done"]
        assert report.left == ["default/ds (DaemonSet)"]
        assert list(api.pods) == ["ds"]

    def test_refused_pods_named_before_any_eviction(self):
        api = FakeApi([pod("web", owner="ReplicaSet"), pod("bare"), pod("cache", owner="ReplicaSet", volumes=EMPTYDIR)])
        nm = maintenance(api, FakeClock())
        with pytest.raises(MaintenanceError) as exc:
            nm.drain(nm.plan(False, False), timeout=30, retry_delay=5)
        assert "default/bare (no controller" in str(exc.value) and "default/cache (emptyDir" in str(exc.value)
        assert not [c for c in api.calls if c[0] == "post"]

    def test_budget_retried_until_it_allows(self):
        api = FakeApi([pod("web", owner="ReplicaSet")], blocked={"web"}, times=3)
        clock = FakeClock()
        nm = maintenance(api, clock)
        report = nm.drain(nm.plan(False, False), timeout=60, retry_delay=5)
        assert report.evicted == ["default/web"]
        assert [c[0] for c in api.calls].count("post") == 4
        assert 15 <= clock.t < 20

    def test_budget_never_allows_names_pod_and_budget_at_the_timeout(self):
        pdb = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "w"}}},
               "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2}}
        api = FakeApi([pod("web", owner="ReplicaSet", labels={"app": "w"})], blocked={"web"}, pdbs=[pdb])
        clock = FakeClock()
        nm = maintenance(api, clock)
        with pytest.raises(MaintenanceError) as exc:
            nm.drain(nm.plan(False, False), timeout=12, retry_delay=5)
        assert "did not finish in 12 s" in str(exc.value)
        assert "default/web (eviction refused: PodDisruptionBudget default/web allows 0 disruptions" in str(exc.value)
        assert 12 <= clock.t < 13

    def test_check_mode_reports_and_evicts_nothing(self):
        api = FakeApi([pod("web", owner="ReplicaSet"), pod("done", phase="Failed")])
        nm = maintenance(api, FakeClock(), check_mode=True)
        report = nm.drain(nm.plan(False, False), timeout=30, retry_delay=5)
        assert report.evicted == ["default/web"] and report.deleted == ["default/done"]
        assert len(api.pods) == 2 and not [c for c in api.calls if c[0] in ("post", "delete")]
