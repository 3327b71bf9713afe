"""k8sgpu.nvidia.gpu_facts main(), with nvidia-smi answered from the recorded H100 outputs."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.modules import gpu_facts
from module_harness import AnsibleExitJson, AnsibleFailJson

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H100 = FIXTURES / "h100"
H100_UUID = "GPU-3df950bc-14e1-c147-af67-d6bc91665500"
H100_PROC_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n"


@pytest.fixture
def host(tmp_path):
    """A fake H100 host: sysfs device, /proc/driver/nvidia/version and an executable nvidia-smi stand-in."""
    dev = tmp_path / "sys/bus/pci/devices/0000:00:06.0"
    dev.mkdir(parents=True)
    for key, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
        (dev / key).write_text(f"{value}\n")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(H100_PROC_VERSION)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 99\n")
    smi.chmod(0o755)
    return tmp_path


def fake_run_command(answers: dict, calls: list):
    """AnsibleModule.run_command stand-in: answers by the arguments after the nvidia-smi path."""
    def run_command(self, args, **kwargs):
        assert isinstance(args, list) and not kwargs.get("use_unsafe_shell")
        calls.append(args)
        smi = next(i for i, arg in enumerate(args) if arg.endswith("/nvidia-smi"))
        return answers[tuple(args[smi + 1:])]
    return run_command


def run_main(monkeypatch, args: dict, answers: dict):
    calls = []
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command(answers, calls))
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as result:
            gpu_facts.main()
    return result.value, calls


def h100_answers():
    return {
        ("-q", "-x"): (0, (H100 / "nvidia-smi-q.xml").read_text(), ""),
        ("--query-gpu=index,uuid,compute_cap", "--format=csv,noheader,nounits"): (0, (H100 / "query-compute-cap.csv").read_text(), ""),
    }


def host_args(host: Path, **extra) -> dict:
    return {"nvidia_smi": str(host / "nvidia-smi"), "sysfs_root": str(host / "sys"), "proc_root": str(host / "proc"), **extra}


@pytest.mark.parametrize("check_mode", [False, True])
def test_h100(monkeypatch, module_io, host, check_mode):
    result, calls = run_main(monkeypatch, host_args(host, _ansible_check_mode=check_mode), h100_answers())
    assert isinstance(result, AnsibleExitJson)
    out = result.args[0]
    assert out["changed"] is False
    facts = out["ansible_facts"]
    (gpu,) = facts["nvidia_gpus"]
    assert gpu == {
        "index": 0, "minor_number": 0, "uuid": H100_UUID, "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 81559, "compute_capability": "9.0",
        "mig_mode": "Disabled", "persistence_mode": "Enabled", "fabric_state": "N/A", "fabric_status": "N/A",
    }
    assert facts["nvidia_driver_version"] == "580.159.04"
    assert facts["nvidia_cuda_driver_version"] == "13.0"
    assert facts["nvidia_kernel_module_flavour"] == "open"
    assert facts["nvidia_driver_loaded"] is True
    assert facts["nvidia_driver_version_mismatch"] is False
    assert facts["nvidia_gpu_source"] == "nvidia-smi"
    assert facts["nvidia_pci_devices"] == [{
        "pci_bus_id": "0000:00:06.0", "vendor_id": "0x10de", "device_id": "0x2330", "class": "0x030200",
        "gpu": True, "driver": None, "nvswitch": False,
    }]
    assert facts["nvidia_nvswitches"] == []
    assert module_io == []
    assert len(calls) == 2 and calls[0][-3:] == [str(host / "nvidia-smi"), "-q", "-x"]


def test_version_mismatch_fails(monkeypatch, module_io, host):
    answers = {("-q", "-x"): (18, "Failed to initialize NVML: Driver/library version mismatch\n", "")}
    result, _calls = run_main(monkeypatch, host_args(host), answers)
    assert isinstance(result, AnsibleFailJson)
    out = result.args[0]
    assert "Driver/library version mismatch" in out["msg"] and "580.159.04" in out["msg"] and "reboot" in out["msg"]
    assert out["ansible_facts"]["nvidia_driver_version_mismatch"] is True


def test_version_mismatch_warns_with_fail_on_mismatch_false(monkeypatch, module_io, host):
    answers = {("-q", "-x"): (18, "Failed to initialize NVML: Driver/library version mismatch\n", "")}
    result, _calls = run_main(monkeypatch, host_args(host, fail_on_mismatch=False), answers)
    assert isinstance(result, AnsibleExitJson)
    facts = result.args[0]["ansible_facts"]
    assert facts["nvidia_driver_version_mismatch"] is True and facts["nvidia_gpu_source"] == "sysfs"
    assert len(module_io) == 1 and "reboot" in module_io[0]


def test_fail_on_missing(monkeypatch, module_io, tmp_path):
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    args = {"sysfs_root": str(tmp_path / "sys"), "proc_root": str(tmp_path / "proc"), "fail_on_missing": True}
    result, calls = run_main(monkeypatch, args, {})
    assert isinstance(result, AnsibleFailJson)
    assert result.args[0]["msg"] == f"{socket.gethostname()}: no NVIDIA GPU found in {tmp_path}/sys/bus/pci/devices"
    assert calls == []


def test_given_nvidia_smi_missing_falls_back_to_sysfs(monkeypatch, module_io, host):
    result, calls = run_main(monkeypatch, host_args(host, nvidia_smi=str(host / "nope/nvidia-smi")), {})
    assert isinstance(result, AnsibleExitJson) and calls == []
    facts = result.args[0]["ansible_facts"]
    assert facts["nvidia_gpu_source"] == "sysfs" and facts["nvidia_gpus"] == []
    assert facts["nvidia_driver_version"] == "580.159.04"  # from /proc
    assert [d["pci_bus_id"] for d in facts["nvidia_pci_devices"]] == ["0000:00:06.0"]
    assert any(f"nvidia_smi={host}/nope/nvidia-smi is not an executable file" in w for w in module_io)


def test_kernel_modules_per_installed_kernel(tmp_path):
    """gpu_facts' kernels option: driver_kernels' reading of every installed kernel, without its decision."""
    from ansible_collections.k8sgpu.nvidia.plugins.modules.gpu_facts import kernel_modules
    built = tmp_path / "lib/modules/6.1.0-44-amd64"
    (built / "updates/dkms").mkdir(parents=True)
    (built / "updates/dkms/nvidia-current.ko").write_bytes(b"\x7fELF")
    (built / "modules.dep").write_text("")
    bare = tmp_path / "lib/modules/6.1.0-50-amd64"
    bare.mkdir(parents=True)
    (bare / "modules.dep").write_text("")
    (tmp_path / "boot").mkdir()
    for release in ("6.1.0-44-amd64", "6.1.0-50-amd64"):
        (tmp_path / f"boot/vmlinuz-{release}").write_text("")
    found = kernel_modules(str(tmp_path), "6.1.0-44-amd64")
    assert found["6.1.0-44-amd64"]["status"] == "ok" and found["6.1.0-44-amd64"]["running"]
    assert found["6.1.0-50-amd64"]["status"] == "no_headers" and found["6.1.0-50-amd64"]["image"]
    assert "apt-get install linux-headers-6.1.0-50-amd64" in found["6.1.0-50-amd64"]["fix"]
    assert set(found["6.1.0-44-amd64"]) == {"status", "detail", "fix", "running", "image", "headers"}
