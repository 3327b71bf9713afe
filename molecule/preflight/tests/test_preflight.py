"""Verify the preflight role's view of the lab's Debian nodes."""
from __future__ import annotations

import json


def _preflight(host) -> dict:
    return json.loads(host.file("/var/tmp/k8sgpu-preflight.json").content_string)


def test_os_matches_the_image(host):
    expected = {"molecule-debian12": "12", "molecule-debian13": "13"}[host.backend.get_hostname()]
    result = _preflight(host)
    assert result["os"].startswith(f"Debian {expected}"), result["os"]
    assert host.system_info.distribution == "debian"
    assert host.system_info.release.startswith(expected)


def test_no_gpu_and_no_driver_reported(host):
    # The lab's containers have no NVIDIA PCI device and no driver: the role must
    # say so from sysfs and /proc rather than guess.
    assert not host.file("/proc/driver/nvidia/version").exists
    result = _preflight(host)
    sysfs_nvidia = host.run(
        "grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>/dev/null | wc -l"
    ).stdout.strip()
    assert int(result["gpu_count"]) == int(sysfs_nvidia) == 0
    assert result["driver_loaded"] is False
    assert result["driver_proc_version"] == ""


def test_systemd_is_pid_1_and_running(host):
    assert host.process.get(pid=1).comm == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state == "running", host.run("systemctl --failed --no-legend").stdout
