"""Issue 45 item 1: the NVIDIA module of every installed kernel, the kernel the host will boot, and the reboot refused
when that kernel has no built module of the branch; the headers metapackage of each kernel metapackage.

The trees are laid out as Debian 12 has them: the kernel images /boot/vmlinuz-<release>, the kernel's own modules
(/lib/modules/<release>/kernel, modules.dep), its headers (the build link into /usr/src/linux-headers-<release>),
DKMS 3's records (/var/lib/dkms/nvidia-current/<version>/<release>/x86_64/module/*.ko.xz and the
kernel-<release>-x86_64 link of the installed version) and the module it installed
(/lib/modules/<release>/updates/dkms/nvidia-current.ko.xz). Releases: bookworm's 6.1.0-50-amd64 and
bookworm-backports' 6.12.57+deb12-amd64 (which sorts after it: dpkg's order, not the strings').
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_plan import driver_plan
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _driver_kernels as dk
from ansible_collections.k8sgpu.nvidia.plugins.modules import driver_kernels
from module_harness import AnsibleExitJson, AnsibleFailJson

OLD, NEW = "6.1.0-50-amd64", "6.12.57+deb12-amd64"
HOST = "gpu-01"
VERSION = "535.261.03"


def write(root: Path, rel: str, text: str = "") -> Path:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def kernel(root: Path, release: str, image: bool = True, headers: bool = True) -> None:
    """A Debian kernel package's files (image, own modules) and, with ``headers``, its headers package's."""
    if image:
        write(root, f"/boot/vmlinuz-{release}", "kernel")
    write(root, f"/lib/modules/{release}/modules.dep")
    write(root, f"/lib/modules/{release}/kernel/drivers/net/e1000.ko")
    if headers:
        write(root, f"/usr/src/linux-headers-{release}/Makefile")
        os.symlink(f"/usr/src/linux-headers-{release}", root / f"lib/modules/{release}/build")


def dkms_built(root: Path, release: str, version: str = VERSION, installed: bool = True,
               module: str = "nvidia-current") -> None:
    """What `dkms install` leaves: the build in DKMS's tree, the module in /lib/modules, the installed link."""
    write(root, f"/var/lib/dkms/{module}/{version}/{release}/x86_64/module/{module}.ko.xz")
    if installed:
        write(root, f"/lib/modules/{release}/updates/dkms/{module}.ko.xz")
        link = root / f"var/lib/dkms/{module}/kernel-{release}-x86_64"
        os.symlink(f"{version}/{release}/x86_64", link)


@pytest.fixture
def patched(tmp_path):
    """A host converged on 6.1.0-50, then patched: 6.12.57+deb12 installed with its headers, not built yet."""
    kernel(tmp_path, OLD)
    dkms_built(tmp_path, OLD)
    kernel(tmp_path, NEW)
    return tmp_path


# --- the headers metapackage per kernel flavour -----------------------------------------------------------------

DEBIAN = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.12",
          "kernel": OLD, "architecture": "x86_64", "nvidia_driver_loaded": False,
          "nvidia_pci_devices": [{"pci_bus_id": "0000:3b:00.0", "device_id": "0x2330", "gpu": True}]}
UBUNTU = {**DEBIAN, "distribution": "Ubuntu", "distribution_major_version": "24", "distribution_version": "24.04",
          "kernel": "6.8.0-85-generic"}
SETTINGS = {"driver_branch": "", "driver_version": "", "driver_kernel_modules": "auto", "driver_ubuntu_server": True,
            "driver_hold": True, "driver_no_gpu": "skip", "driver_blacklist_nouveau": True,
            "driver_persistenced": True, "driver_reboot": "report", "driver_reboot_boot_time_command": "",
            "ansible_connection": "ssh", "inventory_hostname": HOST}


def dpkg(*names: str, ready_too: tuple = ()) -> dict:
    packages = {n: {"installed": True, "version": "1", "status": "installed", "selection": "install"}
                for n in names + ready_too}
    return {"packages": packages, "ready": list(names + ready_too), "held": []}


@pytest.mark.parametrize("image,headers", [
    ("linux-image-amd64", "linux-headers-amd64"),
    ("linux-image-cloud-amd64", "linux-headers-cloud-amd64"),
    ("linux-image-rt-amd64", "linux-headers-rt-amd64"),
])
def test_debian_installs_the_headers_metapackage_of_the_kernel_metapackage(image, headers):
    before = driver_plan(DEBIAN, SETTINGS)
    assert image in before["read"]["names"] and headers in before["read"]["names"]
    plan = driver_plan(DEBIAN, SETTINGS, packages=dpkg(image), headers_available=True)
    # The running kernel's headers as before, and the flavour's metapackage: the next kernel comes with headers.
    assert f"linux-headers-{OLD}" in plan["packages"] and headers in plan["packages"], plan["packages"]
    assert headers in plan["install"]["names"] and plan["headers"]["metapackages"] == [headers]
    others = {"linux-headers-amd64", "linux-headers-cloud-amd64", "linux-headers-rt-amd64"} - {headers}
    assert not others & set(plan["packages"])


