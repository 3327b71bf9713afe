"""Verify what the preflight role reported and how it failed, against what the node really has."""
from __future__ import annotations

import json


def _results(host) -> dict:
    return json.loads(host.file("/var/tmp/k8sgpu-preflight.json").content_string)


def _sysfs_nvidia_gpus(host, root: str) -> list[str]:
    """The node's NVIDIA display/3D functions, read independently of the role."""
    out = host.run(
        f"for d in {root}/bus/pci/devices/*; do [ -r $d/vendor ] || continue; "
        f"[ \"$(cat $d/vendor)\" = 0x10de ] || continue; "
        f"case \"$(cat $d/class)\" in 0x0300*|0x0302*) echo ${{d##*/}};; esac; done"
    )
    assert out.rc == 0, out.stderr
    return out.stdout.split()


def test_os_is_the_nodes(host):
    os_release = dict(
        line.split("=", 1) for line in host.file("/etc/os-release").content_string.splitlines() if "=" in line
    )
    version = host.file("/etc/debian_version").content_string.strip()
    own = _results(host)["own"]
    assert own["os"] == f"Debian {version}", (own["os"], version)
    assert own["kernel"] == host.run("uname -r").stdout.strip()
    assert os_release["ID"] == "debian"


def test_own_sysfs_gpus_and_driver_match_the_node(host):
    own = _results(host)["own"]
    assert int(own["gpu_count"]) == len(_sysfs_nvidia_gpus(host, "/sys"))
    assert own["driver_loaded"] is host.file("/proc/driver/nvidia/version").exists
    assert own["gpus"] == []


def test_h100_tree_is_found_like_gpu_facts_finds_it(host):
    h100 = _results(host)["h100"]
    gpus = [d for d in h100["nvidia_pci_devices"] if d["gpu"]]
    # The audio function is an NVIDIA device but not a GPU; the Intel bridge is not NVIDIA's at all.
    assert [d["pci_bus_id"] for d in h100["nvidia_pci_devices"]] == ["0000:00:06.0", "0000:00:06.1"]
    assert [(d["pci_bus_id"], d["device_id"]) for d in gpus] == [("0000:00:06.0", "0x2330")]
    assert int(h100["gpu_count"]) == len(_sysfs_nvidia_gpus(host, "/var/tmp/k8sgpu-fake-h100/sys")) == 1
    assert h100["driver_loaded"] is True
    assert h100["driver_version"] == "580.159.04"
    assert h100["kernel_module_flavour"] == "open"
    assert h100["driver_version_mismatch"] is False


def test_unsupported_os_fails_naming_host_and_os(host):
    msg = _results(host)["unsupported_os"]
    name = host.backend.get_hostname()
    version = host.file("/etc/debian_version").content_string.strip().split(".")[0]
    assert msg.startswith(f"{name}: Debian {version} is not supported"), msg
    assert "preflight_supported_os" in msg


def test_gpu_required_fails_naming_host_and_fix(host):
    msg = _results(host)["gpu_required"]
    assert msg.startswith(f"{host.backend.get_hostname()}: no NVIDIA GPU in /sys/bus/pci/devices"), msg
    assert "preflight_gpu_required=false" in msg
