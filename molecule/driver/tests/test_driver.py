"""The NVIDIA driver from Debian's packages, as the driver role leaves it."""
from __future__ import annotations

import json

BRANCH = {"molecule-driver-debian12": "535."}


def test_packages_installed_from_the_wanted_branch(host):
    pkg = host.package("nvidia-driver")
    assert pkg.is_installed and pkg.version.startswith(BRANCH[host.backend.get_hostname()])
    # driver_kernel_modules=auto without a GPU in sysfs (an image build): open.
    assert host.package("nvidia-open-kernel-dkms").is_installed
    assert not host.package("nvidia-kernel-dkms").is_installed


def test_converged_run_keeps_the_installed_flavour(host):
    # The last run (idempotence) found no loaded module and chose by dpkg's installed package of the branch.
    result = json.loads(host.file("/var/tmp/k8sgpu-driver-result.json").content_string)
    version = host.package("nvidia-open-kernel-dkms").version
    assert result["kernel_modules"] == "open"
    assert result["kernel_modules_reason"] == f"auto: keeps the installed nvidia-open-kernel-dkms {version}"
    assert "nvidia-open-kernel-dkms" in result["packages"] and "nvidia-kernel-dkms" not in result["packages"]


def test_packages_held(host):
    # Every nvidia package the role installs (k8sgpu.nvidia.dpkg_packages), not gcc nor the headers.
    held = host.check_output("dpkg --get-selections nvidia-driver nvidia-open-kernel-dkms nvidia-smi nvidia-persistenced")
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
    assert result["version"].startswith(BRANCH[host.backend.get_hostname()])
    assert not host.file("/proc/driver/nvidia/version").exists
