from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import (
    NodeBatch,
    NodeSpecError,
    TaintSpec,
    expression_matches,
    label_value,
    plan_node,
    validate_label_key,
)

CP = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
MASTER = {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "infra", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}


def node(name="n1", labels=None, taints=None, rv="7"):
    return {"metadata": {"name": name, "labels": labels or {}, "resourceVersion": rv},
            "spec": {"taints": taints} if taints is not None else {}}


def absent(key, effect="NoSchedule"):
    return TaintSpec.from_param({"key": key, "effect": effect, "state": "absent"})


class TestUntaint:
    @pytest.mark.parametrize("taints,removed", [
        ([MASTER], ["node-role.kubernetes.io/master:NoSchedule"]),
        ([CP], ["node-role.kubernetes.io/control-plane:NoSchedule"]),
        ([CP, MASTER], ["node-role.kubernetes.io/control-plane:NoSchedule", "node-role.kubernetes.io/master:NoSchedule"]),
    ])
    def test_removes_control_plane_taints(self, taints, removed):
        plan = plan_node(node(taints=taints), {}, [absent(CP["key"]), absent(MASTER["key"])])
        assert sorted(plan.taints_removed) == sorted(removed)
        assert plan.patch == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": None}}

    def test_no_taints_is_no_change(self):
        plan = plan_node(node(), {}, [absent(CP["key"]), absent(MASTER["key"])])
        assert not plan.changed and plan.patch == {}

    def test_unrelated_taints_are_kept_verbatim(self):
        plan = plan_node(node(taints=[OTHER, CP]), {}, [absent(CP["key"])])
        assert plan.patch["spec"]["taints"] == [OTHER]  # timeAdded kept too

    def test_absent_matches_effect(self):
        prefer = {"key": CP["key"], "effect": "PreferNoSchedule"}
        plan = plan_node(node(taints=[prefer]), {}, [absent(CP["key"])])
        assert not plan.changed
        plan = plan_node(node(taints=[prefer, CP]), {}, [TaintSpec.from_param({"key": CP["key"], "state": "absent"})])
        assert plan.patch["spec"]["taints"] is None


