"""Issue 45 items 3 and 4 (driver side): driver_source=nvidia (NVIDIA's CUDA network repository) and NVSwitch hosts.

The plan (filter driver_plan), the fabric manager's version and service (filters driver_fabric_manager,
driver_fabric_manager_service) and verify's fabric wait (filter gpu_fabric_pending). Facts are those gpu_facts gives
(nvidia_nvswitches as _nvswitch.nvswitches writes them, LS10 device 0x22a3); fabric states are the H200 host's real
ones (../shared/fixtures/h200x2: Completed/Success) and NVML's other states. Package names and repository
directories are those of NVIDIA's Driver Installation Guide (module_utils/_driver_plan.py cites it). Every test here
fails on the code before issue 45 item 3 (driver_source had one choice, no fabric manager, no such filters).
"""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_fabric_manager import driver_fabric_manager
from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_fabric_manager_service import \
    driver_fabric_manager_service
from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_outcome import driver_outcome
from ansible_collections.k8sgpu.nvidia.plugins.filter._driver_plan import driver_plan
from ansible_collections.k8sgpu.nvidia.plugins.filter._gpu_fabric_pending import gpu_fabric_pending

HOST = "hgx-01"
DEBIAN12 = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.12",
            "kernel": "6.1.0-41-amd64", "architecture": "x86_64"}
DEBIAN13 = {**DEBIAN12, "distribution_major_version": "13", "distribution_version": "13.2"}
UBUNTU2404 = {"distribution": "Ubuntu", "distribution_major_version": "24", "distribution_version": "24.04",
              "kernel": "6.8.0-85-generic", "architecture": "x86_64"}
H100_PCI = [{"pci_bus_id": f"0000:{b}:00.0", "device_id": "0x2330", "gpu": True} for b in ("18", "2a")]
SWITCHES = [{"pci_bus_id": f"0000:{b}:00.0", "device_id": "0x22a3", "generation": "LS10",
             "name": "GH100 [H100 NVSwitch]", "driver": None} for b in ("05", "06", "07", "08")]


def facts(base=None, switches=(), loaded=None):
    out = {**(base or DEBIAN12), "nvidia_driver_loaded": bool(loaded), "nvidia_driver_version": loaded,
           "nvidia_gpus": [], "nvidia_pci_devices": H100_PCI, "nvidia_nvswitches": list(switches)}
    if loaded:
        out["nvidia_kernel_module_flavour"] = "open"
    return out


def settings(**over):
    base = {"driver_source": "nvidia", "driver_branch": "580", "driver_version": "", "driver_kernel_modules": "auto",
            "driver_ubuntu_server": True, "driver_hold": True, "driver_no_gpu": "skip",
            "driver_blacklist_nouveau": True, "driver_persistenced": True, "driver_reboot": "report",
            "driver_reboot_boot_time_command": "", "ansible_connection": "ssh", "inventory_hostname": HOST}
    return {**base, **over}


def dpkg(installed: dict, held=()):
    packages = {n: {"installed": True, "version": v} for n, v in installed.items()}
    return {"packages": packages, "ready": list(installed), "held": list(held)}


