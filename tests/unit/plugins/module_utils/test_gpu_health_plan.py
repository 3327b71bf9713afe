"""_gpu_health_plan (filters gpu_health_plan, gpu_health_record): the taint, the record, the recovery per finding and
the return to service, from real health reads of the gpu_health fixtures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health as gh
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health_plan as gp

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HEALTH = FIXTURES / "gpu_health"
H100_XML = FIXTURES / "h100" / "nvidia-smi-q.xml"
NOW = "2026-11-29T05:00:00Z"
LATER = "2026-11-29T06:00:00Z"
UUID = "GPU-3df950bc-14e1-c147-af67-d6bc91665500"


@pytest.fixture(scope="module")
def read(tmp_path_factory):
    """read(fixture name) -> the gpu_health module's result for that nvidia-smi XML (no kernel log, no sysfs GPU)."""
    proc = tmp_path_factory.mktemp("proc")
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n")
    sysfs = tmp_path_factory.mktemp("sys")

    def _read(name: str | None) -> dict:
        xml = (HEALTH / name if name else H100_XML).read_text()
        result, _warnings = gh.gather(lambda argv: (0, xml, ""), "/usr/bin/nvidia-smi", sysfs_root=str(sysfs),
                                      proc_root=str(proc), kernel_log="none")
        return result
    return _read


def node(annotations: dict | None = None, taints: list | None = None, unschedulable: bool = False) -> dict:
    return {"metadata": {"name": "gpu-1", "annotations": annotations or {}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable}}


def with_record(plan: dict, **node_kw) -> dict:
    """The Node as the plan's writes leave it."""
    annotations = dict(node_kw.pop("annotations", {}))
    annotations[gp.ANNOTATION_KEY] = plan["annotation"]
    taint = plan["taint"]
    taints = [{"key": taint["key"], "value": taint["value"], "effect": taint["effect"]}] if taint["state"] == "present" else []
    return node(annotations=annotations, taints=taints, **node_kw)


def test_report_taints_and_records_gpu_uuid_pci_finding_and_time(read):
    plan = gp.plan(read("recovery-gpu-reset.xml"), node(), policy="report", now=NOW)
    assert plan["action"] == "record" and plan["out"] and not plan["window"]
    assert plan["taint"] == {"key": "nvidia.com/gpu-health", "value": "needs_reset", "effect": "NoSchedule",
                             "state": "present"}
    record = json.loads(plan["annotation"])
    assert record["state"] == "tainted" and record["status"] == "needs_reset" and record["time"] == NOW
    gpu = record["gpus"][0]
    assert (gpu["index"], gpu["uuid"], gpu["pci_bus_id"]) == (0, UUID, "00000000:00:06.0")
    assert [f["check"] for f in gpu["findings"]] == ["recovery_action"], gpu
    assert "GPU Reset" in gpu["findings"][0]["detail"]
    assert "not drained" in record["reason"] and UUID in record["reason"]
    assert plan["recovery"] == "none", "report recovers nothing"


def test_a_second_run_with_the_same_finding_changes_nothing(read):
    health = read("recovery-gpu-reset.xml")
    first = gp.plan(health, node(), now=NOW)
    second = gp.plan(health, with_record(first), now=LATER)
    assert second["annotation_changed"] is False and second["tainted"]
    assert json.loads(second["annotation"])["time"] == NOW


def test_a_new_finding_rewrites_the_record_and_the_taint_value(read):
    first = gp.plan(read("recovery-gpu-reset.xml"), node(), now=NOW)
    second = gp.plan(read("remapped-rows-failure.xml"), with_record(first), now=LATER)
    assert second["annotation_changed"] and second["taint"]["value"] == "replace"
    record = json.loads(second["annotation"])
    assert record["status"] == "replace" and record["since"] == LATER


@pytest.mark.parametrize(("fixture", "status", "flags", "recovery"), [
    ("recovery-gpu-reset.xml", "needs_reset", {}, "reset"),
    ("remapped-rows-pending.xml", "needs_reset", {}, "reset"),
    ("reset-status-drain-and-reset.xml", "needs_reset", {}, "reset"),
    ("ecc-dbe-volatile.xml", "needs_reset", {"reset": False, "reload": True}, "reload"),
    ("ecc-dbe-volatile.xml", "needs_reset", {"reset": False, "reboot": True}, "reboot"),
    ("ecc-dbe-volatile.xml", "needs_reset", {"reset": False}, "none"),
    ("recovery-node-reboot.xml", "needs_reboot", {"reboot": True}, "reboot"),
    ("recovery-node-reboot.xml", "needs_reboot", {"reboot": False}, "none"),
    ("remapped-rows-failure.xml", "replace", {"reboot": True}, "none"),
])
def test_the_recovery_each_finding_calls_for(read, fixture, status, flags, recovery):
    plan = gp.plan(read(fixture), node(), policy="recover", now=NOW, **flags)
    assert plan["status"] == status and plan["action"] == "recover" and plan["window"]
    assert plan["recovery"] == recovery, plan["recovery_why"]
    assert plan["recovery_gpus"] == ([0] if recovery == "reset" else [])
    assert ("cordoned and drained" in plan["quarantine_reason"])
    if recovery == "none":
        assert plan["recovery_why"] in plan["quarantine_reason"]


