"""driver_kernel_modules for Debian's Tesla branches (nvidia-tesla-<branch>-*: proprietary kernel module only).

Debian 13 packages its own driver at 550 (nvidia-driver) and the 535 branch as nvidia-tesla-535-driver 535.274.02
with nvidia-tesla-535-kernel-dkms and no open kernel module package (apt-cache search on trixie, 2026-11-23).
"""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_plan import driver_kernel_modules
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_plan import installed_flavour

HOST = "gpu-t-01"
# gpu_facts' facts of an H100 host without a loaded driver (sysfs only), and of an image build without a GPU.
H100 = {"nvidia_driver_loaded": False, "nvidia_gpus": [],
        "nvidia_pci_devices": [{"pci_bus_id": "0000:3b:00.0", "device_id": "0x2330", "gpu": True}]}
NO_GPU = {"nvidia_driver_loaded": False, "nvidia_gpus": [], "nvidia_pci_devices": []}
TESLA_VERSION = "535.274.02-1~deb13u1"


def installed(name: str, version: str) -> dict:
    return {name: {"installed": True, "version": version, "status": "installed", "selection": "hold"}}


@pytest.mark.parametrize("facts", [H100, NO_GPU])
def test_auto_new_install_takes_the_proprietary_module(facts):
    got = driver_kernel_modules(facts, "auto", {}, "535", HOST, open_packaged=False)
    assert got == {"flavour": "proprietary", "switch": False, "error": "", "reason": (
        "auto: new install; the packages of driver branch 535 have the proprietary kernel module only")}


def test_open_asked_fails_naming_host_branch_and_fix():
    got = driver_kernel_modules(H100, "open", None, "535", HOST, open_packaged=False)
    assert got["flavour"] is None
    assert got["error"].startswith(f"{HOST}: driver_kernel_modules=open, but the packages of driver branch 535 "
                                   "have no open kernel module")
    assert "Set driver_kernel_modules to auto or proprietary" in got["error"]


def test_installed_tesla_package_tells_the_flavour():
    packages = installed("nvidia-tesla-535-kernel-dkms", TESLA_VERSION)
    assert installed_flavour(packages, "535") == ("proprietary", f"nvidia-tesla-535-kernel-dkms {TESLA_VERSION}")
    got = driver_kernel_modules(NO_GPU, "auto", packages, "535", HOST, open_packaged=False)
    assert got["flavour"] == "proprietary" and not got["switch"]
    assert got["reason"] == f"auto: keeps the installed nvidia-tesla-535-kernel-dkms {TESLA_VERSION}"


def test_loaded_open_module_is_replaced_for_a_tesla_branch():
    facts = {**H100, "nvidia_driver_loaded": True, "nvidia_kernel_module_flavour": "open"}
    got = driver_kernel_modules(facts, "auto", {}, "535", HOST, open_packaged=False)
    assert got["flavour"] == "proprietary" and got["switch"]
    assert got["reason"].startswith("auto: replaces the loaded open kernel module: the packages of driver branch 535")


def test_the_suite_branch_keeps_open_by_default():
    """open_packaged defaults to true: nothing changes for the suite's own nvidia-driver."""
    assert driver_kernel_modules(NO_GPU, "auto", {}, "550", HOST)["flavour"] == "open"
