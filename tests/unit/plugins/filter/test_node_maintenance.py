"""maintenance_plan: the node_maintenance role's decision (issue 12). The drain's decisions are the module
k8s_node_maintenance's (tests/unit/plugins/module_utils/test_k8s_drain.py); the filter drain_blockers, which no role
used, is removed (issue 48)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_plan import maintenance_plan


def test_plan_nothing_to_do():
    plan = maintenance_plan({"status": "skipped_no_gpu"}, {"version": "1.20.1", "changed_files": []}, "1.20.1")
    assert plan == {"needed": False, "reasons": []}
    plan = maintenance_plan({"status": "already_loaded"}, {"version": "1.20.1", "changed_files": []}, "")
    assert plan == {"needed": False, "reasons": []}


def test_plan_driver_and_toolkit_changes():
    plan = maintenance_plan({"status": "would_install"},
                            {"version": "1.20.0", "changed_files": ["/etc/containerd/conf.d/99-nvidia.toml"]},
                            "1.20.1")
    assert plan["needed"] is True
    assert plan["reasons"] == [
        "driver: packages to install or change",
        "container toolkit: 1.20.0 installed, 1.20.1 wanted",
        "container toolkit: /etc/containerd/conf.d/99-nvidia.toml would change",
    ]


def test_plan_toolkit_not_installed_and_reboot_pending():
    plan = maintenance_plan({"status": "installed_reboot_required"}, {"version": "", "changed_files": []}, "")
    assert plan["reasons"] == ["driver: installed, not loaded (reboot)", "container toolkit: to install"]


def test_plan_resumes_a_node_an_earlier_run_left_cordoned():
    plan = maintenance_plan({"status": "skipped_no_gpu"}, {"version": "1.20.1", "changed_files": []}, "1.20.1",
                            resume=True)
    assert plan == {"needed": True, "reasons": ["an earlier run cordoned the Node and did not finish"]}


def test_plan_without_the_roles_results():
    assert maintenance_plan(None, None, "")["needed"] is False


def test_step_times():
    from ansible_collections.k8sgpu.nvidia.plugins.filter._step_times import step_times
    marks = [["drain", 100.0], ["driver", 103.25], ["container toolkit", 104.0], ["wait", 110.0]]
    assert step_times(marks, 111.5) == "drain 3.2 s, driver 0.8 s, container toolkit 6.0 s, wait 1.5 s"
    assert step_times([], 5.0) == ""
    with pytest.raises(AnsibleFilterError, match="pairs"):
        step_times(["drain"], 1.0)


class TestMaintenanceSettings:
    def test_good(self):
        from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_settings import maintenance_settings
        assert maintenance_settings({"k8sgpu_serial": "25%", "k8sgpu_max_unavailable": 2, "x_retry_delay": 0.5,
                                     "x_timeout": "300", "x_expected_gpus": 0, "other": None}) == []

    @pytest.mark.parametrize("name,value,text", [
        ("k8sgpu_serial", 0, "k8sgpu_serial is 0: it must be a number of hosts per batch"),
        ("k8sgpu_serial", "0%", "k8sgpu_serial is 0%:"),
        ("k8sgpu_max_unavailable", "all", "GPU Nodes out of service at once"),
        ("node_maintenance_drain_retry_delay", 0, "node_maintenance_drain_retry_delay is 0: it must be a number of seconds more than 0"),
        ("node_maintenance_drain_timeout", "0", "whole number of seconds, 1 or more"),
        ("node_maintenance_expected_gpus", -1, "0 or more"),
    ])
    def test_bad(self, name, value, text):
        from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_settings import maintenance_settings
        problems = maintenance_settings({name: value})
        assert len(problems) == 1 and text in problems[0], problems


class TestMaintenanceHealth:
    GPU = {"pci_bus_id": "0000:01:00.0", "gpu": True}

    def facts(self, on_bus=2, loaded=True, seen=2):
        return {"nvidia_pci_devices": [self.GPU] * on_bus + [{"gpu": False}], "nvidia_driver_loaded": loaded,
                "nvidia_gpus": [{"name": "H100"}] * seen}

    @staticmethod
    def verify(status="passed", gpus=2, failures=()):
        return {"node_test_status": status, "node_test": {"passed": "passed on 2 GPU(s)", "skipped": "skipped (no GPU or driver)",
                                                          "failed": "FAILED on 1 of 2 GPU(s)"}[status],
                "node_test_failures": list(failures), "gpus": ["H100"] * gpus}

    def test_as_before(self):
        from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_health import maintenance_health
        assert maintenance_health(self.facts(), self.verify(), 2) == []

    def test_host_without_gpus_passes_a_skip(self):
        from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_health import maintenance_health
        assert maintenance_health(self.facts(0, False, 0), self.verify("skipped", 0), 0) == []

    def test_driver_not_loaded_and_skip_fail_a_gpu_host(self):
        from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_health import maintenance_health
        problems = maintenance_health(self.facts(loaded=False, seen=0), self.verify("skipped", 0), 2)
        assert problems == ["the NVIDIA driver is not loaded", "vectorAdd did not run (skipped) on a host that had 2 GPU(s)"]

    def test_gpu_missing_and_failed_vectoradd(self):
        from ansible_collections.k8sgpu.nvidia.plugins.filter._maintenance_health import maintenance_health
        problems = maintenance_health(self.facts(on_bus=1, seen=1), self.verify("failed", 1, ["GPU 1: wrong sum"]), 2)
        assert problems == ["1 of 2 GPU(s) missing from the PCI bus", "the driver sees 1 of 2 GPU(s)",
                            "vectorAdd FAILED on 1 of 2 GPU(s): GPU 1: wrong sum"]
