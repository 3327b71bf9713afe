"""The NVIDIA driver from Debian's packages, as the driver role leaves it."""
from __future__ import annotations

import json

# Per host: the branch, and the packages (driver, kernel module, the other flavour's, smi) the role installs there.
# Debian 12: the suite's nvidia-driver 535; driver_kernel_modules=auto without a GPU in sysfs (an image build) gives
# open. Debian 13 with driver_branch "535": the suite's Tesla 535 packages, whose kernel module is proprietary only.
HOSTS = {
    "molecule-driver-debian12": ("535.", "nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-kernel-dkms", "nvidia-smi",
                                 "open"),
    "molecule-driver-debian13": ("535.274.02", "nvidia-tesla-535-driver", "nvidia-tesla-535-kernel-dkms",
                                 "nvidia-open-kernel-dkms", "nvidia-tesla-535-smi", "proprietary"),
}


def wanted(host) -> tuple[str, str, str, str, str, str]:
    return HOSTS[host.backend.get_hostname()]


def test_packages_installed_from_the_wanted_branch(host):
    branch, driver, kernel, other_kernel, _smi, _flavour = wanted(host)
    pkg = host.package(driver)
    assert pkg.is_installed and pkg.version.startswith(branch)
    assert host.package(kernel).is_installed
    assert not host.package(other_kernel).is_installed


def test_converged_run_keeps_the_installed_flavour(host):
    # The last run (idempotence) found no loaded module and chose by dpkg's installed package of the branch.
    _branch, _driver, kernel, other_kernel, _smi, flavour = wanted(host)
    result = json.loads(host.file("/var/tmp/k8sgpu-driver-result.json").content_string)
    version = host.package(kernel).version
    assert result["kernel_modules"] == flavour
    assert result["kernel_modules_reason"] == f"auto: keeps the installed {kernel} {version}"
    assert kernel in result["packages"] and other_kernel not in result["packages"]


def test_packages_held(host):
    # Every nvidia package the role installs (k8sgpu.nvidia.dpkg_packages), not gcc nor the headers.
    _branch, driver, kernel, _other, smi, _flavour = wanted(host)
    held = host.check_output(f"dpkg --get-selections {driver} {kernel} {smi} nvidia-persistenced")
    assert len(held.splitlines()) == 4 and all(line.split()[1] == "hold" for line in held.splitlines()), held
    assert host.check_output("dpkg --get-selections gcc").split()[1] == "install"


def test_dkms_built_the_module_for_the_debian_kernel(host):
    status = host.check_output("dkms status")
    assert "installed" in status and "nvidia" in status, status
    # Built for the Debian kernel headers the role installed, not the host's running kernel.
    kernel = status.split(",")[1].strip()
    assert host.file(f"/lib/modules/{kernel}/updates/dkms").is_directory


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert conf.contains("^blacklist nouveau") and conf.mode == 0o644


def test_sources_signed_by_and_proxy(host):
    src = host.file("/etc/apt/sources.list.d/k8sgpu-nvidia-debian.sources")
    assert src.contains("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg")
    assert src.contains("Components: contrib non-free non-free-firmware")
    # driver_mirror_url (molecule.yml), not the mirror the image already uses.
    assert src.contains("URIs: http://ftp.debian.org/debian$")
    assert host.file("/etc/apt/apt.conf.d/90k8sgpu-proxy").contains("Acquire::http::Proxy")
    assert not host.file("/etc/apt/trusted.gpg").exists  # never apt-key


def test_reported_reboot_required_not_failure(host):
    result = json.loads(host.file("/var/tmp/k8sgpu-driver-result.json").content_string)
    assert result["status"] == "installed_reboot_required" and result["reboot_required"] is True
    assert result["version"].startswith(wanted(host)[0])
    assert not host.file("/proc/driver/nvidia/version").exists
