"""No module returns a key that Ansible reads as something other than the module's data (issue 38 item 6).

k8s_node_maintenance returned the pods a drain left alone as ``skipped``: Ansible read that as the task's status, so a
drain that evicted a pod and left a DaemonSet pod was shown as ``skipping:`` and passed ``is skipped``. Two checks over
every module: its RETURN documentation (the YAML, top level and the items of a ``results`` list, which Ansible reads
as loop results), and its code and the module_utils it uses (the keys it writes into a result: keyword arguments of
exit_json and of a dict's update, dict literals, subscript assignments).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from ansible.executor import task_result
from ansible.plugins.test.core import changed, failed, skipped

ROOT = Path(__file__).resolve().parents[4]
MODULES = sorted((ROOT / "plugins" / "modules").glob("*.py"))
MODULE_UTILS = sorted((ROOT / "plugins" / "module_utils").glob("*.py"))

# The keys of a task result that Ansible reads as the task's status or handles itself, and why:
STATUS = {
    "skipped": "the task was skipped (is skipped, 'skipping:' in the output)",
    "skip_reason": "why the task was skipped",
    "failed": "the task failed",
    "failed_when_result": "the outcome of failed_when",
    "unreachable": "the host was unreachable",
    "changed": "the task changed something (the status only; its own RETURN entry is not needed)",
    "rc": "a non-zero rc marks the task failed when 'failed' is missing",
    "results": "a loop's results: Ansible ORs changed, failed and skipped over its items (cuda_vector_add and "
               "k8s_gpu_verify returned it before 2.0.0; now gpus and jobs)",
}
HANDLED = {
    "attempts": "until/retries", "retries": "until/retries",
    "ansible_job_id": "async", "finished": "async (is finished)", "started": "async", "results_file": "async",
    "item": "loops", "ansible_loop_var": "loops", "ansible_index_var": "loops", "ansible_loop": "loops",
    "invocation": "the module's arguments, added by Ansible", "exception": "a traceback, shown by the callback",
    "warnings": "warnings, shown by the callback", "deprecations": "deprecations, shown by the callback",
    "censored": "no_log", "module_stdout": "a module's unparsable output", "module_stderr": "a module's stderr",
    "add_host": "the add_host action", "add_group": "the group_by action", "ansible_stats": "set_stats",
    "ansible_rsync_path": "restricted", "ansible_playbook_python": "restricted",
}
RESERVED = {**STATUS, **HANDLED}
# Loop results (a 'results' list of dicts): Ansible ORs these over the items (is changed, is failed, is skipped).
LOOP_ITEM_RESERVED = {"changed", "failed", "skipped", "unreachable", "failed_when_result"}


def _core_result_keys() -> tuple[set, set]:
    """(ignored, preserved): the result keys ansible-core drops or keeps itself; ansible-core 2.21 moved them from
    ansible.executor.task_result (_IGNORE, _PRESERVE) to ansible._internal._task (PRESERVE; failed and skipped are
    result fields of their own there)."""
    if hasattr(task_result, "_PRESERVE"):
        return set(task_result._IGNORE), set(task_result._PRESERVE)
    from ansible._internal import _task
    return {"failed", "skipped"}, set(_task.PRESERVE)


def test_the_reserved_names_are_ansibles():
    """The names checked include the ones ansible-core itself ignores, preserves or strips (so the list is not stale)."""
    ignored, preserved = _core_result_keys()
    assert ignored <= set(RESERVED) and preserved - {"_ansible_no_log"} <= set(RESERVED)
    assert {"changed", "attempts", "warnings"} <= preserved
    from ansible import constants
    # add_host and add_group: constants.INTERNAL_RESULT_KEYS up to ansible-core 2.20
    assert set(getattr(constants, "INTERNAL_RESULT_KEYS", ("add_host", "add_group"))) <= set(RESERVED)
    assert set(constants.RESTRICTED_RESULT_KEYS) - {"ansible_facts"} <= set(RESERVED)


def module_return(path: Path) -> dict:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "RETURN" for t in node.targets):
            try:
                return yaml.safe_load(node.value.value) or {}
            except yaml.YAMLError as exc:
                pytest.fail(f"{path.name}: RETURN is not valid YAML: {exc}")
    pytest.fail(f"{path.name} has no RETURN")


def reserved_in_return(doc: dict) -> list[str]:
    problems = [f"{key} ({RESERVED[key]})" for key in doc if key in RESERVED or key.startswith("_ansible_")]
    results = doc.get("results")
    if isinstance(results, dict) and results.get("type") == "list":
        problems += [f"results[].{key} (loop results: {key} of the task)"
                     for key in (results.get("contains") or {}) if key in LOOP_ITEM_RESERVED]
    return problems


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_return_documents_no_reserved_key(path):
    problems = reserved_in_return(module_return(path))
    assert not problems, f"{path.name} RETURN uses keys Ansible reserves: {', '.join(problems)}"


def test_the_return_check_refuses_what_the_old_drain_returned():
    """The check catches the key k8s_node_maintenance documented in 1.0.0, and a loop item's status."""
    old = {"evicted": {"type": "list"}, "skipped": {"type": "list", "description": "Pods left on the Node"}}
    assert reserved_in_return(old) == [f"skipped ({STATUS['skipped']})"]
    loop = f"results ({STATUS['results']})"
    assert reserved_in_return({"results": {"type": "list", "contains": {"failed": {"type": "bool"}}}}) \
        == [loop, "results[].failed (loop results: failed of the task)"]
    # what cuda_vector_add and k8s_gpu_verify returned before 2.0.0
    assert reserved_in_return({"results": {"type": "list", "contains": {"passed": {"type": "bool"}}}}) == [loop]