def test_debian_arm64_and_two_flavours_installed():
    facts = {**DEBIAN, "architecture": "aarch64"}
    plan = driver_plan(facts, SETTINGS, packages=dpkg("linux-image-arm64", "linux-image-rt-arm64"),
                       headers_available=True)
    assert plan["headers"]["metapackages"] == ["linux-headers-arm64", "linux-headers-rt-arm64"]


@pytest.mark.parametrize("image,headers", [
    ("linux-image-generic", "linux-headers-generic"),
    ("linux-image-generic-hwe-24.04", "linux-headers-generic-hwe-24.04"),
    ("linux-image-nvidia", "linux-headers-nvidia"),
])
def test_ubuntu_installs_the_headers_metapackage_of_the_kernel_metapackage(image, headers):
    settings = {**SETTINGS, "driver_branch": "580"}
    plan = driver_plan(UBUNTU, settings, packages=dpkg(image), headers_available=True)
    assert plan["headers"]["metapackages"] == [headers] and headers in plan["install"]["names"]


def test_headers_metapackage_installed_changes_nothing():
    """A converged host (the driver, the headers, the metapackage installed): nothing to install."""
    plan = driver_plan(DEBIAN, SETTINGS, headers_available=True, packages=dpkg(
        "linux-image-amd64", "linux-headers-amd64", "nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi",
        "nvidia-persistenced", "gcc", f"linux-headers-{OLD}"))
    assert plan["install"]["needed"] is False, plan["install"]["reason"]


def test_no_kernel_metapackage_no_headers_metapackage_and_the_option_off():
    """A host (or container) without a kernel metapackage gets the running kernel's headers only, as before; with
    driver_kernel_headers false no metapackage is read or installed."""
    plan = driver_plan(DEBIAN, SETTINGS, packages=dpkg(), headers_available=True)
    assert plan["headers"]["metapackages"] == [] and not any(p.startswith("linux-headers-amd") for p in plan["packages"])
    off = {**SETTINGS, "driver_kernel_headers": False}
    plan = driver_plan(DEBIAN, off, packages=dpkg("linux-image-amd64"), headers_available=True)
    assert plan["headers"]["metapackages"] == [] and "linux-image-amd64" not in plan["read"]["names"]


# --- the per-kernel module status -------------------------------------------------------------------------------

def test_the_new_kernel_without_a_module_is_not_built(patched):
    kernels = dk.kernel_status(patched, dk.dkms_tree(patched), "535", running=OLD)
    assert list(kernels) == [OLD, NEW]  # dpkg's order: 6.12 after 6.1
    assert kernels[OLD]["ok"] and kernels[OLD]["status"] == "ok" and kernels[OLD]["running"]
    assert kernels[OLD]["module_files"] == [f"/lib/modules/{OLD}/updates/dkms/nvidia-current.ko.xz"]
    assert kernels[OLD]["dkms"] == [{"module": "nvidia-current", "version": VERSION, "kernel": OLD,
                                     "arch": "x86_64", "state": "installed"}]
    assert kernels[NEW]["status"] == "not_built" and kernels[NEW]["headers"] and not kernels[NEW]["ok"]
    assert kernels[NEW]["fix"] == f"dkms autoinstall -k {NEW}"


def test_a_kernel_without_headers_and_one_of_another_branch(tmp_path):
    kernel(tmp_path, OLD)
    dkms_built(tmp_path, OLD, version="470.256.02")
    kernel(tmp_path, NEW, headers=False)
    kernels = dk.kernel_status(tmp_path, dk.dkms_tree(tmp_path), "535")
    assert kernels[OLD]["status"] == "not_built" and "DKMS has branch 470" in kernels[OLD]["detail"]
    assert kernels[NEW]["status"] == "no_headers" and not kernels[NEW]["headers"]
    assert kernels[NEW]["fix"] == f"apt-get install linux-headers-{NEW} && dkms autoinstall -k {NEW}"