def test_degraded_is_below_the_default_threshold_and_has_no_recovery(read):
    health = read("hw-slowdown.xml")
    assert health["status"] == "degraded"
    assert gp.plan(health, node(), policy="recover")["action"] == "none"
    plan = gp.plan(health, node(), policy="recover", taint_from="degraded")
    assert plan["out"] and plan["recovery"] == "none" and plan["taint"]["value"] == "degraded"


def test_healthy_untouched_node_is_left_alone(read):
    plan = gp.plan(read(None), node(), policy="recover")
    assert plan["action"] == "none" and not plan["window"] and not plan["annotation_changed"]


def test_healthy_again_removes_the_taint_and_updates_the_record(read):
    first = gp.plan(read("recovery-gpu-reset.xml"), node(), now=NOW)
    back = gp.plan(read(None), with_record(first), now=LATER)
    assert back["action"] == "return" and not back["window"]
    assert back["taint"] == {"key": "nvidia.com/gpu-health", "state": "absent"}
    record = json.loads(back["annotation"])
    assert record["state"] == "returned" and record["status"] == "healthy" and record["gpus"] == []
    # Once returned (taint gone), nothing more.
    again = gp.plan(read(None), node(annotations={gp.ANNOTATION_KEY: back["annotation"]}), now=LATER)
    assert again["action"] == "none" and not again["annotation_changed"]


def test_healthy_again_but_cordoned_by_this_collection_is_checked_before_the_uncordon(read):
    first = gp.plan(read("recovery-gpu-reset.xml"), node(), policy="quarantine", now=NOW)
    after = gp.record_after(first, state="quarantined", reason=first["quarantine_reason"], now=NOW, cordoned=True)
    cordoned = node(annotations={gp.ANNOTATION_KEY: after["annotation"], gp.MAINTENANCE_ANNOTATION: "true"},
                    taints=[{"key": gp.TAINT_KEY, "value": "needs_reset", "effect": "NoSchedule"}], unschedulable=True)
    plan = gp.plan(read(None), cordoned, policy="report", now=LATER)
    assert plan["action"] == "return_verify" and plan["window"] and plan["cordoned_by_us"]
    assert plan["taint"] is None, "the taint stays until vectorAdd passed"


def test_a_node_cordoned_by_a_person_is_never_counted_as_ours(read):
    first = gp.plan(read("recovery-gpu-reset.xml"), node(unschedulable=True), now=NOW)
    assert first["cordoned_by_person"] and not first["cordoned_by_us"]
    back = gp.plan(read(None), with_record(first, unschedulable=True), now=LATER)
    assert back["action"] == "return" and "stays cordoned" in back["reason"]
    # A record that claims the cordon without node_maintenance's annotation: still not ours.
    forged = dict(json.loads(first["annotation"]), cordoned=True)
    plan = gp.plan(read(None), node(annotations={gp.ANNOTATION_KEY: json.dumps(forged)},
                                    taints=[{"key": gp.TAINT_KEY, "value": "needs_reset"}], unschedulable=True))
    assert plan["action"] == "return" and not plan["cordoned_by_us"]


def test_the_serial_plays_record_is_kept_by_the_next_run(read):
    health = read("remapped-rows-failure.xml")
    first = gp.plan(health, node(), policy="recover", now=NOW)
    assert first["annotation_changed"] and json.loads(first["annotation"])["state"] == "tainted"
    after = gp.record_after(first, state="quarantined", reason=first["quarantine_reason"], now=NOW, cordoned=True)
    assert after["differs"] and after["record"]["cordoned"]
    on_node = node(annotations={gp.ANNOTATION_KEY: after["annotation"], gp.MAINTENANCE_ANNOTATION: "true"},
                   taints=[{"key": gp.TAINT_KEY, "value": "replace", "effect": "NoSchedule"}], unschedulable=True)
    second = gp.plan(health, on_node, policy="recover", now=LATER)
    assert not second["annotation_changed"] and second["cordoned_by_us"]
    again = gp.record_after(second, state="quarantined", reason=second["quarantine_reason"], now=LATER, cordoned=True)
    assert not again["differs"]