@pytest.mark.parametrize("base, directory, key, fingerprint", [
    (DEBIAN12, "debian12", "3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    (DEBIAN13, "debian13", "8793F200.pub", "02182E60104FCDC26EAE1B8597A5D4CB8793F200"),
    ({**UBUNTU2404, "distribution_version": "22.04"}, "ubuntu2204", "3bf863cc.pub",
     "EB693B3035CD5710E231E123A4B469963BF863CC"),
    (UBUNTU2404, "ubuntu2404", "3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
])
def test_the_repository_directory_key_and_fingerprint_of_each_supported_release(base, directory, key, fingerprint):
    plan = driver_plan(facts(base), settings())
    assert plan["error"] == "" and plan["source"] == "nvidia"
    assert plan["repository"] == {"name": directory, "arch": "x86_64", "key_file": key, "fingerprint": fingerprint}


@pytest.mark.parametrize("base", [
    {**DEBIAN12, "distribution_major_version": "11", "distribution_version": "11.9"},
    {**UBUNTU2404, "distribution_version": "20.04"},
    {**DEBIAN12, "architecture": "aarch64"},
])
def test_an_unsupported_release_is_refused_naming_the_host_and_the_fix(base):
    error = driver_plan(facts(base), settings())["error"]
    assert error.startswith(f"{HOST}: driver_source=nvidia supports") and "Set driver_source=distribution" in error


def test_nvidia_source_needs_a_branch():
    error = driver_plan(facts(), settings(driver_branch=""))["error"]
    assert HOST in error and "needs driver_branch" in error


@pytest.mark.parametrize("flavour, debian, ubuntu580, ubuntu590", [
    ("open", "nvidia-open", "nvidia-open-580", "nvidia-open"),
    ("proprietary", "cuda-drivers", "cuda-drivers-580", "cuda-drivers"),
])
def test_nvidias_package_names_by_flavour_and_release(flavour, debian, ubuntu580, ubuntu590):
    plan = driver_plan(facts(), settings(driver_kernel_modules=flavour), packages=dpkg({}))
    assert plan["driver_package"] == debian and plan["packages"][:2] == [debian, "gcc"]
    assert f"{debian}=580*" in plan["install"]["names"] and debian in plan["hold"]["packages"]
    assert plan["read"]["versions"] == {"nvidia-open": "580", "cuda-drivers": "580"}
    plan = driver_plan(facts(UBUNTU2404), settings(driver_kernel_modules=flavour), packages=dpkg({}))
    assert plan["driver_package"] == ubuntu580 and ubuntu580 in plan["hold"]["packages"]
    plan = driver_plan(facts(UBUNTU2404), settings(driver_kernel_modules=flavour, driver_branch="590"),
                       packages=dpkg({}))
    assert plan["driver_package"] == ubuntu590


def test_an_installed_nvidia_metapackage_tells_the_flavour_and_nothing_is_installed_again():
    installed = {"cuda-drivers": "580.95.05-1", "gcc": "4:12.2.0-3", "linux-headers-6.1.0-41-amd64": "6.1.158-1"}
    plan = driver_plan(facts(), settings(), packages=dpkg(installed, held=["cuda-drivers"]))
    assert plan["kernel_modules"]["flavour"] == "proprietary", plan["kernel_modules"]
    assert plan["install"]["needed"] is False and plan["hold"]["needed"] is False


def test_a_distribution_source_on_an_nvswitch_host_is_refused_with_the_fix():
    error = driver_plan(facts(switches=SWITCHES), settings(driver_source="distribution"))["error"]
    assert error.startswith(f"{HOST}: 4 NVSwitch(es) on the PCI bus (0000:05:00.0 (LS10)")
    assert "Set driver_source=nvidia and driver_branch" in error
    # Without an NVSwitch the distribution source stays as it was.
    assert driver_plan(facts(), settings(driver_source="distribution"))["error"] == ""


def test_the_fabric_manager_on_nvswitch_hosts_only_read_with_the_driver_and_not_skipped_when_loaded():
    plan = driver_plan(facts(switches=SWITCHES, loaded="580.95.05"), settings())
    assert plan["fabric_manager"] == {"needed": True, "package": "nvidia-fabricmanager", "nvswitches": 4}
    # The loaded driver is kept, but the steps run for the fabric manager.
    assert plan["status"] == "already_loaded" and plan["skip"] is False
    assert "nvidia-fabricmanager" in plan["read"]["names"] and "nvidia-fabricmanager" not in plan["packages"]
    plain = driver_plan(facts(loaded="580.95.05"), settings())
    assert plain["fabric_manager"]["needed"] is False and plain["skip"] is True
    assert "nvidia-fabricmanager" not in plain["read"]["names"]
    ubuntu = driver_plan(facts(UBUNTU2404, switches=SWITCHES), settings())
    assert ubuntu["fabric_manager"]["package"] == "nvidia-fabricmanager-580"


def test_a_kept_driver_stays_already_loaded_after_the_nvswitch_hosts_steps():
    f = facts(switches=SWITCHES, loaded="580.95.05")
    plan = driver_plan(f, settings(), packages=dpkg({"nvidia-open": "580.95.05-1", "gcc": "4:12.2.0-3",
                                                     "linux-headers-6.1.0-41-amd64": "6.1.158-1"},
                                                    held=["nvidia-open"]))
    assert plan["install"]["needed"] is False
    assert driver_outcome(plan, f, "580.95.05-1")["status"] == "already_loaded"


def _plan(**over):
    return driver_plan(facts(switches=SWITCHES), settings(**over), packages=dpkg({}))


def test_the_fabric_manager_takes_exactly_the_installed_drivers_version():
    step = driver_fabric_manager(_plan(), dpkg({}), "580.95.05-1")
    assert step == {"install": True, "name": "nvidia-fabricmanager=580.95.05-*", "package": "nvidia-fabricmanager",
                    "version": "580.95.05", "pin": "580.95.05-*", "hold_needed": True,
                    "reason": "nvidia-fabricmanager not installed, the driver 580.95.05"}
    # Of the driver's version and held: nothing to do.
    same = driver_fabric_manager(_plan(), dpkg({"nvidia-fabricmanager": "580.95.05-1"},
                                               held=["nvidia-fabricmanager"]), "580.95.05-1")
    assert same["install"] is False and same["hold_needed"] is False
    # The driver moved on (the rolling upgrade): the fabric manager moves with it.
    moved = driver_fabric_manager(_plan(), dpkg({"nvidia-fabricmanager": "580.82.07-1"},
                                                held=["nvidia-fabricmanager"]), "1:580.95.05-1")
    assert moved["install"] is True and moved["name"] == "nvidia-fabricmanager=580.95.05-*"
    # Check mode before the driver's install: the version asked for.
    ahead = driver_fabric_manager(_plan(driver_version="580.95.05"), dpkg({}), "", True)
    assert ahead["install"] is True and ahead["name"] == "nvidia-fabricmanager=580.95.05*"
    off = driver_fabric_manager(driver_plan(facts(), settings(), packages=dpkg({})), dpkg({}), "580.95.05-1")
    assert off["install"] is False and off["hold_needed"] is False
    with pytest.raises(AnsibleFilterError):
        driver_fabric_manager({}, dpkg({}))


def test_the_fabric_manager_service_restarts_only_with_the_new_driver_loaded():
    plan = _plan()
    loaded = facts(switches=SWITCHES, loaded="580.95.05")
    result = {"version": "580.95.05-1", "rebooted": False}
    assert driver_fabric_manager_service(plan, loaded, result, True)["state"] == "restarted"
    assert driver_fabric_manager_service(plan, loaded, result, False)["state"] == "started"
    # Rebooted into it: systemd started it at boot.
    assert driver_fabric_manager_service(plan, loaded, {**result, "rebooted": True}, True)["state"] == "started"
    # The old module still loaded, or none (a container, a reboot pending): enabled only.
    old = facts(switches=SWITCHES, loaded="580.82.07")
    waiting = driver_fabric_manager_service(plan, old, result, True)
    assert waiting["state"] is None and "next boot" in waiting["reason"]
    assert driver_fabric_manager_service(plan, facts(switches=SWITCHES), result, True)["state"] is None


H200_GPU = {"index": 0, "pci_bus_id": "00000000:18:00.0", "fabric_state": "Completed", "fabric_status": "Success"}


@pytest.mark.parametrize("state, status, check", [
    ("In Progress", "N/A", "fabric_not_completed"),
    ("Not Started", "N/A", "fabric_not_completed"),
    ("Completed", "NVML_ERROR_INSUFFICIENT_RESOURCES", "fabric_failed"),
])
def test_verify_waits_for_every_gpu_completed_with_success(state, status, check):
    gpus = [H200_GPU, {**H200_GPU, "index": 1, "pci_bus_id": "00000000:2a:00.0", "fabric_state": state,
                       "fabric_status": status}]
    pending = gpu_fabric_pending(gpus)
    assert len(pending) == 1 and pending[0].startswith(f"GPU 1 00000000:2a:00.0: {check} - "), pending
    assert gpu_fabric_pending([H200_GPU, {"index": 2, "fabric_state": "N/A", "fabric_status": "N/A"},
                               {"index": 3, "fabric_state": None}]) == []
    with pytest.raises(AnsibleFilterError):
        gpu_fabric_pending("not a list")


def test_a_host_skipped_for_want_of_a_gpu_is_not_refused_for_its_source():
    f = {**facts({**DEBIAN12, "distribution_major_version": "11", "distribution_version": "11.9"}),
         "nvidia_pci_devices": []}
    plan = driver_plan(f, settings())
    assert plan["skip"] is True and plan["error"] == "", plan["error"]