# ---------------------------------------------------------------- the code

class _ResultKeys(ast.NodeVisitor):
    """String keys a module may put into a result: exit_json(key=...), x.update(key=...), {"key": ...},
    x["key"] = ...; fail_json is left out (its result fails the task anyway)."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, int]] = []

    def visit_Call(self, node: ast.Call) -> None:
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if name in ("exit_json", "update", "dict"):
            self.keys += [(kw.arg, node.lineno) for kw in node.keywords if kw.arg]
        if name == "fail_json":
            for arg in node.args:
                self.visit(arg)
            return
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        self.keys += [(k.value, node.lineno) for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                    and isinstance(target.slice.value, str):
                self.keys.append((target.slice.value, node.lineno))
        self.generic_visit(node)


def result_keys(source: str) -> list[tuple[str, int]]:
    visitor = _ResultKeys()
    visitor.visit(ast.parse(source))
    return visitor.keys


# (file, key): where such a key is written into something that is not a module result.
NOT_A_RESULT = {
    ("_aws_common.py", "retries"),  # botocore's Config(retries={...}), not a result
}
STATUS_IN_CODE = {"skipped", "skip_reason", "failed", "failed_when_result", "unreachable", "rc", "attempts",
                  "ansible_job_id", "finished", "results_file", "add_host", "add_group", "ansible_stats", "results"}


@pytest.mark.parametrize("path", MODULES + MODULE_UTILS, ids=[f"{p.parent.name}/{p.stem}" for p in MODULES + MODULE_UTILS])
def test_code_writes_no_reserved_key(path):
    found = [f"{key} (line {line})" for key, line in result_keys(path.read_text())
             if key in STATUS_IN_CODE and (path.name, key) not in NOT_A_RESULT]
    assert not found, f"{path.name} writes keys Ansible reads as the task's status: {', '.join(found)}"


def test_the_code_check_finds_the_old_drain_result():
    old = 'result.update(evicted=[], deleted=[], skipped=sorted(report.skipped), waited=1.0)\nresult["rc"] = 1\n'
    assert [key for key, _where in result_keys(old) if key in STATUS_IN_CODE] == ["skipped", "rc"]
    assert result_keys('module.fail_json(msg="x", rc=2)') == []


# ---------------------------------------------------------------- the drain's result, as Ansible reads it

class _Drain:
    """NodeMaintenance's side of one drain: a schedulable Node, one pod evicted and a DaemonSet pod left."""

    def __init__(self) -> None:
        self.patches: list = []

    def read_node(self) -> dict:
        return {"metadata": {"name": "gpu-1", "annotations": {}}, "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "8"}}}

    def patch_node(self, patch: dict) -> dict:
        self.patches.append(patch)
        return {}

    def plan(self, delete_emptydir_data: bool, force: bool) -> list:
        return []

    def drain(self, actions, timeout, retry_delay, grace_period):
        from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_drain import DrainReport
        return DrainReport(evicted=["default/web"], left=["kube-system/plugin-x (DaemonSet)"], waited=1.5)


class _Module:
    params = {"name": "gpu-1", "state": "drain", "max_unavailable": None, "resource": "nvidia.com/gpu",
              "annotations": {}, "delete_emptydir_data": False, "force": False, "timeout": 30, "retry_delay": 1,
              "grace_period": None, "fleet_selector": ""}


def test_a_drain_that_left_a_daemonset_pod_is_changed_not_skipped():
    from ansible_collections.k8sgpu.nvidia.plugins.modules.k8s_node_maintenance import _run
    result = _run(_Module(), _Drain())
    assert result["left_pods"] == ["kube-system/plugin-x (DaemonSet)"] and result["evicted"] == ["default/web"]
    assert "skipped" not in result
    assert changed(result) and not skipped(result) and not failed(result)
