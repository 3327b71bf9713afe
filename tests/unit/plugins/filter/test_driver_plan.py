"""driver_plan and driver_outcome: the driver role's decisions for one host.

The facts are those gpu_facts and setup give on the lab's Debian 12 node containers and on the H100 machine (device
id 0x2330, driver 580.95.05, tests/unit/fixtures/h100/environment.txt); the dpkg results have the shape of
k8sgpu.nvidia.dpkg_packages' (packages, ready, held). Package names are Debian 12's and Ubuntu 24.04's.
"""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_outcome import driver_outcome
from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_plan import driver_plan

HOST = "gpu-01"
DEBIAN = {"distribution": "Debian", "distribution_major_version": "12", "kernel": "6.1.0-41-amd64",
          "architecture": "x86_64"}
UBUNTU = {"distribution": "Ubuntu", "distribution_major_version": "24", "kernel": "6.8.0-85-generic",
          "architecture": "x86_64"}
H100_PCI = [{"pci_bus_id": "0000:3b:00.0", "device_id": "0x2330", "gpu": True}]
V100_PCI = [{"pci_bus_id": "0000:3b:00.0", "device_id": "0x1db4", "gpu": True}]
NOT_LOADED = {"nvidia_driver_loaded": False, "nvidia_driver_version": None, "nvidia_gpus": []}


def facts(base=None, pci=None, loaded=None, flavour=None):
    out = {**(base or DEBIAN), **NOT_LOADED, "nvidia_pci_devices": H100_PCI if pci is None else pci}
    if loaded:
        out.update(nvidia_driver_loaded=True, nvidia_driver_version=loaded, nvidia_kernel_module_flavour=flavour)
    return out


def settings(**over):
    base = {"driver_branch": "", "driver_version": "", "driver_kernel_modules": "auto", "driver_ubuntu_server": True,
            "driver_hold": True, "driver_no_gpu": "skip", "driver_blacklist_nouveau": True,
            "driver_persistenced": True, "driver_reboot": "report", "driver_reboot_boot_time_command": "",
            "ansible_connection": "ssh", "inventory_hostname": HOST}
    return {**base, **over}


def dpkg(installed: dict, held=(), ready=None):
    """A dpkg_packages result: installed maps names to versions; ready defaults to every installed package."""
    packages = {n: {"installed": True, "version": v, "status": "installed",
                    "selection": "hold" if n in held else "install"} for n, v in installed.items()}
    return {"packages": packages, "ready": list(installed) if ready is None else ready, "held": list(held)}


# The kernel metapackages read beside the driver's packages, and their headers metapackages (Debian 12 amd64;
# Ubuntu without distribution_version, so without the HWE ones).
DEBIAN_KERNEL_METAPACKAGES = ["linux-image-amd64", "linux-image-cloud-amd64", "linux-image-rt-amd64",
                              "linux-headers-amd64", "linux-headers-cloud-amd64", "linux-headers-rt-amd64"]
UBUNTU_KERNEL_METAPACKAGES = [f"linux-{kind}-{flavour}" for kind in ("image", "headers")
                              for flavour in ("generic", "virtual", "nvidia", "aws", "azure", "gcp", "oracle")]

DEBIAN_OPEN = ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced", "gcc",
               "linux-headers-6.1.0-41-amd64"]


def test_fresh_debian_host_reads_both_flavours_then_installs_the_open_modules_and_holds():
    before = driver_plan(facts(), settings(), host=HOST)
    assert before["status"] == "pending" and not before["skip"] and before["has_gpu"]
    assert before["read"]["names"] == ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-smi",
                                       "nvidia-persistenced", "gcc", "linux-headers-6.1.0-41-amd64",
                                       *DEBIAN_KERNEL_METAPACKAGES]
    assert before["read"]["versions"] == {}
    assert not before["install"]["needed"] and before["result"]["packages"] == []

    plan = driver_plan(facts(), settings(), packages=dpkg({}), headers_available=True, host=HOST)
    assert plan["install"]["needed"]
    assert plan["install"]["names"] == DEBIAN_OPEN
    assert not plan["install"]["allow_change_held"]
    assert plan["kernel_modules"]["flavour"] == "open"
    assert plan["kernel_modules"]["reason"].startswith("auto: new install; every GPU (1) is Turing or later")
    assert plan["hold"] == {"packages": ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi",
                                         "nvidia-persistenced"],
                            "needed": True, "reason": "nvidia-driver, nvidia-open-kernel-dkms, nvidia-smi, "
                                                      "nvidia-persistenced not held"}
    assert plan["result"] == {"status": "pending", "detail": "", "reboot_required": False, "kernel_modules": "open",
                              "kernel_modules_reason": plan["kernel_modules"]["reason"], "packages": DEBIAN_OPEN}
    assert plan["configure"] == {"blacklist_nouveau": True, "persistenced": True, "persistenced_start": False}


