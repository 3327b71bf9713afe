"""NVIDIA's repository as the driver's source (issue 45 item 3) and an NVSwitch host's fabric manager (item 4), on one
GPU host of the lab's recipe of its own with the four NVSwitches of an HGX H100 on its PCI bus (lab/lab.sh node
--gpu-host --nvswitch: LS10, device 0x22a3, class 0x068000, beside the eight H100s) and the lab's DKMS ccache.

The repository is lab/build-nvidia-driver-repo.sh's: laid out like NVIDIA's CUDA network repository
(<url>/debian12/x86_64/, flat, InRelease signed), its key under NVIDIA's key file name (3bf863cc.pub) but the LAB's
key, pinned by the lab key's fingerprint (driver_nvidia_repo_key_fingerprint). Its packages carry NVIDIA's names and
dependency shape - nvidia-open and cuda-drivers metapackages of 535.261.03-1 over Debian 12's real driver (from the
lab's apt proxy, the module built by real DKMS), an nvidia-open of branch 580 that no source can satisfy, and
nvidia-fabricmanager 535.261.03-1 and a newer 535.274.02-1 with a stand-in daemon under NVIDIA's unit name.

Proven here, on Debian 12 with apt and dpkg: a distribution source on the NVSwitch host is refused before anything is
written; a branch the repository lacks fails naming the repository, the branch and the proxy (issue 51 item 4); check
mode changes nothing; the run writes a deb822 source with Signed-By a keyring of the pinned key alone and the branch
pin (apt preferences), installs nvidia-open of the branch (the 580 one is never the candidate), DKMS builds the open
module alone, nvidia-fabricmanager of exactly the driver's version (not the newer one), both held, the unit enabled;
the next run changes nothing; the unit is started at the next boot (the lab's reboot: the container restarted); a host
switched back to driver_source=distribution (its NVSwitches hidden through driver_sysfs_root) has none of the files of
NVIDIA's repository left.

Not proven: NVIDIA's real packages were never installed here (no NVIDIA server is reachable), nor NVIDIA's real key
(its fingerprint is the role's default, checked only as text); the fabric manager is a stand-in, so the fabric state
(verify's wait for Completed/Success, unit-tested in tests/unit/test_driver_source_nvidia.py with the H200 host's
real states) and a restart with a loaded driver are not seen here: the container never loads the module, so the role
only enables the unit (the restart decision is unit-tested).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run

HOST = f"{LAB_NAME}-nvidia-source-1"
VERSION = "535.261.03"
REPO_DIR = "nvidia-driver-535.261.03-2"  # lab/lib.sh nvidia_driver_repo_dir (recipe 2)
FILES = ["/etc/apt/sources.list.d/k8sgpu-nvidia-cuda.sources", "/etc/apt/keyrings/k8sgpu-nvidia-cuda.asc",
         "/etc/apt/preferences.d/k8sgpu-nvidia-driver.pref",
         "/etc/apt/preferences.d/k8sgpu-nvidia-driver-fabricmanager.pref"]
# A hang guard, not a figure: the DKMS build of the first run took about 3 minutes here (2 CPUs, ccache warm).
BUILD_TIMEOUT = 1800


def sh(cmd: str, timeout: int = 600) -> str:
    return node_sh(HOST, cmd, timeout=timeout)


class Run:
    """One run of the driver role (json callback): the process, driver_result, the recap and the tasks."""

    def __init__(self, cp: subprocess.CompletedProcess, result: dict | None):
        self.cp, self.result = cp, result
        self.out = json.loads(cp.stdout) if cp.stdout.strip().startswith("{") else {}
        self.tasks = [(t["task"]["name"], t["hosts"].get(HOST, {}))
                      for play in self.out.get("plays", []) for t in play["tasks"]]

    @property
    def stats(self) -> dict:
        return self.out.get("stats", {}).get(HOST, {})

    def changed_tasks(self) -> list[str]:
        return [n for n, r in self.tasks if r.get("changed")]

    def failures(self) -> list[str]:
        return [task[1].get("msg", "") for task in self.tasks if task[1].get("failed")]

    def tail(self) -> str:
        return f"rc {self.cp.returncode}\n{self.cp.stdout[-4000:]}\n{self.cp.stderr[-2000:]}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The host, the repository and the variables that point the role at it (the host removed at the end)."""
    cp = run(["lab/build-nvidia-driver-repo.sh"], timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    root = Path(cp.stdout.strip())
    assert root.name == REPO_DIR, root
    key = root / "debian12" / "x86_64" / "3bf863cc.pub"
    fingerprint = subprocess.run(["gpg", "--show-keys", "--with-colons", str(key)], capture_output=True, text=True,
                                 check=True).stdout
    fingerprint = [line.split(":")[9] for line in fingerprint.splitlines() if line.startswith("fpr:")][0]
    proxy = (LAB_STATE / "apt-proxy-url").read_text().strip()
    path = tmp_path_factory.mktemp("nvidia-source") / "hosts.yml"
    path.write_text(json.dumps({"gpu_nodes": {"hosts": {HOST: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    nvidia = {"driver_source": "nvidia", "driver_branch": "535",
              # Served by the lab's apt-cacher-ng from $K8SGPU_CACHE/mirror, reached directly (it does not proxy
              # requests to itself), as the toolkit's repository is.
              "driver_nvidia_repo_url": f"{proxy}/k8sgpu-mirror/{REPO_DIR}", "driver_nvidia_repo_proxy": "DIRECT",
              "driver_nvidia_repo_key_fingerprint": fingerprint}
    try:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
        cp = run(["lab/lab.sh", "node", "--gpu-host", "--nvswitch", HOST, "bookworm"], timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        yield {"inventory": path, "nvidia": nvidia, "key": key.read_text(), "proxy": proxy}
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)


def role(lab: dict, tmp_path: Path, name: str, extra: dict | None = None, args=()) -> Run:
    out = tmp_path / f"{name}.json"
    extra_file = tmp_path / f"{name}-vars.json"
    extra_file.write_text(json.dumps({"node": HOST, "out": str(out), **(extra or {})}))
    cp = run(["ansible-playbook", "-i", "inventories/lab", "-i", str(lab["inventory"]), "-l", HOST,
              str(ROOT / "tests/lab/playbooks/driver.yml"), "-e", f"@{extra_file}", *args], timeout=BUILD_TIMEOUT,
             env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    return Run(cp, json.loads(out.read_text()) if out.exists() else None)


def nothing_written() -> str:
    return sh("ls /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/keyrings 2>/dev/null | grep k8sgpu; "
              "dpkg-query -W -f '${Package}\\n' 'nvidia-*' 'cuda-drivers*' 2>/dev/null; true").strip()


def packages() -> dict:
    out = sh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Want}\\n' nvidia-open cuda-drivers "
             "nvidia-fabricmanager nvidia-kernel-dkms nvidia-open-kernel-dkms 2>/dev/null || true")
    return {p: (v, want) for p, v, want in (line.split() for line in out.splitlines() if len(line.split()) == 3)}


def test_a_distribution_source_on_the_nvswitch_host_is_refused_before_anything_is_written(lab, tmp_path):
    refused = role(lab, tmp_path, "distribution")
    assert refused.cp.returncode != 0 and refused.stats.get("changed") == 0, refused.tail()
    message = " ".join(refused.failures())
    assert f"{HOST}: 4 NVSwitch(es) on the PCI bus (0000:05:00.0 (LS10)" in message, message
    assert "Set driver_source=nvidia and driver_branch" in message, message
    assert nothing_written() == "", nothing_written()


def test_a_branch_the_repository_lacks_fails_naming_it_and_the_proxy(lab, tmp_path):
    missing = role(lab, tmp_path, "missing-branch", {**lab["nvidia"], "driver_branch": "570"})
    assert missing.cp.returncode != 0, missing.tail()
    message = " ".join(missing.failures())
    source = f"{lab['nvidia']['driver_nvidia_repo_url']}/debian12/x86_64"
    assert f"{HOST}: installing nvidia-open" in message and "nvidia-open=570*" in message, message
    assert f"From NVIDIA's repository {source} (driver_nvidia_repo_url), branch 570" in message, message
    # Issue 51 item 4: the proxy the fetch went through, named by its variable (the lab's has no credentials).
    assert f"Proxy: driver_nvidia_repo_proxy DIRECT for {source}; driver_apt_proxy (k8sgpu_apt_proxy) " \
           f"{lab['proxy']}." in message, message
    assert packages() == {}, packages()


def test_check_mode_changes_nothing(lab, tmp_path):
    before = sh("md5sum /etc/apt/preferences.d/* /etc/apt/sources.list.d/* 2>/dev/null; dpkg -l | md5sum")
    check = role(lab, tmp_path, "check", lab["nvidia"], args=["--check", "--diff"])
    assert check.cp.returncode == 0, check.tail()
    assert check.result["status"] == "would_install", check.result
    assert sh("md5sum /etc/apt/preferences.d/* /etc/apt/sources.list.d/* 2>/dev/null; dpkg -l | md5sum") == before


@pytest.fixture(scope="module")
def converged(lab, tmp_path_factory):
    first = role(lab, tmp_path_factory.mktemp("first"), "first", lab["nvidia"])
    assert first.cp.returncode == 0, first.tail()
    return first


def test_the_driver_and_the_fabric_manager_of_its_version_come_from_the_repository(lab, converged):
    result = converged.result
    assert result["status"].startswith("installed") and result["version"] == f"{VERSION}-1", result
    assert result["kernel_modules"] == "open" and result["packages"][0] == "nvidia-open", result
    found = packages()
    # The branch's metapackage and the fabric manager of exactly the driver's version, not the newer 535.274.02;
    # both held. The open DKMS package alone: one module built.
    assert found["nvidia-open"] == (f"{VERSION}-1", "hold"), found
    assert found["nvidia-fabricmanager"] == (f"{VERSION}-1", "hold"), found
    assert "cuda-drivers" not in found and "nvidia-kernel-dkms" not in found, found
    dkms = sh("dkms status")
    assert dkms.count(": installed") == 1 and dkms.startswith(f"nvidia-current-open/{VERSION}, 6.1.0-"), dkms
    # The source: deb822, the repository's directory, Signed-By the keyring holding the pinned key alone.
    source = sh(f"cat {FILES[0]}")
    assert f"URIs: {lab['nvidia']['driver_nvidia_repo_url']}/debian12/x86_64\nSuites: /\n" \
           f"Signed-By: {FILES[1]}" in source, source
    keyring = sh(f"gpg --show-keys --with-colons {FILES[1]} | grep ^fpr | cut -d: -f10").split()
    assert keyring == [lab["nvidia"]["driver_nvidia_repo_key_fingerprint"]], keyring
    assert "Pin: version 535.*\nPin-Priority: 1000" in sh(f"cat {FILES[2]}")
    policy = sh("apt-cache policy nvidia-open nvidia-fabricmanager")
    assert "Candidate: 535.261.03-1" in policy and "580.95.05-1 500" in policy and "535.274.02-1 100" in policy, \
        policy
    # Enabled; not started: the container never loads the module (the restart with a loaded driver is unit-tested).
    assert sh("systemctl is-enabled nvidia-fabricmanager").strip() == "enabled"
    assert sh("systemctl is-active nvidia-fabricmanager || true").strip() == "inactive"


def test_the_next_run_changes_nothing(lab, converged, tmp_path):
    again = role(lab, tmp_path, "again", lab["nvidia"])
    assert again.cp.returncode == 0 and again.stats.get("changed") == 0, (again.stats, again.changed_tasks())


def test_the_fabric_manager_starts_at_the_next_boot(lab, converged):
    subprocess.run(["docker", "restart", HOST], capture_output=True, check=True, timeout=120)
    # systemd comes up again in the restarted container (PID 1 anew, as the lab's reboot does).
    state = sh("for i in $(seq 1 60); do s=$(systemctl is-active nvidia-fabricmanager 2>/dev/null); "
               "[ \"$s\" = active ] && break; sleep 1; done; echo \"state=$s\"")
    assert state.strip() == "state=active", state


def test_switched_back_to_the_distribution_nothing_of_nvidias_repository_is_left(lab, converged, tmp_path):
    # Its NVSwitches hidden (the GPUs alone under driver_sysfs_root), the host may take the distribution's source.
    sh("rm -rf /srv/sysfs && mkdir -p /srv/sysfs/bus/pci/devices && for d in /sys/bus/pci/devices/*; do "
       "[ \"$(cat $d/class)\" = 0x068000 ] || cp -r $d /srv/sysfs/bus/pci/devices/; done")
    back = role(lab, tmp_path, "back", {"driver_sysfs_root": "/srv/sysfs"})
    assert back.cp.returncode == 0, back.tail()
    left = sh("ls " + " ".join(FILES) + " 2>/dev/null || true").split()
    assert left == [], left
    assert "k8sgpu-nvidia-debian.sources" in sh("ls /etc/apt/sources.list.d")
