"""driver_kernel_modules: the kernel-module flavour for a host, from facts gpu_facts gathers from a sysfs/proc tree.

The facts come from the collection's own gatherer (module_utils/_nvidia_smi.gather) over a sysfs and procfs tree
built like the real ones: the H100's device id 0x2330 and /proc/driver/nvidia/version line are those recorded on the
GPU machine (tests/unit/fixtures/h100/environment.txt); V100 0x1db4, P100 0x15f8 and T4 0x1eb8 are those of
NVIDIA's PCI id lists (T4's is in the "Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README, whose
first entry is TITAN RTX 0x1E02).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_plan import DriverPlanError, driver_kernel_modules
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_plan import installed_flavour
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import (
    gather,
    parse_compute_caps,
    parse_smi_xml,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ENVIRONMENT = (FIXTURES / "h100" / "environment.txt").read_text()
H100_PROC = next(line for line in ENVIRONMENT.splitlines() if line.startswith("NVRM version:")) + "\n"
H100_SYSFS = re.search(r"/sys/bus/pci/devices/(\S+) vendor=(\S+) device=(\S+) class=(\S+)", ENVIRONMENT).groups()
# The proprietary module's line (NVIDIA's format: no "Open").
PROPRIETARY_PROC = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 00:00:00 UTC 2025\n"
V100, P100, T4 = "0x1db4", "0x15f8", "0x1eb8"
HOST = "gpu-a-01"


def host_facts(tmp_path: Path, devices: list[tuple[str, str]], proc: str | None = None,
               audio: bool = False) -> dict:
    """ansible_facts as gpu_facts returns them for GPUs (address, device id), optionally a loaded module."""
    for address, device in devices:
        functions = [(address, device, "0x030200")]
        if audio:  # the HDMI audio function of a GPU is an NVIDIA device too, not a GPU
            functions.append((address[:-1] + "1", "0x10f0", "0x040300"))
        for addr, dev_id, pci_class in functions:
            d = tmp_path / "sys/bus/pci/devices" / addr
            d.mkdir(parents=True)
            for key, value in (("vendor", "0x10de"), ("device", dev_id), ("class", pci_class)):
                (d / key).write_text(value + "\n")
    if proc is not None:
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text(proc)
    return gather(lambda args: (1, "", ""), None, sysfs_root=str(tmp_path / "sys"),
                  proc_root=str(tmp_path / "proc"))[0]


def dpkg(**installed: str) -> dict:
    """dpkg_packages' packages for Debian's candidates: the given ones installed at the given version."""
    names = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-smi"]
    out = {n: {"installed": False, "version": None, "status": "unknown", "selection": "unknown"} for n in names}
    for name, version in installed.items():
        name = name.replace("_", "-")
        out[name] = {"installed": True, "version": version, "status": "installed", "selection": "hold"}
    return out


def test_recorded_h100_facts_are_what_the_tests_build(tmp_path):
    address, vendor, device, pci_class = H100_SYSFS
    assert (vendor, device, pci_class) == ("0x10de", "0x2330", "0x030200")
    facts = host_facts(tmp_path, [(address, device)], H100_PROC)
    assert facts["nvidia_kernel_module_flavour"] == "open" and facts["nvidia_driver_version"] == "580.159.04"


# --- the defect: the default must keep what is loaded ---------------------------------------------------------

def test_default_keeps_loaded_proprietary_on_h100(tmp_path):
    facts = host_facts(tmp_path, [(H100_SYSFS[0], "0x2330")], PROPRIETARY_PROC)
    got = driver_kernel_modules(facts, "auto", None, "535", HOST)
    assert got == {"flavour": "proprietary", "switch": False, "error": "",
                   "reason": "auto: keeps the loaded proprietary kernel module"}


def test_default_keeps_loaded_open_on_h100(tmp_path):
    facts = host_facts(tmp_path, [(H100_SYSFS[0], "0x2330")], H100_PROC)
    got = driver_kernel_modules(facts, "auto", None, "", HOST)
    assert got["flavour"] == "open" and not got["switch"]


def test_loaded_flavour_wins_over_installed_packages(tmp_path):
    # Packages of another flavour on disk (installed but not rebooted into): the running module is kept.
    facts = host_facts(tmp_path, [(H100_SYSFS[0], "0x2330")], PROPRIETARY_PROC)
    got = driver_kernel_modules(facts, "auto", dpkg(nvidia_open_kernel_dkms="535.261.03-1~deb12u1"), "", HOST)
    assert got["flavour"] == "proprietary" and not got["switch"]


# --- no loaded module: the installed package of the branch ----------------------------------------------------

@pytest.mark.parametrize("package,flavour", [("nvidia-kernel-dkms", "proprietary"), ("nvidia-open-kernel-dkms", "open")])
def test_default_keeps_installed_flavour_of_the_branch(tmp_path, package, flavour):
    facts = host_facts(tmp_path, [("0000:3b:00.0", "0x2330")])
    got = driver_kernel_modules(facts, "auto", dpkg(**{package.replace("-", "_"): "535.261.03-1~deb12u1"}), "535", HOST)
    assert got["flavour"] == flavour and not got["switch"]
    assert got["reason"] == f"auto: keeps the installed {package} 535.261.03-1~deb12u1"


def test_installed_package_of_another_branch_does_not_count(tmp_path):
    facts = host_facts(tmp_path, [("0000:3b:00.0", "0x2330")])
    got = driver_kernel_modules(facts, "auto", dpkg(nvidia_kernel_dkms="470.256.02-1"), "535", HOST)
    assert got["flavour"] == "open" and got["reason"].startswith("auto: new install")


def test_removed_package_does_not_count():
    packages = dpkg()
    packages["nvidia-kernel-dkms"] = {"installed": False, "version": None, "status": "config-files", "selection": "deinstall"}
    assert installed_flavour(packages) == (None, "")


@pytest.mark.parametrize("name,flavour", [
    ("nvidia-driver-580-server-open", "open"), ("nvidia-driver-580-open", "open"),
    ("nvidia-driver-580-server", "proprietary"), ("nvidia-driver-580", "proprietary"),
])
def test_ubuntu_metapackages(name, flavour):
    packages = {name: {"installed": True, "version": "580.95.05-0ubuntu0.24.04.2"},
                "nvidia-utils-580-server": {"installed": True, "version": "580.95.05-0ubuntu0.24.04.2"}}
    assert installed_flavour(packages, "580") == (flavour, f"{name} 580.95.05-0ubuntu0.24.04.2")
    assert installed_flavour(packages, "550") == (None, "")


# --- new install: by GPU ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["0x2330", T4, "0x20b0", "0x1e02"])
def test_new_install_turing_and_later_gets_open(tmp_path, device):
    facts = host_facts(tmp_path, [("0000:3b:00.0", device)], audio=True)
    got = driver_kernel_modules(facts, "auto", dpkg(), "", HOST)
    assert got["flavour"] == "open" and not got["switch"] and not got["error"]


@pytest.mark.parametrize("device", [V100, P100, "0x1df6", "0x1d81"])
def test_new_install_before_turing_gets_proprietary(tmp_path, device):
    facts = host_facts(tmp_path, [("0000:3b:00.0", device)], audio=True)
    got = driver_kernel_modules(facts, "auto", dpkg(), "", HOST)
    assert got["flavour"] == "proprietary" and not got["switch"]
    assert f"0000:3b:00.0 (PCI device id {device}) is older than Turing" in got["reason"]


def test_mixed_host_gets_proprietary(tmp_path):
    facts = host_facts(tmp_path, [("0000:3b:00.0", "0x2330"), ("0000:af:00.0", V100)])
    got = driver_kernel_modules(facts, "auto", dpkg(), "", HOST)
    assert got["flavour"] == "proprietary" and "0000:af:00.0 (PCI device id 0x1db4)" in got["reason"]
    assert "0000:3b:00.0" not in got["reason"]


def test_no_sysfs_gpu_uses_compute_capability_of_the_recorded_h100():
    gpus = parse_smi_xml((FIXTURES / "h100" / "nvidia-smi-q.xml").read_text())["gpus"]
    caps = parse_compute_caps((FIXTURES / "h100" / "query-compute-cap.csv").read_text())
    for gpu in gpus:
        gpu["compute_capability"] = caps[gpu["uuid"]][1]
    facts = {"nvidia_pci_devices": [], "nvidia_gpus": gpus, "nvidia_driver_loaded": False}
    assert driver_kernel_modules(facts, "auto", None, "", HOST)["flavour"] == "open"
    facts["nvidia_gpus"] = [dict(gpus[0], compute_capability="7.0", name="Tesla V100-SXM2-16GB")]
    got = driver_kernel_modules(facts, "auto", None, "", HOST)
    assert got["flavour"] == "proprietary" and "compute capability 7.0" in got["reason"]


def test_no_gpu_image_build_gets_open_and_says_why(tmp_path):
    got = driver_kernel_modules(host_facts(tmp_path, []), "auto", dpkg(), "", HOST)
    assert got["flavour"] == "open" and "without a GPU" in got["reason"]


# --- explicit requests: the only way to switch ----------------------------------------------------------------

def test_explicit_open_switches_loaded_proprietary(tmp_path):
    facts = host_facts(tmp_path, [(H100_SYSFS[0], "0x2330")], PROPRIETARY_PROC)
    got = driver_kernel_modules(facts, "open", None, "", HOST)
    assert got["flavour"] == "open" and got["switch"] is True
    assert "switch from the loaded proprietary kernel module to open" in got["reason"]


def test_explicit_proprietary_switches_installed_open(tmp_path):
    facts = host_facts(tmp_path, [("0000:3b:00.0", "0x2330")])
    got = driver_kernel_modules(facts, "proprietary", dpkg(nvidia_open_kernel_dkms="535.261.03-1"), "", HOST)
    assert got["flavour"] == "proprietary" and got["switch"] is True


def test_explicit_same_as_loaded_is_no_switch(tmp_path):
    facts = host_facts(tmp_path, [(H100_SYSFS[0], "0x2330")], H100_PROC)
    assert driver_kernel_modules(facts, "open", None, "", HOST)["switch"] is False


@pytest.mark.parametrize("device", [V100, P100])
def test_explicit_open_on_pre_turing_fails_naming_host_gpu_and_fix(tmp_path, device):
    facts = host_facts(tmp_path, [("0000:3b:00.0", device)], PROPRIETARY_PROC)
    got = driver_kernel_modules(facts, "open", None, "", HOST)
    assert got["flavour"] is None
    assert got["error"].startswith(f"{HOST}: driver_kernel_modules=open, but GPU 0000:3b:00.0 (PCI device id {device})")
    assert "Set driver_kernel_modules to auto" in got["error"] and "or proprietary" in got["error"]


def test_open_left_on_a_v100_is_repaired_by_auto(tmp_path):
    # What the old default did to a V100 host: open modules installed, which cannot drive it.
    facts = host_facts(tmp_path, [("0000:3b:00.0", V100)])
    got = driver_kernel_modules(facts, "auto", dpkg(nvidia_open_kernel_dkms="535.261.03-1~deb12u1"), "", HOST)
    assert got["flavour"] == "proprietary" and got["switch"] is True
    assert "cannot drive GPU 0000:3b:00.0 (PCI device id 0x1db4)" in got["reason"]


def test_bad_request_fails():
    with pytest.raises(DriverPlanError, match="gpu-a-01: driver_kernel_modules must be one of auto, open, proprietary"):
        driver_kernel_modules({}, "opn", None, "", HOST)