def test_built_but_not_installed_is_not_ok(tmp_path):
    kernel(tmp_path, OLD)
    dkms_built(tmp_path, OLD, installed=False)
    assert dk.dkms_tree(tmp_path)[0]["state"] == "built"
    kernels = dk.kernel_status(tmp_path, dk.dkms_tree(tmp_path), "535")
    assert kernels[OLD]["status"] == "not_built" and "built, not installed" in kernels[OLD]["detail"]


def test_a_prebuilt_module_without_dkms_counts(tmp_path):
    """Ubuntu's linux-modules-nvidia-<branch>-server-<release>: a module file, no DKMS record."""
    release = "6.8.0-85-generic"
    kernel(tmp_path, release, headers=False)
    write(tmp_path, f"/lib/modules/{release}/kernel/nvidia-580srv/nvidia.ko")
    assert dk.kernel_status(tmp_path, [], "580")[release]["ok"]


def test_the_kernels_own_nvidia_modules_are_not_the_driver(patched):
    """Debian's 6.12 image ships drivers/platform/x86/nvidia-wmi-ec-backlight.ko (seen in the lab): no driver module."""
    write(patched, f"/lib/modules/{NEW}/kernel/drivers/platform/x86/nvidia-wmi-ec-backlight.ko.xz")
    kernels = dk.kernel_status(patched, dk.dkms_tree(patched), "535")
    assert kernels[NEW]["module_files"] == [] and kernels[NEW]["status"] == "not_built"


def test_what_dkms_left_of_a_removed_kernel_is_no_kernel(tmp_path):
    kernel(tmp_path, OLD)
    write(tmp_path, "/lib/modules/6.1.0-40-amd64/updates/dkms/nvidia-current.ko")
    assert list(dk.installed_kernels(tmp_path)) == [OLD]


def test_dkms_status_lines_of_dkms_3_and_2():
    text = (f"nvidia-current/{VERSION}, {OLD}, x86_64: installed\n"
            f"nvidia-current/{VERSION}, {NEW}, x86_64: built (WARNING! Diff between built and installed module!)\n"
            "nvidia-current/550.163.01: added\n"
            f"nvidia, 580.95.05, 6.8.0-85-generic, x86_64: installed\n"
            "zfs/2.1.11, 6.1.0-50-amd64, x86_64: installed\n"
            "Error! Could not locate dkms.conf file.\n")
    assert dk.parse_dkms_status(text) == [
        {"module": "nvidia-current", "version": VERSION, "kernel": OLD, "arch": "x86_64", "state": "installed"},
        {"module": "nvidia-current", "version": VERSION, "kernel": NEW, "arch": "x86_64", "state": "built"},
        {"module": "nvidia-current", "version": "550.163.01", "kernel": "", "arch": "", "state": "added"},
        {"module": "nvidia", "version": "580.95.05", "kernel": "6.8.0-85-generic", "arch": "x86_64",
         "state": "installed"}]


def test_fake_dkms_output_gives_the_same_status_as_the_tree(patched):
    status = f"nvidia-current/{VERSION}, {OLD}, x86_64: installed\n"
    read = dk.read_kernels(patched, running=OLD, dkms_status=status)
    assert read["branch"] == "535"  # inferred from the running kernel's module
    assert {k: v["status"] for k, v in read["kernels"].items()} == {OLD: "ok", NEW: "not_built"}


# --- the kernel the host will boot, and the reboot decision -----------------------------------------------------

def test_the_newest_image_boots_and_without_its_module_the_reboot_is_refused(patched):
    read = dk.read_kernels(patched, running=OLD, branch="535", host=HOST)
    assert read["boot"]["kernel"] == NEW and "newest installed kernel image" in read["boot"]["source"]
    reboot = read["reboot"]
    assert reboot["allowed"] is False and reboot["refused_kernels"] == [NEW]
    assert reboot["reason"].startswith(f"{HOST}: reboot refused: the kernel it would boot, {NEW} ")
    assert f"dkms autoinstall -k {NEW}" in reboot["reason"] and "branch 535" in reboot["reason"]


def test_once_built_the_reboot_is_allowed(patched):
    dkms_built(patched, NEW)
    reboot = dk.read_kernels(patched, running=OLD, branch="535", host=HOST)["reboot"]
    assert reboot["allowed"] is True and reboot["kernel"] == NEW, reboot


def test_grub_saved_default_boots_the_old_kernel(patched):
    write(patched, "/etc/default/grub", 'GRUB_DEFAULT=saved\nGRUB_TIMEOUT=5\n')
    write(patched, "/boot/grub/grubenv", "# GRUB Environment Block\nsaved_entry=gnulinux-advanced-2f1c>"
                                         f"gnulinux-{OLD}-advanced-2f1c\n" + "#" * 900)
    read = dk.read_kernels(patched, running=OLD, branch="535", host=HOST)
    assert read["boot"]["kernel"] == OLD and "saved_entry" in read["boot"]["source"]
    assert read["reboot"]["allowed"] is True


