"""The driver role's kernel-module flavour on a lab node, in check mode, with the GPU and loaded driver of a real host.

A node container of the lab's recipe (lab/lab.sh node: Debian 12, no GPU, no driver; the lab's own GPU hosts have the
driver installed by site.yml) gets a sysfs PCI tree and a /proc/driver/nvidia/version under a
scratch directory, and the role reads them through driver_sysfs_root/driver_proc_root (passed to gpu_facts). The
H100's device id and the /proc line formats are those recorded on the GPU machine and NVIDIA's; V100 is 0x1db4.
Check mode: the role plans (driver_result) and changes nothing on the node; the real dpkg database, apt sources
and package names of Debian 12 are used.
"""
from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from ansible_output import recap
from conftest import LAB_NAME, ROOT, run

NODE = f"{LAB_NAME}-flavour-1"  # Debian 12
PROPRIETARY_535 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 00:00:00 UTC 2025"
H100, V100 = "0x2330", "0x1db4"
PLAY = """
- name: The driver role, its result written on the controller
  hosts: "{{ node }}"
  gather_facts: false
  tasks:
    - name: Run the role
      ansible.builtin.include_role:
        name: k8sgpu.nvidia.driver
    - name: Keep driver_result
      ansible.builtin.copy:
        content: "{{ driver_result | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      delegate_to: localhost
      check_mode: false
      changed_when: false  # the test's bookkeeping, not the role's
"""


