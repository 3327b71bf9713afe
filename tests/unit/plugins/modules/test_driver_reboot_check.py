"""k8sgpu.nvidia.driver_reboot_check: the boot time from procfs against the kernel modules' change times."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_kernels as boot
from ansible_collections.k8sgpu.nvidia.plugins.modules import driver_reboot_check
from module_harness import AnsibleExitJson, AnsibleFailJson

TICKS = os.sysconf("SC_CLK_TCK")
# A real /proc/1/stat of a container's systemd (Debian 12), fields 23 on cut off; starttime (field 22) 1234567.
PID1_STAT = ("1 (systemd) S 0 1 1 0 -1 4194560 2876 3811 31 1 9 10 2 3 20 0 1 0 1234567 "
             "22528000 3000 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 1 0 0 0 0 0\n")


def proc(root: Path, btime: int, pid1: str = PID1_STAT, release: str = "6.18.5") -> Path:
    (root / "1").mkdir(parents=True)
    (root / "stat").write_text(f"cpu  1 2 3 4\nintr 5\nctxt 6\nbtime {btime}\nprocesses 7\n")
    (root / "1/stat").write_text(pid1)
    (root / "sys/kernel").mkdir(parents=True)
    (root / "sys/kernel/osrelease").write_text(f"{release}\n")
    return root


def module_file(root: Path, rel: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")
    return path


def run(module_io, **params) -> dict:
    with patch_module_args(params), pytest.raises(AnsibleExitJson) as exc:
        driver_reboot_check.main()
    return exc.value.args[0]


def test_boot_time_is_when_pid1_started():
    """btime plus PID 1's start ticks: a container started 1234567 ticks after the host booted."""
    assert boot.read_boot_time_from(1_700_000_000, PID1_STAT, TICKS) == pytest.approx(
        1_700_000_000 + 1234567 / TICKS)


def test_a_command_name_with_spaces_and_parentheses(tmp_path):
    stat = PID1_STAT.replace("(systemd)", "(my (init) x)")
    root = proc(tmp_path / "proc", 1_700_000_000, stat)
    assert boot.read_boot_time(root, 100) == pytest.approx(1_700_000_000 + 12345.67)


def test_module_installed_after_the_boot_needs_it(tmp_path, module_io):
    now = time.time()
    # The host (or container) booted an hour ago; DKMS wrote the module just now.
    root = proc(tmp_path / "proc", int(now - 3600), PID1_STAT.replace(" 1234567 ", " 0 "))
    ko = module_file(tmp_path / "modules", "6.1.0-50-amd64/updates/dkms/nvidia-current.ko")
    module_file(tmp_path / "modules", "6.1.0-50-amd64/kernel/drivers/net/e1000.ko")
    res = run(module_io, proc_root=str(root), modules_root=str(tmp_path / "modules"))
    assert res["installed_since_boot"] is True and res["changed"] is False
    assert res["module_file"] == str(ko) and res["module_kernels"] == ["6.1.0-50-amd64"]
    assert res["module_time"] == pytest.approx(ko.stat().st_ctime, abs=0.01)
    assert res["boot_time"] == pytest.approx(int(now - 3600), abs=0.01)
    assert res["running_kernel"] == "6.18.5"
    assert "was installed after the boot: a reboot loads it" in res["detail"]


def test_booted_since_the_install_in_a_container(tmp_path, module_io):
    """The module was written before PID 1 (the container) started: booting again cannot load it."""
    modules = tmp_path / "modules"
    ko = module_file(modules, "6.1.0-50-amd64/updates/dkms/nvidia-current-uvm.ko.xz")
    ctime = ko.stat().st_ctime
    # PID 1 started 60 s after the module's ctime: btime + ticks/TICKS = ctime + 60.
    ticks = 1234567
    root = proc(tmp_path / "proc", int(ctime + 60 - ticks / TICKS) + 1)
    res = run(module_io, proc_root=str(root), modules_root=str(modules))
    assert res["installed_since_boot"] is False
    assert res["boot_time"] > res["module_time"]
    assert res["detail"] == (f"booted since the kernel module was installed ({ko}): the running kernel 6.18.5 has no "
                             "NVIDIA module (built for 6.1.0-50-amd64)")


def test_newest_module_of_every_kernel_counts(tmp_path, module_io):
    modules = tmp_path / "modules"
    module_file(modules, "6.1.0-40-amd64/updates/dkms/nvidia-current.ko")
    new = module_file(modules, "6.18.5/kernel/nvidia-535srv/nvidia.ko.zst")
    # The modification time does not count: dpkg sets it from the package (here 1970); the change time is now.
    os.utime(new, (1, 1))
    # build/ points into the headers: never followed.
    (modules / "6.18.5/build").symlink_to(modules / "6.1.0-40-amd64")
    root = proc(tmp_path / "proc", int(time.time()) + 100)
    res = run(module_io, proc_root=str(root), modules_root=str(modules))
    assert res["module_file"] == str(new)
    assert res["module_kernels"] == ["6.1.0-40-amd64", "6.18.5"]
    assert res["installed_since_boot"] is False
    assert "the running kernel 6.18.5 has one; if no driver is loaded, see dmesg" in res["detail"]


def test_no_module_installed(tmp_path, module_io):
    root = proc(tmp_path / "proc", 1_700_000_000)
    res = run(module_io, proc_root=str(root), modules_root=str(tmp_path / "absent"))
    assert res["module_file"] is None and res["module_time"] is None and res["module_kernels"] == []
    assert res["installed_since_boot"] is False
    assert res["detail"] == "no NVIDIA kernel module file under the modules root"


def test_unreadable_procfs_names_it(tmp_path, module_io):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/stat").write_text("cpu 1 2\n")
    with patch_module_args({"proc_root": str(tmp_path / "proc")}), pytest.raises(AnsibleFailJson) as exc:
        driver_reboot_check.main()
    assert exc.value.args[0]["msg"] == (f"cannot read the boot time from {tmp_path / 'proc'}: {tmp_path / 'proc/stat'} "
                                        "has no btime line. Is procfs mounted there (proc_root)?")


def test_on_this_machine_the_boot_is_before_now(module_io):
    """The real /proc: PID 1 started after the kernel booted and before now."""
    res = run(module_io)
    btime = int(next(line.split()[1] for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime ")))
    assert btime <= res["boot_time"] <= time.time()


def test_the_kernels_own_nvidia_modules_do_not_count(tmp_path, module_io):
    # Debian's 6.12 kernel ships kernel/drivers/platform/x86/nvidia-wmi-ec-backlight.ko: not the driver's module, so
    # a kernel with only that one has none (the code before counted it, as driver_kernels' did until 45ec5a0).
    modules = tmp_path / "modules"
    dkms = module_file(modules, "6.1.0-40-amd64/updates/dkms/nvidia-current.ko")
    module_file(modules, "6.12.95+deb12-amd64/kernel/drivers/platform/x86/nvidia-wmi-ec-backlight.ko.xz")
    root = proc(tmp_path / "proc", int(time.time()) + 100)
    res = run(module_io, proc_root=str(root), modules_root=str(modules))
    assert res["module_kernels"] == ["6.1.0-40-amd64"] and res["module_file"] == str(dkms)