def test_saved_entry_without_grub_default_saved_is_not_what_grub_boots(patched):
    write(patched, "/etc/default/grub", "GRUB_DEFAULT=0\n")
    write(patched, "/boot/grub/grubenv", f"saved_entry=Debian GNU/Linux, with Linux {OLD}\n")
    assert dk.read_kernels(patched, running=OLD)["boot"]["kernel"] == NEW


def test_grub_reboot_next_entry_wins(patched):
    write(patched, "/etc/default/grub", "GRUB_DEFAULT=saved\n")
    write(patched, "/boot/grub/grubenv", f"saved_entry=Debian GNU/Linux, with Linux {OLD}\n"
                                         f"next_entry=Debian GNU/Linux, with Linux {NEW} (recovery mode)\n")
    read = dk.read_kernels(patched, running=OLD, branch="535", host=HOST)
    assert read["boot"]["kernel"] == NEW and "next_entry" in read["boot"]["source"]
    assert read["reboot"]["allowed"] is False


def test_an_entry_that_names_no_kernel_checks_every_image(patched):
    write(patched, "/etc/default/grub", 'GRUB_DEFAULT="1>2"\n')
    read = dk.read_kernels(patched, running=OLD, branch="535", host=HOST)
    assert read["boot"]["kernel"] == "" and read["boot"]["candidates"] == [OLD, NEW]
    assert read["reboot"]["allowed"] is False and read["reboot"]["refused_kernels"] == [NEW]


def test_a_container_without_images_checks_its_kernels(tmp_path):
    """The lab's node containers: headers and DKMS's module for 6.1.0-50, no image under /boot."""
    kernel(tmp_path, OLD, image=False)
    dkms_built(tmp_path, OLD)
    read = dk.read_kernels(tmp_path, running="6.18.5", host=HOST)
    assert read["boot"]["candidates"] == [OLD] and read["reboot"]["allowed"] is True
    assert read["branch"] == "535"  # the newest DKMS has


def test_no_nvidia_module_anywhere_is_nothing_to_check(tmp_path):
    kernel(tmp_path, OLD)
    assert dk.read_kernels(tmp_path, running=OLD, host=HOST)["reboot"]["allowed"] is True


def test_release_order_is_dpkgs():
    assert dk.newest([OLD, NEW, "6.1.0-9-amd64"]) == NEW
    assert dk.compare_releases("6.1.0-50-amd64", "6.1.0-9-amd64") > 0
    assert dk.compare_releases("6.12.57+deb12-amd64", "6.12.57~bpo12-amd64") > 0


# --- the module: build what is missing, check mode, a second run ------------------------------------------------

def run_module(params: dict, check_mode: bool = False) -> dict:
    with patch_module_args({**params, "_ansible_check_mode": check_mode}), pytest.raises(AnsibleExitJson) as exc:
        driver_kernels.main()
    return exc.value.args[0]