def test_pinned_version_pins_the_versioned_packages_and_may_move_held_ones():
    plan = driver_plan(facts(), settings(driver_branch="535", driver_version="535.261.03"),
                       packages=dpkg({}), headers_available=True, host=HOST)
    assert plan["version_wanted"] == "535.261.03"
    assert plan["read"]["versions"] == {n: "535.261.03" for n in
                                        ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-smi"]}
    assert plan["install"]["names"] == ["nvidia-driver=535.261.03*", "nvidia-open-kernel-dkms=535.261.03*",
                                        "nvidia-smi=535.261.03*", "nvidia-persistenced", "gcc",
                                        "linux-headers-6.1.0-41-amd64"]
    assert plan["install"]["allow_change_held"]
    assert plan["install"]["allow_change_held_reason"] == "version 535.261.03 asked for"


def test_branch_alone_pins_to_the_branch():
    plan = driver_plan(facts(), settings(driver_branch=535), packages=dpkg({}), host=HOST)
    assert plan["install"]["names"][0] == "nvidia-driver=535*"


def test_converged_host_installs_nothing_and_holds_nothing_more():
    versions = {n: "535.261.03-1" for n in DEBIAN_OPEN}
    hold = ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced"]
    plan = driver_plan(facts(), settings(), packages=dpkg(versions, held=hold), headers_available=True, host=HOST)
    assert not plan["install"]["needed"] and plan["install"]["reason"] == "every package installed"
    assert not plan["hold"]["needed"] and plan["hold"]["reason"] == "every driver package held"
    # The installed open package is what auto keeps.
    assert plan["kernel_modules"]["reason"] == "auto: keeps the installed nvidia-open-kernel-dkms 535.261.03-1"


def test_held_packages_of_another_version_are_reinstalled_with_leave_to_change_them():
    hold = ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced"]
    installed = {n: "535.216.03-1" for n in DEBIAN_OPEN}
    # dpkg_packages leaves out of ready the packages not at the version asked for.
    plan = driver_plan(facts(), settings(driver_version="535.261.03"),
                       packages=dpkg(installed, held=hold, ready=["nvidia-persistenced", "gcc",
                                                                  "linux-headers-6.1.0-41-amd64"]),
                       headers_available=True, host=HOST)
    assert plan["install"]["needed"] and plan["install"]["allow_change_held"]
    assert plan["install"]["reason"] == ("nvidia-driver, nvidia-open-kernel-dkms, nvidia-smi missing or not of "
                                         "version 535.261.03")
    assert not plan["hold"]["needed"]


def test_driver_hold_false_holds_nothing():
    plan = driver_plan(facts(), settings(driver_hold=False), packages=dpkg({}), host=HOST)
    assert plan["hold"] == {"packages": [], "needed": False, "reason": "driver_hold is false"}


def test_other_branch_installed_is_not_kept_and_the_new_one_installed():
    """A 550 package does not count for driver_branch 535: a new install, by GPU."""
    plan = driver_plan(facts(base={**DEBIAN, "distribution_major_version": "13"}), settings(driver_branch="550"),
                       packages=dpkg({"nvidia-kernel-dkms": "535.274.02-1"}), host=HOST)
    assert plan["kernel_modules"]["flavour"] == "open"
    assert plan["kernel_modules"]["reason"].startswith("auto: new install")


def test_tesla_branch_on_debian_13_takes_the_tesla_packages_and_the_proprietary_module():
    plan = driver_plan(facts(base={**DEBIAN, "distribution_major_version": "13"}), settings(driver_branch="535"),
                       packages=dpkg({}), headers_available=True, host=HOST)
    assert not plan["open_packaged"]
    assert plan["packages"][:3] == ["nvidia-tesla-535-driver", "nvidia-tesla-535-kernel-dkms", "nvidia-tesla-535-smi"]
    assert plan["install"]["names"][:3] == ["nvidia-tesla-535-driver=535*", "nvidia-tesla-535-kernel-dkms=535*",
                                            "nvidia-tesla-535-smi=535*"]
    assert plan["read"]["names"][:4] == ["nvidia-tesla-535-driver", "nvidia-tesla-535-kernel-dkms",
                                         "nvidia-tesla-535-open-kernel-dkms", "nvidia-tesla-535-smi"]
    assert plan["driver_package"] == "nvidia-tesla-535-driver"


def test_open_asked_on_a_volta_gpu_is_an_error_naming_the_gpu():
    plan = driver_plan(facts(pci=V100_PCI), settings(driver_kernel_modules="open"), host=HOST)
    assert plan["error"].startswith(f"{HOST}: driver_kernel_modules=open, but GPU 0000:3b:00.0 (PCI device id 0x1db4)")


def test_proprietary_on_a_volta_gpu_and_auto_choose_the_proprietary_module():
    for asked in ("proprietary", "auto"):
        plan = driver_plan(facts(pci=V100_PCI), settings(driver_kernel_modules=asked), packages=dpkg({}), host=HOST)
        assert plan["kernel_modules"]["flavour"] == "proprietary" and not plan["error"]
        assert plan["packages"][1] == "nvidia-kernel-dkms"


def test_loaded_driver_of_the_branch_is_left_alone():
    plan = driver_plan(facts(base=UBUNTU, loaded="580.95.05", flavour="open"), settings(driver_branch="580"), host=HOST)
    assert plan["skip"] and plan["status"] == "already_loaded"
    assert plan["result"]["detail"] == "driver 580.95.05 loaded (open kernel module)"
    assert plan["result"]["kernel_modules"] == "open"


@pytest.mark.parametrize("over", [{"driver_branch": "570"}, {"driver_version": "580.82"},
                                  {"driver_kernel_modules": "proprietary"}])
def test_loaded_driver_of_another_branch_version_or_flavour_is_replaced(over):
    plan = driver_plan(facts(base=UBUNTU, loaded="580.95.05", flavour="open"), settings(**{"driver_branch": "580", **over}),
                       host=HOST)
    assert not plan["skip"] and plan["status"] == "pending"


def test_debian_tesla_branch_replaces_a_loaded_open_module():
    plan = driver_plan(facts(loaded="580.95.05", flavour="open"), settings(driver_branch="580"), host=HOST)
    assert not plan["skip"] and plan["kernel_modules"]["switch"]
    assert plan["kernel_modules"]["flavour"] == "proprietary"


def test_switching_flavour_allows_changing_held_packages():
    plan = driver_plan(facts(loaded="580.95.05", flavour="open"), settings(driver_kernel_modules="proprietary"),
                       packages=dpkg({}), host=HOST)
    assert plan["kernel_modules"]["switch"] and plan["install"]["allow_change_held"]
    assert plan["install"]["allow_change_held_reason"] == "the kernel-module flavour switches"


def test_host_without_gpu_is_skipped_or_installed_as_asked():
    skipped = driver_plan(facts(pci=[]), settings(), host=HOST)
    assert skipped["skip"] and skipped["result"] == {
        "status": "skipped_no_gpu", "detail": "no NVIDIA GPU in sysfs", "reboot_required": False,
        "kernel_modules": None, "kernel_modules_reason": "", "packages": []}
    install = driver_plan(facts(pci=[]), settings(driver_no_gpu="install"), host=HOST)
    assert not install["skip"] and install["result"]["detail"] == "no NVIDIA GPU in sysfs"
    assert install["result"]["kernel_modules"] == "open"


def test_no_headers_for_the_running_kernel_takes_the_generic_ones_and_says_so():
    plan = driver_plan(facts(), settings(), packages=dpkg({}), headers_available=False, host=HOST)
    assert plan["packages"][-1] == "linux-headers-amd64"
    assert plan["result"]["detail"] == ("no linux-headers-6.1.0-41-amd64 in the package sources, so DKMS builds for "
                                        "the distribution kernel")
    arm = driver_plan(facts(base={**DEBIAN, "architecture": "aarch64"}), settings(), packages=dpkg({}),
                      headers_available=False, host=HOST)
    assert arm["packages"][-1] == "linux-headers-arm64"


@pytest.mark.parametrize("server,modules,names", [
    (True, "open", ["nvidia-driver-580-server-open", "nvidia-utils-580-server"]),
    (False, "proprietary", ["nvidia-driver-580", "nvidia-utils-580"]),
])
def test_ubuntu_metapackages(server, modules, names):
    plan = driver_plan(facts(base=UBUNTU), settings(driver_branch="580", driver_ubuntu_server=server,
                                                    driver_kernel_modules=modules),
                       packages=dpkg({}), headers_available=True, host=HOST)
    assert plan["packages"] == names + ["linux-headers-6.8.0-85-generic"]
    assert plan["install"]["names"] == [f"{n}=580*" for n in names] + ["linux-headers-6.8.0-85-generic"]
    assert plan["hold"]["packages"] == names
    assert plan["read"]["names"] == ["nvidia-driver-580", "nvidia-driver-580-open", "nvidia-driver-580-server",
                                     "nvidia-driver-580-server-open", "nvidia-utils-580", "nvidia-utils-580-server",
                                     "linux-headers-6.8.0-85-generic", *UBUNTU_KERNEL_METAPACKAGES]


def test_configuration_follows_the_settings():
    plan = driver_plan(facts(loaded="580.95.05", flavour="open"),
                       settings(driver_blacklist_nouveau=False, driver_persistenced="false"), host=HOST)
    assert plan["configure"] == {"blacklist_nouveau": False, "persistenced": False, "persistenced_start": True}


@pytest.mark.parametrize("over,allowed,reason", [
    ({}, False, "driver_reboot=report: a needed reboot is only reported"),
    ({"driver_reboot": "reboot"}, True, "driver_reboot=reboot"),
    ({"driver_reboot": "reboot", "ansible_connection": "local"}, False,
     "the control host (a local connection) is never rebooted"),
    ({"driver_reboot": "reboot", "inventory_hostname": "localhost"}, False,
     "the control host (a local connection) is never rebooted"),
    ({"driver_reboot": "reboot", "ansible_connection": "community.docker.docker"}, False,
     "a container shares the host's boot_id: rebooted only with driver_reboot_boot_time_command"),
    ({"driver_reboot": "reboot", "ansible_connection": "community.docker.docker",
      "driver_reboot_boot_time_command": "cut -d' ' -f22 /proc/1/stat"}, True, "driver_reboot=reboot"),
])
def test_reboot_is_allowed_only_where_safe(over, allowed, reason):
    assert driver_plan(facts(), settings(**over), host=HOST)["reboot"] == {"allowed": allowed, "reason": reason}


def test_bad_input_names_what_is_wrong():
    with pytest.raises(AnsibleFilterError, match="ansible_facts"):
        driver_plan("x", settings())
    with pytest.raises(AnsibleFilterError, match="lack driver_hold"):
        driver_plan(facts(), {k: v for k, v in settings().items() if k != "driver_hold"})
    with pytest.raises(AnsibleFilterError, match="dpkg_packages result"):
        driver_plan(facts(), settings(), packages=["nvidia-driver"])
    with pytest.raises(AnsibleFilterError, match="driver_plan's result"):
        driver_outcome({}, facts())


def _installed_plan(loaded=None, flavour=None):
    f = facts(loaded=loaded, flavour=flavour)
    return f, driver_plan(f, settings(), packages=dpkg({}), headers_available=True, host=HOST)


def test_outcome_loaded_now():
    f, plan = _installed_plan(loaded="535.261.03", flavour="open")
    got = driver_outcome(plan, f, "535.261.03-1", {"module_time": 1.0, "installed_since_boot": True, "detail": ""})
    assert got["status"] == "installed_loaded" and not got["reboot_required"] and got["version"] == "535.261.03-1"


def test_outcome_reboot_required_when_installed_since_boot_or_no_module_found():
    f, plan = _installed_plan()
    for boot in ({"module_time": 5.0, "installed_since_boot": True, "detail": "x"}, {"module_time": None}):
        got = driver_outcome(plan, f, "535.261.03-1", boot)
        assert got["status"] == "installed_reboot_required" and got["reboot_required"] and got["detail"] == ""


def test_outcome_not_loaded_after_a_boot_says_why():
    f, plan = _installed_plan()
    boot = {"module_time": 5.0, "installed_since_boot": False, "detail": "the kernel 6.1.0-41-amd64 has no module"}
    got = driver_outcome(plan, f, "535.261.03-1", boot)
    assert got["status"] == "installed_not_loaded" and not got["reboot_required"]
    assert got["detail"] == "the kernel 6.1.0-41-amd64 has no module"


def test_outcome_loaded_module_of_the_other_flavour_is_not_loaded_now():
    f, plan = _installed_plan(loaded="535.261.03", flavour="proprietary")
    plan["kernel_modules"]["flavour"] = "open"
    got = driver_outcome(plan, f, "535.261.03-1", {"module_time": 5.0, "installed_since_boot": True})
    assert got["status"] == "installed_reboot_required"


def test_outcome_in_check_mode_with_packages_to_install_would_install():
    f, plan = _installed_plan()
    got = driver_outcome(plan, f, "", None, True)
    assert got["status"] == "would_install" and "version" not in got and got["packages"] == DEBIAN_OPEN


# --- What a stopped run left (issue 36) ----------------------------------------------------------------------------
# Versions as Debian 12 has them: the 470 branch (nvidia-tesla-470-*, libnvidia-tesla-470-*), its own 535, the
# toolkit's and DKMS's own.
UNFINISHED_470 = {
    "nvidia-tesla-470-alternative": {"version": "470.256.02-1~deb12u1", "status": "unpacked"},
    "libnvidia-tesla-470-glcore": {"version": "470.256.02-1~deb12u1", "status": "half-installed"},
    "nvidia-tesla-470-kernel-dkms": {"version": "470.256.02-1~deb12u1", "status": "half-configured"},
    "glx-alternative-nvidia": {"version": "1.2.2", "status": "unpacked"},
    "libnvidia-container1": {"version": "1.17.8-1", "status": "unpacked"},
    "dkms": {"version": "3.0.10-8+deb12u1", "status": "unpacked"},
}


def with_unfinished(result: dict, unfinished: dict, interrupted: bool = True) -> dict:
    return {**result, "unfinished": unfinished, "interrupted": interrupted}


def test_another_branchs_unfinished_packages_are_removed_and_the_rest_finished_before_apt():
    plan = driver_plan(facts(), settings(), packages=with_unfinished(dpkg({}), UNFINISHED_470), headers_available=True,
                       host=HOST)
    # Debian 12's own branch (535) asked for: only the 470 packages go, not the toolkit's, DKMS or the alternatives.
    assert plan["repair"]["remove"] == ["libnvidia-tesla-470-glcore", "nvidia-tesla-470-alternative",
                                        "nvidia-tesla-470-kernel-dkms"]
    assert plan["repair"]["configure"] and plan["repair"]["needed"] and plan["install"]["needed"]
    assert "another branch than 535" in plan["repair"]["reason"] and "journal" in plan["repair"]["reason"]


def test_the_asked_branchs_own_unfinished_packages_are_finished_not_removed():
    own = {"nvidia-tesla-470-driver": {"version": "470.256.02-1~deb12u1", "status": "unpacked"},
           "libnvidia-tesla-470-cuda1": {"version": "470.256.02-1~deb12u1", "status": "unpacked"}}
    plan = driver_plan(facts(pci=V100_PCI), settings(driver_branch="470"),
                       packages=with_unfinished(dpkg({}), own, interrupted=False), headers_available=True, host=HOST)
    assert plan["repair"]["remove"] == [] and plan["repair"]["configure"]


def test_nothing_to_finish_when_apt_need_not_run():
    ready = dpkg({n: "535.261.03-1" for n in DEBIAN_OPEN})
    unrelated = {"postgresql-15": {"version": "15.14-0+deb12u1", "status": "half-configured"}}
    plan = driver_plan(facts(), settings(), packages=with_unfinished(ready, unrelated), headers_available=True, host=HOST)
    # The site's own unfinished package is not the driver role's to finish when it installs nothing.
    assert not plan["install"]["needed"]
    assert plan["repair"] == {"needed": False, "remove": [], "configure": False, "reason": "nothing unfinished"}


def test_another_branch_left_unfinished_beside_an_installed_driver_is_still_removed():
    ready = dpkg({n: "535.261.03-1" for n in DEBIAN_OPEN})
    plan = driver_plan(facts(), settings(), packages=with_unfinished(ready, UNFINISHED_470, interrupted=False),
                       headers_available=True, host=HOST)
    assert plan["repair"]["needed"] and not plan["repair"]["configure"]
    assert "nvidia-tesla-470-kernel-dkms" in plan["repair"]["remove"]


def test_ubuntu_branch_from_the_version_and_no_branch_removes_nothing():
    unfinished = {"nvidia-driver-570-open": {"version": "570.195.03-0ubuntu0.24.04.1", "status": "unpacked"},
                  "libnvidia-compute-580": {"version": "580.95.05-0ubuntu0.24.04.2", "status": "unpacked"}}
    plan = driver_plan(facts(UBUNTU), settings(driver_branch="580"),
                       packages=with_unfinished(dpkg({}), unfinished), headers_available=True, host=HOST)
    assert plan["repair"]["remove"] == ["nvidia-driver-570-open"]
    plan = driver_plan(facts(UBUNTU), settings(driver_branch=""), packages=with_unfinished(dpkg({}), unfinished),
                       headers_available=True, host=HOST)
    assert plan["repair"]["remove"] == []