def sh(script: str) -> None:
    subprocess.run(["docker", "exec", NODE, "sh", "-ec", script], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """The node container and an inventory that puts it in gpu_nodes beside the lab's (removed at the end)."""
    inventory = tmp_path_factory.mktemp("flavour-inventory") / "hosts.yml"
    inventory.write_text(json.dumps({"gpu_nodes": {"hosts": {NODE: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    try:
        cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", NODE, "bookworm"], capture_output=True, text=True,
                            timeout=180, check=False)
        assert cp.returncode == 0, cp.stderr[-2000:]
        yield inventory
    finally:
        subprocess.run(["docker", "rm", "-f", NODE], capture_output=True, check=False)


@pytest.fixture
def fake_host(node):
    """Build a fake sysfs/proc root on the node: fake_host(device_id, proc_line or None) -> its extra vars."""
    roots = []

    def _make(device: str, proc_line: str | None) -> dict:
        root = f"/var/tmp/k8sgpu-flavour-{uuid.uuid4().hex[:8]}"
        roots.append(root)
        dev = f"{root}/sys/bus/pci/devices/0000:3b:00.0"
        script = (f"mkdir -p {dev} {root}/proc; printf '0x10de\\n' > {dev}/vendor; printf '{device}\\n' > {dev}/device; "
                  f"printf '0x030200\\n' > {dev}/class")
        if proc_line:
            script += f"; mkdir -p {root}/proc/driver/nvidia; printf '%s\\n' '{proc_line}' > {root}/proc/driver/nvidia/version"
        sh(script)
        return {"driver_sysfs_root": f"{root}/sys", "driver_proc_root": f"{root}/proc"}

    yield _make
    if roots:
        sh("rm -rf " + " ".join(roots))


def role(inventory: Path, tmp_path: Path, extra: dict,
         env_extra: dict | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    play, out = tmp_path / "play.yml", tmp_path / "result.json"
    play.write_text(PLAY)
    extra_file = tmp_path / "vars.json"
    extra_file.write_text(json.dumps({"node": NODE, "out": str(out), **extra}))
    cp = run(["ansible-playbook", "-i", "inventories/lab", "-i", str(inventory), "--check", "-l", NODE, str(play),
              "-e", f"@{extra_file}"], env_extra=env_extra)
    return cp, (json.loads(out.read_text()) if out.exists() else None)


def test_default_keeps_loaded_proprietary_modules(node, fake_host, tmp_path):
    cp, result = role(node, tmp_path, fake_host(H100, PROPRIETARY_535))
    assert cp.returncode == 0, cp.stdout[-3000:]
    # Nothing to install: the loaded 535 driver of the distribution's branch, proprietary modules kept.
    assert result["status"] == "already_loaded", result
    assert result["kernel_modules"] == "proprietary"
    assert result["kernel_modules_reason"] == "auto: keeps the loaded proprietary kernel module"
    # Check mode: nothing would change on the node (no source, no package, no hold).
    assert recap(cp.stdout)[NODE]["changed"] == 0, cp.stdout[-3000:]


def test_new_install_on_h100_plans_open(node, fake_host, tmp_path):
    cp, result = role(node, tmp_path, fake_host(H100, None))
    assert cp.returncode == 0, cp.stdout[-3000:]
    assert result["status"] == "would_install" and result["kernel_modules"] == "open", result
    assert "nvidia-open-kernel-dkms" in result["packages"] and "nvidia-kernel-dkms" not in result["packages"]
    assert result["kernel_modules_reason"].startswith("auto: new install; every GPU (1) is Turing or later")


def test_new_install_on_v100_plans_proprietary(node, fake_host, tmp_path):
    cp, result = role(node, tmp_path, fake_host(V100, None))
    assert cp.returncode == 0, cp.stdout[-3000:]
    assert result["status"] == "would_install" and result["kernel_modules"] == "proprietary", result
    assert "nvidia-kernel-dkms" in result["packages"] and "nvidia-open-kernel-dkms" not in result["packages"]
    assert "0000:3b:00.0 (PCI device id 0x1db4) is older than Turing" in result["kernel_modules_reason"]


def test_explicit_open_switches_loaded_proprietary(node, fake_host, tmp_path):
    cp, result = role(node, tmp_path, {**fake_host(H100, PROPRIETARY_535), "driver_kernel_modules": "open"})
    assert cp.returncode == 0, cp.stdout[-3000:]
    assert result["status"] == "would_install" and result["kernel_modules"] == "open", result
    assert "asks to switch from the loaded proprietary kernel module to open" in result["kernel_modules_reason"]


def test_explicit_open_on_v100_fails_clearly(node, fake_host, tmp_path):
    cp, result = role(node, tmp_path, {**fake_host(V100, PROPRIETARY_535), "driver_kernel_modules": "open"})
    assert cp.returncode != 0 and result is None
    assert (f"{NODE}: driver_kernel_modules=open, but GPU 0000:3b:00.0 (PCI device id 0x1db4) is older than Turing"
            in cp.stdout), cp.stdout[-3000:]
    assert "Set driver_kernel_modules to auto" in cp.stdout


REREAD = "Read the GPUs again when the loaded module is no longer the installed driver"


def _reread(stdout: str) -> dict | None:
    """The driver role's task that reads the GPUs again for the roles after it (json callback); None when the role
    did not reach it (a loaded driver it keeps: its steps are not included)."""
    tasks = [t for play in json.loads(stdout)["plays"] for t in play["tasks"]]
    found = [t["hosts"][NODE] for t in tasks if t["task"]["name"].endswith(REREAD)]
    assert len(found) <= 1, found
    return found[0] if found else None


@pytest.mark.parametrize("loaded,extra,reread", [
    (PROPRIETARY_535, {}, None),
    (None, {}, False),
    (PROPRIETARY_535, {"driver_kernel_modules": "open"}, True),
], ids=["kept", "not-loaded", "switching"])
def test_gpus_read_again_only_when_the_loaded_module_is_not_the_installed_driver(
        node, fake_host, tmp_path, loaded, extra, reread):
    """Later roles reuse the GPU facts (gpu_facts reuse=true): where the role leaves a loaded module that is not the
    driver it installs (here the loaded proprietary 535 to be switched to open), it reads them again first; a loaded
    driver it keeps (its steps are not included) or no loaded module (nothing a new read would see differently) is not
    read again."""
    cp = role(node, tmp_path, {**fake_host(H100, loaded), **extra},
              env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})[0]
    assert cp.returncode == 0, cp.stdout[-3000:]
    result = _reread(cp.stdout)
    if reread is None:
        assert result is None, result
        return
    if not reread:
        assert result is not None and result.get("skipped") is True, result
        return
    assert result is not None and result.get("skipped") is not True and result["reused"] is False, result
    facts = result["ansible_facts"]
    assert facts["nvidia_driver_loaded"] is True and facts["nvidia_driver_version"] == "535.261.03"
    assert facts["nvidia_facts_read"]["proc_root"].endswith("/proc")