def test_module_builds_the_missing_kernel_once(patched, module_io, monkeypatch):
    calls = []

    def fake_run(self, args, **_kw):
        calls.append(args)
        dkms_built(patched, args[-1])  # what dkms autoinstall -k <release> leaves
        return 0, "", ""

    monkeypatch.setattr(driver_kernels.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/sbin/dkms")
    monkeypatch.setattr(driver_kernels.AnsibleModule, "run_command", fake_run)
    monkeypatch.setattr(driver_kernels.os, "uname", lambda: os.uname_result(("Linux", "h", OLD, "#1", "x86_64")))
    params = {"root": str(patched), "branch": "535", "build": True, "host": HOST}

    checked = run_module(params, check_mode=True)
    assert checked["changed"] is True and checked["would_build"] == [NEW] and calls == []
    assert checked["reboot"]["allowed"] is False

    first = run_module(params)
    assert calls == [["/usr/sbin/dkms", "autoinstall", "-k", NEW]]
    assert first["changed"] is True and first["built"] == [NEW] and first["reboot"]["allowed"] is True
    assert first["kernels"][NEW]["status"] == "ok"

    second = run_module(params)
    assert second["changed"] is False and second["built"] == [] and len(calls) == 1


def test_module_reports_a_kernel_without_headers(tmp_path, module_io, monkeypatch):
    kernel(tmp_path, OLD)
    dkms_built(tmp_path, OLD)
    kernel(tmp_path, NEW, headers=False)
    monkeypatch.setattr(driver_kernels.os, "uname", lambda: os.uname_result(("Linux", "h", OLD, "#1", "x86_64")))
    res = run_module({"root": str(tmp_path), "build": True, "host": HOST})
    assert res["changed"] is False and res["kernels"][NEW]["status"] == "no_headers"
    assert res["reboot"]["allowed"] is False and f"linux-headers-{NEW}" in res["reboot"]["reason"]
    assert any(NEW in w and "no headers" in w for w in module_io), module_io
    assert f"{NEW}: no_headers - " in "\n".join(res["summary"])


def boot_proc(root: Path, booted: float) -> Path:
    """A procfs with btime ``booted`` and PID 1 started at the boot (starttime 0 ticks)."""
    write(root, "/stat", f"cpu  1 2 3 4\nbtime {int(booted)}\n")
    write(root, "/1/stat", "1 (systemd) S " + " ".join(["0"] * 19) + " 22528000 3000\n")
    write(root, "/sys/kernel/osrelease", f"{OLD}\n")
    return root


def test_boot_check_reads_the_boot_before_the_build(patched, tmp_path_factory, module_io, monkeypatch):
    """driver_reboot_check's reading in the same run (the driver role's one module run after an install): the module
    installed after the boot asks for a reboot, and the module this run builds for another kernel is not counted."""
    import time
    proc_root = boot_proc(tmp_path_factory.mktemp("proc"), time.time() - 3600)
    monkeypatch.setattr(driver_kernels.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/sbin/dkms")
    monkeypatch.setattr(driver_kernels.AnsibleModule, "run_command",
                        lambda self, args, **_kw: (dkms_built(patched, args[-1]), (0, "", ""))[1])
    monkeypatch.setattr(driver_kernels.os, "uname", lambda: os.uname_result(("Linux", "h", OLD, "#1", "x86_64")))
    res = run_module({"root": str(patched), "branch": "535", "build": True, "host": HOST, "boot_check": True,
                      "proc_root": str(proc_root)})
    check = res["reboot_check"]
    assert res["built"] == [NEW] and check["module_kernels"] == [OLD], res
    assert check["installed_since_boot"] is True and check["running_kernel"] == OLD
    assert check["module_file"] == str(patched / f"lib/modules/{OLD}/updates/dkms/nvidia-current.ko.xz")
    assert "a reboot loads it" in check["detail"]
    assert run_module({"root": str(patched), "host": HOST})["reboot_check"] is None


def test_boot_check_fails_when_no_kernel_has_a_module(tmp_path, tmp_path_factory, module_io, monkeypatch):
    kernel(tmp_path, OLD)
    dkms_built(tmp_path, OLD, installed=False)  # built, never installed
    proc_root = boot_proc(tmp_path_factory.mktemp("proc"), 1_700_000_000)
    monkeypatch.setattr(driver_kernels.os, "uname", lambda: os.uname_result(("Linux", "h", OLD, "#1", "x86_64")))
    with patch_module_args({"root": str(tmp_path), "host": HOST, "boot_check": True, "proc_root": str(proc_root)}), \
            pytest.raises(AnsibleFailJson) as exc:
        driver_kernels.main()
    msg = exc.value.args[0]["msg"]
    assert msg.startswith(f"{HOST}: no kernel has an NVIDIA kernel module under /lib/modules"), msg
    assert f"nvidia-current/{VERSION} {OLD} x86_64: built" in msg and "make.log" in msg


def test_stale_initramfs_older_than_the_blacklist(tmp_path):
    """A run stopped between the blacklist's write and update-initramfs: that kernel's initramfs is older."""
    import os as _os
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_kernels import stale_initramfs
    (tmp_path / "boot").mkdir()
    (tmp_path / "etc/modprobe.d").mkdir(parents=True)
    old, new = tmp_path / "boot/initrd.img-6.1.0-40-amd64", tmp_path / "boot/initrd.img-6.1.0-44-amd64"
    conf = tmp_path / "etc/modprobe.d/blacklist-nouveau.conf"
    for path, when in ((old, 1000), (conf, 2000), (new, 3000)):
        path.write_text("x")
        _os.utime(path, (when, when))
    kernels = ["6.1.0-40-amd64", "6.1.0-44-amd64", "6.1.0-50-amd64"]  # the last without an initramfs
    assert stale_initramfs(tmp_path, kernels, ["/etc/modprobe.d/blacklist-nouveau.conf"]) == ["6.1.0-40-amd64"]
    assert stale_initramfs(tmp_path, kernels, ["/etc/modprobe.d/absent.conf"]) == []
    assert stale_initramfs(tmp_path, kernels, []) == []
