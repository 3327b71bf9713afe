"""Never the whole fleet by default (issue 34 item 5): the throttle of the disruptive tasks and the refusal of a batch
larger than k8sgpu_max_unavailable (filters maintenance_throttle and maintenance_batch), and the playbooks that use
them (the settings check runs before any host is touched; the reboot tasks carry the throttle)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_batch import maintenance_batch
from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_throttle import maintenance_throttle

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("limit,hosts,expected", [
    (1, 20, 1), ("1", 20, 1), (3, 2, 3), ("25%", 20, 5), ("25%", 3, 1), ("10%", 2, 1), ("100%", 20, 20),
    ("50%", "7", 3),
])
def test_throttle(limit, hosts, expected):
    assert maintenance_throttle(limit, hosts) == expected


@pytest.mark.parametrize("limit", [0, "0%", "all", True, None, "150%"])
def test_throttle_refuses_a_bad_limit_naming_it(limit):
    with pytest.raises(AnsibleFilterError, match="k8sgpu_max_unavailable is"):
        maintenance_throttle(limit, 4)


def test_throttle_needs_a_host_count():
    with pytest.raises(AnsibleFilterError, match="hosts must be a count"):
        maintenance_throttle(1, ["a", "b"])


@pytest.mark.parametrize("serial,limit,hosts", [
    (1, 1, 20), (2, 2, 20), ("10%", "10%", 20), ("10%", 1, 19),  # 10% of 19 hosts is 1
    ("100%", "100%", 5), (5, "50%", 10), (3, 1, 1), (2, 1, 0),   # one host: a batch of 1 whatever serial says
])
def test_a_batch_within_the_limit_passes(serial, limit, hosts):
    assert maintenance_batch(serial, limit, hosts) == []


@pytest.mark.parametrize("serial,limit,hosts,batch,allowed", [
    (2, 1, 2, 2, 1),
    ("100%", 1, 20, 20, 1),
    ("50%", "25%", 4, 2, 1),
    ("10%", 1, 20, 2, 1),
    (5, "50%", 9, 5, 4),        # 50% of 10 hosts is 5, of 9 (a --limit) 4
    ("25%", 2, 20, 5, 2),
])
def test_a_batch_over_the_limit_is_refused_naming_both_variables(serial, limit, hosts, batch, allowed):
    problems = maintenance_batch(serial, limit, hosts, reason="driver_reboot is reboot")
    assert len(problems) == 1, problems
    text = problems[0]
    assert text.startswith(f"k8sgpu_serial is {serial} and k8sgpu_max_unavailable is {limit}: of the {hosts} GPU host(s)")
    assert f"a batch of {batch} could be rebooted" in text and f"k8sgpu_max_unavailable allows {allowed}." in text
    assert "(driver_reboot is reboot)" in text
    assert f"Set k8sgpu_serial to at most {limit}, or raise k8sgpu_max_unavailable to {serial}" in text


def test_bad_values_are_left_to_maintenance_settings():
    assert maintenance_batch(0, 1, 4) == [] and maintenance_batch(2, "x", 4) == []


# ---------------------------------------------------------------- the playbooks and the role

def tasks(path: str) -> list:
    return yaml.safe_load((ROOT / path).read_text())


def test_the_gpu_play_refuses_a_batch_over_the_limit_before_any_host_is_touched():
    check = tasks("playbooks/tasks/fleet_limit.yml")[0]
    assert "k8sgpu.nvidia._maintenance_batch(" in check["vars"]["_k8sgpu_problems"]
    assert "ansible_play_hosts_all | length" in check["vars"]["_k8sgpu_problems"]
    assert check["run_once"] is True and check["any_errors_fatal"] is True and "ansible.builtin.assert" in check
    for playbook in ("playbooks/host.yml", "playbooks/upgrade.yml"):
        plays = tasks(playbook)
        # the localhost settings check, then the GPU hosts' limit check, before the play that changes them
        assert plays[0]["hosts"] == "localhost"
        assert plays[1]["hosts"] == "gpu_nodes" and "_k8sgpu_disruption" in plays[1]["vars"], playbook
        assert {"ansible.builtin.import_tasks": "tasks/fleet_limit.yml"}.items() <= \
            [t for t in plays[1]["tasks"] if "ansible.builtin.import_tasks" in t][0].items()
        assert plays[1]["tasks"][-1]["ansible.builtin.import_tasks"] == "tasks/node_name_facts.yml"
        assert "serial" not in plays[1]
    assert tasks("playbooks/upgrade.yml")[1]["vars"]["_k8sgpu_disruption"]  # always: every batch is drained
    disruption = tasks("playbooks/host.yml")[1]["vars"]["_k8sgpu_disruption"]
    assert "k8sgpu_drain_before_restart" in disruption and "driver_reboot" in disruption


def test_the_no_change_path_keeps_every_host_at_once():
    """Without the drain the host play's batch stays 100 % (the no-change site.yml is not made sequential)."""
    host_play = [p for p in tasks("playbooks/host.yml") if p.get("name") == "Host - NVIDIA driver and container toolkit"][0]
    assert "'100%'" in host_play["serial"] and "k8sgpu_serial" in host_play["serial"]
    assert "throttle" not in host_play


def test_the_maintenance_reboot_is_throttled_by_the_fleet_limit():
    reboot = [t for t in tasks("roles/node_maintenance/tasks/reboot.yml") if "ansible.builtin.reboot" in t][0]
    assert reboot["throttle"] == ("{{ node_maintenance_max_unavailable | "
                                  "k8sgpu.nvidia._maintenance_throttle(ansible_play_hosts_all | length) }}")