def test_a_node_the_serial_play_returned_is_left_alone_by_the_next_run(read):
    """The window's record (state returned, its own reason) is not rewritten by the next run on the healthy host
    (the rulebook's run for the next alert read it again and rewrote its reason: found in the lab)."""
    first = gp.plan(read("recovery-gpu-reset.xml"), node(), policy="quarantine", now=NOW)
    back = gp.record_after(first, state="returned", reason="healthy again; vectorAdd passed on 1 GPU(s); uncordoned",
                           now=LATER, health=read(None), cordoned=False)
    plan = gp.plan(read(None), node(annotations={gp.ANNOTATION_KEY: back["annotation"]}), policy="quarantine",
                   now="2026-11-29T07:00:00Z")
    assert plan["action"] == "none" and not plan["annotation_changed"] and not plan["window"], plan
    assert plan["record"] == back["record"]
    # Tainted again by hand (or by a run that failed half-way): the taint is removed, the record rewritten.
    tainted = node(annotations={gp.ANNOTATION_KEY: back["annotation"]},
                   taints=[{"key": gp.TAINT_KEY, "value": "needs_reset", "effect": "NoSchedule"}])
    assert gp.plan(read(None), tainted, policy="quarantine", now=LATER)["action"] == "return"


def test_waiting_and_out_records(read):
    plan = gp.plan(read("recovery-gpu-reset.xml"), node(), policy="recover", now=NOW)
    waiting = gp.record_after(plan, state="waiting", reason="waiting for the limit", now=NOW, cordoned=False)
    assert waiting["record"]["state"] == "waiting" and waiting["record"]["gpus"][0]["uuid"] == UUID
    out = gp.record_after(plan, state="out", reason="after the reset still needs_reset", now=LATER,
                          health=read("recovery-gpu-reset.xml"), cordoned=True, recovered=LATER)
    assert out["record"]["state"] == "out" and out["record"]["recovered"] == LATER and out["status"] == "needs_reset"
    back = gp.record_after(plan, state="returned", reason="recovered", now=LATER, health=read(None), cordoned=False,
                           recovered=LATER)
    assert back["status"] == "healthy" and back["record"]["gpus"] == [] and back["record"]["recovered"] == LATER


def test_absent_removes_the_taint_and_the_record(read):
    first = gp.plan(read("recovery-gpu-reset.xml"), node(), now=NOW)
    gone = gp.plan({}, with_record(first), state="absent")
    assert gone["action"] == "remove" and gone["annotation"] is None and gone["annotation_changed"]
    assert gone["taint"] == {"key": gp.TAINT_KEY, "state": "absent"}
    assert gp.plan({}, node(), state="absent")["action"] == "none"


def test_a_record_that_is_not_json_is_rewritten(read):
    plan = gp.plan(read("recovery-gpu-reset.xml"), node(annotations={gp.ANNOTATION_KEY: "not json"}), now=NOW)
    assert plan["previous"] is None and plan["annotation_changed"]


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"policy": "fix"}, "gpu_health_policy is 'fix'"),
    ({"taint_from": "bad"}, "unknown GPU health status 'bad'"),
    ({"state": "gone"}, "gpu_health_state is 'gone'"),
])
def test_bad_values_are_refused(read, kwargs, text):
    with pytest.raises(gp.GpuHealthPlanError, match=text):
        gp.plan(read(None), node(), **kwargs)


def test_window_hosts_in_the_given_order_those_to_return_first():
    """The window play takes hosts in this order: the one that takes the fleet's limit is the first in the inventory
    (group_by's order was the order results came back in, which made it differ from run to run)."""
    plans = {"gpu-1": {"window": True, "action": "recover"}, "gpu-2": {"window": True, "action": "quarantine"},
             "gpu-3": {"window": False, "action": "record"}, "gpu-4": {"window": True, "action": "return_verify"},
             "gpu-5": {}}
    hostvars = {host: ({"_gpu_health_plan": plan} if plan else {"other": 1}) for host, plan in plans.items()}
    hosts = ["gpu-2", "gpu-1", "gpu-3", "gpu-4", "gpu-5"]
    assert gp.window_hosts(hosts, hostvars) == ["gpu-4", "gpu-2", "gpu-1"]
    assert gp.window_hosts(sorted(hosts), hostvars) == ["gpu-4", "gpu-1", "gpu-2"]
    assert gp.window_hosts([], hostvars) == []
    with pytest.raises(gp.GpuHealthPlanError, match="gpu-9 is not in the inventory"):
        gp.window_hosts(["gpu-9"], hostvars)
    with pytest.raises(gp.GpuHealthPlanError, match="expects a list of inventory hosts"):
        gp.window_hosts("gpu-1", hostvars)
