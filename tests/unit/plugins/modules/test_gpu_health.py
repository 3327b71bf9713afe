"""k8sgpu.nvidia.gpu_health main(), with nvidia-smi answered from the recorded H100 output and its variants."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.modules import gpu_health
from module_harness import AnsibleExitJson, AnsibleFailJson

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H100_XML = FIXTURES / "h100" / "nvidia-smi-q.xml"
HEALTH = FIXTURES / "gpu_health"
H100_UUID = "GPU-3df950bc-14e1-c147-af67-d6bc91665500"
H100_PROC_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n"


@pytest.fixture
def host(tmp_path):
    """A fake H100 host: sysfs device bound to nvidia, /proc files and an executable nvidia-smi stand-in."""
    dev = tmp_path / "sys/bus/pci/devices/0000:00:06.0"
    dev.mkdir(parents=True)
    for key, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
        (dev / key).write_text(f"{value}\n")
    (tmp_path / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    (dev / "driver").symlink_to(tmp_path / "sys/bus/pci/drivers/nvidia")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(H100_PROC_VERSION)
    (tmp_path / "proc/uptime").write_text("9500.25 100.00\n")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 99\n")
    smi.chmod(0o755)
    return tmp_path


def run_main(monkeypatch, args: dict, smi_answer=None):
    calls = []

    def run_command(self, cmd, **kwargs):
        assert isinstance(cmd, list) and not kwargs.get("use_unsafe_shell")
        assert kwargs.get("environ_update") == {"LC_ALL": "C"}
        calls.append(cmd)
        smi = next(i for i, arg in enumerate(cmd) if arg.endswith("/nvidia-smi"))
        assert cmd[smi + 1:] == ["-q", "-x"]
        return smi_answer
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as result:
            gpu_health.main()
    return result.value, calls


def host_args(host: Path, **extra) -> dict:
    args = {"nvidia_smi": str(host / "nvidia-smi"), "sysfs_root": str(host / "sys"), "proc_root": str(host / "proc"),
            "kernel_log": "none"}
    args.update(extra)
    return args


def xml(path: Path) -> tuple:
    return 0, path.read_text(), ""


@pytest.mark.parametrize("check_mode", [False, True])
def test_real_h100_is_healthy(monkeypatch, module_io, host, check_mode):
    result, calls = run_main(monkeypatch, host_args(host, _ansible_check_mode=check_mode), xml(H100_XML))
    assert isinstance(result, AnsibleExitJson)
    out = result.args[0]
    assert out["changed"] is False and out["status"] == "healthy"
    assert out["summary"]["unhealthy_gpus"] == [] and out["summary"]["gpu_count"] == 1
    (gpu,) = out["gpus"]
    assert gpu["uuid"] == H100_UUID and gpu["index"] == 0 and gpu["status"] == "healthy" and gpu["findings"] == []
    assert out["driver_version"] == "580.159.04" and out["xid_events"] == []
    assert module_io == [] and len(calls) == 1


@pytest.mark.parametrize("fixture, status", [
    ("ecc-dbe-volatile.xml", "needs_reset"),
    ("remapped-rows-pending.xml", "needs_reset"),
    ("remapped-rows-failure.xml", "replace"),
    ("retired-pages-pending.xml", "needs_reset"),
    ("recovery-gpu-reset.xml", "needs_reset"),
    ("recovery-node-reboot.xml", "needs_reboot"),
    ("recovery-drain-p2p.xml", "degraded"),
    ("reset-status-drain-and-reset.xml", "needs_reset"),
    ("hw-slowdown.xml", "degraded"),
])
def test_unhealthy_variants(monkeypatch, module_io, host, fixture, status):
    result, _calls = run_main(monkeypatch, host_args(host), xml(HEALTH / fixture))
    out = result.args[0]
    assert out["status"] == status and out["changed"] is False
    (unhealthy,) = out["summary"]["unhealthy_gpus"]
    assert unhealthy["uuid"] == H100_UUID and unhealthy["pci_bus_id"] == "00000000:00:06.0"
    assert unhealthy["status"] == status and unhealthy["checks"]


def test_fallen_off_the_bus_with_kernel_log(monkeypatch, module_io, host):
    dev = host / "sys/bus/pci/devices/0000:3b:00.0"
    dev.mkdir(parents=True)
    for key, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
        (dev / key).write_text(f"{value}\n")
    args = host_args(host, kernel_log="auto", kernel_log_path=str(HEALTH / "kernel-log-kmsg.txt"),
                     since="2026-11-29T00:00:00Z")
    # The boot was 9500.25 s before now: an ISO time long before it is 0 s after boot.
    result, _calls = run_main(monkeypatch, args, xml(H100_XML))
    out = result.args[0]
    assert out["status"] == "needs_reboot"
    assert [(g["pci_bus_id"], g["status"]) for g in out["gpus"]] == [
        ("00000000:00:06.0", "needs_reset"), ("0000:3b:00.0", "needs_reboot")]
    assert [e["code"] for e in out["xid_events"]] == [13, 13, 31, 94, 63, 48, 95, 64, 154, 74, 79]
    assert out["kernel_log"]["source"] == str(HEALTH / "kernel-log-kmsg.txt")


def test_since_in_seconds(monkeypatch, module_io, host):
    args = host_args(host, kernel_log="auto", kernel_log_path=str(HEALTH / "kernel-log-dmesg-r.txt"), since=9000)
    out = run_main(monkeypatch, args, xml(H100_XML))[0].args[0]
    assert [e["code"] for e in out["xid_events"]] == [79]
    assert out["kernel_log"]["since"] == 9000.0


def test_nvidia_smi_missing(monkeypatch, module_io, host):
    result, calls = run_main(monkeypatch, host_args(host, nvidia_smi=str(host / "nope/nvidia-smi")))
    assert isinstance(result, AnsibleFailJson) and calls == []
    msg = result.args[0]["msg"]
    assert msg.startswith(f"{socket.gethostname()}: nvidia_smi={host}/nope/nvidia-smi is not an executable file")
    assert "set nvidia_smi to its path" in msg


def test_driver_not_loaded(monkeypatch, module_io, host):
    (host / "proc/driver/nvidia/version").unlink()
    result, calls = run_main(monkeypatch, host_args(host))
    assert isinstance(result, AnsibleFailJson) and calls == []
    assert result.args[0]["msg"] == (
        f"{socket.gethostname()}: the NVIDIA kernel module is not loaded ({host}/proc/driver/nvidia/version does not "
        "exist), so the GPUs' health cannot be read. Load it ('modprobe nvidia'), or install the driver (role "
        "k8sgpu.nvidia.driver); if it fails to load, 'dmesg' says why.")


def test_version_mismatch(monkeypatch, module_io, host):
    answer = (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n", "")
    result, _calls = run_main(monkeypatch, host_args(host), answer)
    assert isinstance(result, AnsibleFailJson)
    msg = result.args[0]["msg"]
    assert msg.startswith(f"{socket.gethostname()}: nvidia-smi failed with 'Failed to initialize NVML: "
                          "Driver/library version mismatch'")
    assert "580.159.04" in msg and "(version 580.95)" in msg and "reboot the host" in msg


@pytest.mark.parametrize("args, match", [
    ({"timeout": -1}, "timeout must be 0"),
    ({"kernel_log": "dmesg", "kernel_log_path": "/tmp/x"}, "leave kernel_log at auto, not dmesg"),
    ({"since": [1]}, "since must be seconds since boot or an ISO 8601 time"),
    ({"since": "soon"}, "since='soon' is neither seconds since boot"),
])
def test_bad_options(monkeypatch, module_io, host, args, match):
    result, _calls = run_main(monkeypatch, host_args(host, **args), xml(H100_XML))
    assert isinstance(result, AnsibleFailJson) and match in result.args[0]["msg"]


def test_kernel_log_dmesg_runs_dmesg_r(monkeypatch, module_io, host):
    """kernel_log=dmesg: 'dmesg -r' through run_command, in the C locale."""
    calls = []

    def run_command(self, cmd, **kwargs):
        calls.append(cmd)
        if cmd[-1] == "-r":
            return 0, (HEALTH / "kernel-log-dmesg-r.txt").read_text(), ""
        return xml(H100_XML)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    with patch_module_args(host_args(host, nvidia_smi=None, kernel_log="dmesg", timeout=0)):
        with pytest.raises(AnsibleExitJson) as result:
            gpu_health.main()
    out = result.value.args[0]
    assert calls == [["/usr/bin/nvidia-smi", "-q", "-x"], ["/usr/bin/dmesg", "-r"]]
    assert out["kernel_log"]["source"] == "/usr/bin/dmesg -r" and out["status"] == "needs_reboot"


def test_return_documents_every_key(monkeypatch, module_io, host):
    """Every key the module returns (top level, a GPU, a finding, an event, the summary) is in RETURN."""
    doc = yaml.safe_load(gpu_health.RETURN)
    args = host_args(host, kernel_log="auto", kernel_log_path=str(HEALTH / "kernel-log-dmesg-r.txt"))
    out = run_main(monkeypatch, args, xml(HEALTH / "reset-status-drain-and-reset.xml"))[0].args[0]
    assert set(out) - {"changed"} == set(doc)
    gpus = doc["gpus"]["contains"]
    assert set(out["gpus"][0]) == set(gpus)
    assert set(out["gpus"][0]["findings"][0]) == set(gpus["findings"]["contains"])
    for key in ("ecc_errors", "retired_pages", "remapped_rows", "reset_status"):
        assert set(out["gpus"][0][key]) == set(gpus[key]["contains"]), key
    assert set(out["xid_events"][0]) == set(doc["xid_events"]["contains"])
    assert set(out["summary"]) == set(doc["summary"]["contains"])
    assert set(out["summary"]["unhealthy_gpus"][0]) == set(doc["summary"]["contains"]["unhealthy_gpus"]["contains"])
    assert set(out["kernel_log"]) == set(doc["kernel_log"]["contains"])