class TestTaintPresent:
    GPU = TaintSpec.from_param({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})

    def test_adds_taint_keeping_others(self):
        plan = plan_node(node(taints=[OTHER]), {}, [self.GPU])
        assert plan.patch["spec"]["taints"] == [OTHER, {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        assert plan.taints_added == ["nvidia.com/gpu=present:NoSchedule"]
        assert plan.patch["metadata"]["resourceVersion"] == "7"

    def test_already_there_is_no_change(self):
        plan = plan_node(node(taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]), {}, [self.GPU])
        assert not plan.changed

    def test_changes_value_in_place(self):
        plan = plan_node(node(taints=[{"key": "nvidia.com/gpu", "value": "old", "effect": "NoSchedule"}]), {}, [self.GPU])
        assert plan.taints_removed == ["nvidia.com/gpu=old:NoSchedule"]
        assert plan.taints_added == ["nvidia.com/gpu=present:NoSchedule"]
        assert plan.patch["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]

    def test_present_needs_effect(self):
        with pytest.raises(NodeSpecError, match="effect is required"):
            TaintSpec.from_param({"key": "nvidia.com/gpu", "state": "present"})


class TestLabels:
    def test_only_differences_are_patched(self):
        plan = plan_node(node(labels={"gpu": "true", "keep": "x", "role": "old"}),
                         {"gpu": "true", "role": "train-gpu", "gone": None, "nvidia.com/gpu.present": "true"}, [])
        assert plan.patch == {"metadata": {"labels": {"role": "train-gpu", "nvidia.com/gpu.present": "true"}}}
        assert plan.before == {"labels": {"role": "old"}, "taints": []}
        assert plan.after["labels"] == {"nvidia.com/gpu.present": "true", "role": "train-gpu"}

    def test_removal(self):
        plan = plan_node(node(labels={"role": "x"}), {"role": None}, [])
        assert plan.patch == {"metadata": {"labels": {"role": None}}}
        assert plan.labels_removed == ["role"]

    def test_idempotent(self):
        assert not plan_node(node(labels={"gpu": "true"}), {"gpu": "true", "absent": None}, []).changed

    def test_label_patch_has_no_resource_version(self):
        # Label merges cannot lose other writers' changes, so they need no optimistic lock.
        assert "resourceVersion" not in plan_node(node(), {"a": "b"}, []).patch["metadata"]

    @pytest.mark.parametrize("value,expected", [(8, "8"), (True, "true"), (81559, "81559"), ("NVIDIA-H100", "NVIDIA-H100"), (None, None)])
    def test_values(self, value, expected):
        assert label_value("k", value) == expected

    @pytest.mark.parametrize("value", ["NVIDIA H100", "-x", "x" * 64, "a/b"])
    def test_bad_values(self, value):
        with pytest.raises(NodeSpecError, match="values must be"):
            label_value("k", value)

    @pytest.mark.parametrize("key", ["gpu", "nvidia.com/gpu.present", "node-role.kubernetes.io/control-plane", "a_b.c-d"])
    def test_good_keys(self, key):
        validate_label_key(key)

    @pytest.mark.parametrize("key", ["", "UPPER.example/x", "nvidia.com/", "x" * 64, "a b"])
    def test_bad_keys(self, key):
        with pytest.raises(NodeSpecError):
            validate_label_key(key)


class FakeConflict(Exception):
    status = 409


class FakeDynamic:
    """Records requests; answers the first patch of a node with 409 when asked."""

    def __init__(self, nodes, conflict_once=()):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.conflict_once = set(conflict_once)
        self.patches = []

    def request(self, method, path, body=None, **params):
        name = path.rsplit("/", 1)[-1]
        if method == "get" and path == "/api/v1/nodes":
            return {"items": list(self.nodes.values()), "metadata": {}}
        if method == "get":
            return self.nodes[name]
        if name in self.conflict_once:
            self.conflict_once.discard(name)
            # Someone else added a taint meanwhile.
            self.nodes[name]["spec"]["taints"] = [OTHER]
            self.nodes[name]["metadata"]["resourceVersion"] = "8"
            raise FakeConflict()
        self.patches.append((name, body, params))
        return {}


def test_batch_patches_only_nodes_that_differ_and_retries_conflicts():
    gpu = TaintSpec.from_param({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    nodes = [node("a", taints=[]), node("b", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
             node("c", taints=[])]
    api = FakeDynamic(nodes, conflict_once={"c"})
    batch = NodeBatch(api, workers=4, dry_run=True)
    plans, errors = batch.apply(list(batch.list_nodes().values()), lambda n: plan_node(n, {}, [gpu]))
    assert errors == {}
    patched = {patch[0]: patch[1] for patch in api.patches}
    assert set(patched) == {"a", "c"}
    # c was re-read after the conflict: the other writer's taint survives, with the new resourceVersion.
    assert patched["c"]["spec"]["taints"] == [OTHER, gpu.as_taint()]
    assert patched["c"]["metadata"]["resourceVersion"] == "8"
    assert all(patch[2]["dry_run"] == "All" and patch[2]["content_type"] == "application/merge-patch+json" for patch in api.patches)
    assert sorted(p.name for p in plans if p.changed) == ["a", "c"]


def test_batch_reports_errors_per_node():
    class Forbidden(Exception):
        status = 403
        body = '{"message": "nodes \\"a\\" is forbidden"}'

    class Api(FakeDynamic):
        def request(self, method, path, body=None, **params):
            if method == "patch":
                raise Forbidden()
            return super().request(method, path, body, **params)

    api = Api([node("a")])
    errors = NodeBatch(api).apply([api.nodes["a"]], lambda n: plan_node(n, {"x": "y"}, []))[1]
    assert errors == {"a": 'nodes "a" is forbidden'}


def test_batch_retries_throttled_requests(monkeypatch):
    monkeypatch.setattr("ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes.time.sleep", lambda s: None)

    class Throttled(Exception):
        status = 429
        headers = {"Retry-After": "1"}

    class Api(FakeDynamic):
        calls = 0

        def request(self, method, path, body=None, **params):
            if method == "patch" and self.calls < 2:
                self.calls += 1
                raise Throttled()
            return super().request(method, path, body, **params)

    api = Api([node("a")])
    plans, errors = NodeBatch(api).apply([api.nodes["a"]], lambda n: plan_node(n, {"x": "y"}, []))
    assert errors == {} and api.calls == 2 and [p[0] for p in api.patches] == ["a"]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ({"key": "gpu", "operator": "In", "values": ["true"]}, True),
        ({"key": "gpu", "operator": "In", "values": ["false"]}, False),
        ({"key": "zone", "operator": "In", "values": ["a"]}, False),
        ({"key": "gpu", "operator": "NotIn", "values": ["false"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "Exists"}, False),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "gpu", "operator": "DoesNotExist"}, False),
    ],
)
def test_expression_matches(expr, expected):
    assert expression_matches(expr, {"gpu": "true"}) is expected


def test_expression_matches_unknown_operator_gives_the_caller_s_answer():
    expr = {"key": "cpus", "operator": "Gt", "values": ["4"]}
    assert expression_matches(expr, {"cpus": "8"}) is False
    assert expression_matches(expr, {"cpus": "8"}, unknown=True) is True


class TestSelection:
    """k8s_nodes: an empty names list touches no Node; the whole cluster only with all_nodes (issue 20)."""

    def test_explicit_selections_pass(self):
        from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import check_selection
        check_selection([], {}, None, False)
        check_selection(["n1"], {}, None, False)
        check_selection(None, {"n1": {}}, None, False)
        check_selection(None, {}, "gpu=true", False)
        check_selection(None, {}, None, True)
        check_selection(None, {}, "gpu=true", True)

    def test_nothing_selected_or_contradictory_refused(self):
        from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_nodes import check_selection
        with pytest.raises(NodeSpecError, match="all_nodes: true"):
            check_selection(None, {}, None, False)
        with pytest.raises(NodeSpecError, match="without names"):
            check_selection([], {}, None, True)
