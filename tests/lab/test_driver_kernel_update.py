"""Kernel updates (issue 45 item 1): a newer kernel installed after the driver gets the NVIDIA module built by the
driver role's next run, with real DKMS; without its headers the run says so and a reboot into it is refused.

A GPU host of the lab's recipe of its own (lab/lab.sh node --gpu-host: the gpu-host image, the PCI bus of eight H100s,
the lab's ccache for DKMS) gets the driver from the role (Debian 12's 535 branch, the module built by DKMS for the
kernel of Debian's headers metapackage, 6.1.0-*-amd64). Then the newest kernel of bookworm-backports
(linux-image-6.12.*+deb12-amd64, read from the backports index with apt-cache on the host, through the lab's apt
proxy) is installed with its headers the way a site's patching does, with DKMS's kernel hooks switched off
(/etc/kernel/*/dkms not executable): the package's own hook does not build, so the module the test finds for that
kernel afterwards is the role's (dkms autoinstall -k, module driver_kernels). Checked on the host: ``dkms status``,
the module file under /lib/modules/<kernel>/updates/dkms, the role's driver_result and the recap; a second run
changes nothing. Then the module and the headers of the new kernel are removed and a run with driver_reboot=reboot
must warn that the kernel has no headers (naming the package), and refuse the reboot before the reboot task, naming
the host, the kernel (the newest installed image) and the fix; PID 1's start time (the lab's boot time of a node
container) and Docker's restart count show that the host was not rebooted.

What the container cannot prove: it never boots the new kernel (it runs the machine's own kernel, for which Debian
has no headers), so that the module built for 6.12 loads and drives a GPU on that kernel, that GRUB would pick the
newest image (there is no GRUB here: the decision comes from the images under /boot), and the initramfs is not
proven; the builds, DKMS's records, the module files and the decisions are real.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import LAB_NAME, node_sh, run

HOST = f"{LAB_NAME}-kernel-update-1"
BACKPORTS = "deb http://deb.debian.org/debian bookworm-backports main"
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
      changed_when: false  # the test's bookkeeping, not the role's
"""
KERNELS_TASK = "Read the NVIDIA module of every installed kernel, build what is missing"
REFUSAL_TASK = "Refuse a reboot into a kernel without the NVIDIA module"
REBOOT_TASK = "Reboot into the new driver"
# A hang guard, not a figure: the whole file took 5 min 17 s alone here (2 CPUs, the lab's ccache warm; 2026-12-07),
# the first run with its DKMS build and the kernel's install 185 s of it; with the other lab tests and make test's
# side steps on the same two CPUs far longer.
BUILD_TIMEOUT = 1800


def sh(cmd: str, timeout: int = 600) -> str:
    return node_sh(HOST, cmd, timeout=timeout)


def boot_marks() -> tuple[str, str]:
    """PID 1's start time (the inventory's driver_reboot_boot_time_command) and Docker's restart count."""
    started = sh("cut -d' ' -f22 /proc/1/stat").strip()
    restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}} {{.State.StartedAt}}", HOST],
                              capture_output=True, text=True, check=True).stdout.strip()
    return started, restarts


def dkms_status() -> list[tuple[str, str, str]]:
    """``dkms status``'s NVIDIA lines: (module/version, kernel, state)."""
    found = []
    for line in sh("dkms status").splitlines():
        m = re.match(r"^(nvidia[^,\s]*/[^,\s]+), ([^,\s]+), [^:]+: (\w+)", line.strip())
        if m:
            found.append((m.group(1), m.group(2), m.group(3)))
    return found


def module_files(release: str) -> list[str]:
    return sh(f"find /lib/modules/{release}/updates/dkms -name 'nvidia*.ko*' 2>/dev/null | sort || true").split()


class Run:
    """One run of the driver role (json callback): its process, driver_result, the recap and the tasks."""

    def __init__(self, cp: subprocess.CompletedProcess, result: dict | None):
        self.cp, self.result = cp, result
        self.out = json.loads(cp.stdout) if cp.stdout.strip().startswith("{") else {}
        self.tasks = [(t["task"]["name"], t["hosts"].get(HOST, {}))
                      for play in self.out.get("plays", []) for t in play["tasks"]]

    @property
    def stats(self) -> dict:
        return self.out.get("stats", {}).get(HOST, {})

    def task(self, name: str) -> list[dict]:
        """The results of the tasks so named that ran (kernels.yml is imported twice: load.yml's, main.yml's)."""
        return [r for n, r in self.tasks if n.endswith(name) and not r.get("skipped")]

    def changed_tasks(self) -> list[str]:
        return [n for n, r in self.tasks if r.get("changed")]

    def text(self) -> str:
        return self.cp.stdout + self.cp.stderr

    def tail(self) -> str:
        return f"rc {self.cp.returncode}\n{self.cp.stdout[-4000:]}\n{self.cp.stderr[-2000:]}"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """The GPU host and an inventory that puts it in gpu_nodes beside the lab's (removed at the end)."""
    path = tmp_path_factory.mktemp("kernel-update") / "hosts.yml"
    path.write_text(json.dumps({"gpu_nodes": {"hosts": {HOST: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    try:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
        cp = run(["lab/lab.sh", "node", "--gpu-host", HOST, "bookworm"], timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        yield path
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)


def role(inventory: Path, tmp_path: Path, name: str, extra: dict | None = None) -> Run:
    play, out = tmp_path / "play.yml", tmp_path / f"{name}.json"
    play.write_text(PLAY)
    extra_file = tmp_path / f"{name}-vars.json"
    extra_file.write_text(json.dumps({"node": HOST, "out": str(out), **(extra or {})}))
    cp = run(["ansible-playbook", "-i", "inventories/lab", "-i", str(inventory), "-l", HOST, str(play),
              "-e", f"@{extra_file}"], timeout=BUILD_TIMEOUT,
             env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    return Run(cp, json.loads(out.read_text()) if out.exists() else None)


@pytest.fixture(scope="module")
def converged(inventory, tmp_path_factory):
    """The driver installed by the role, DKMS's module built for the kernel of Debian's headers metapackage."""
    first = role(inventory, tmp_path_factory.mktemp("first"), "first")
    assert first.cp.returncode == 0, first.tail()
    assert first.result and first.result["status"].startswith("installed"), first.result
    installed = [(m, k) for m, k, state in dkms_status() if state == "installed"]
    assert len(installed) == 1 and installed[0][1].startswith("6.1.0-"), sh("dkms status")
    module, old = installed[0]
    assert module_files(old), sh(f"ls -R /lib/modules/{old}/updates")
    return {"module": module, "old": old, "version": module.split("/", 1)[1]}


@pytest.fixture(scope="module")
def new_kernel(converged):
    """The newest kernel of bookworm-backports and its headers, installed as patching does, DKMS's hooks off."""
    sh(f"echo '{BACKPORTS}' > /etc/apt/sources.list.d/backports.list; apt-get -q update")
    # The backports kernel metapackage names the newest kernel there: linux-image-<release> (= <version>).
    depends = sh("apt-cache show linux-image-amd64/bookworm-backports | sed -n 's/^Depends: //p'")
    m = re.search(r"linux-image-(6\.12\.\d+\+deb12-amd64)\b", depends)
    assert m, f"bookworm-backports' linux-image-amd64 names no 6.12 kernel: {depends!r}"
    release = m.group(1)
    assert sh(f"apt-cache show linux-headers-{release} | sed -n 's/^Package: //p'").strip(), \
        f"no linux-headers-{release} in bookworm-backports"
    hooks = sh("ls /etc/kernel/*/dkms 2>/dev/null || true").split()
    assert "/etc/kernel/header_postinst.d/dkms" in hooks, hooks
    sh("chmod -x " + " ".join(hooks))
    sh(f"DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends install "
       f"linux-image-{release} linux-headers-{release}", timeout=900)
    # The hook did not build: what is there for the new kernel afterwards is the role's.
    assert sh(f"test -f /boot/vmlinuz-{release} && test -d /usr/src/linux-headers-{release} && echo yes").strip() == "yes"
    assert not module_files(release) and not [s for s in dkms_status() if s[1] == release], sh("dkms status")
    return {**converged, "new": release}


def test_next_run_builds_the_module_for_the_new_kernel(inventory, new_kernel, tmp_path):
    release, old, module = new_kernel["new"], new_kernel["old"], new_kernel["module"]
    before = boot_marks()
    second = role(inventory, tmp_path, "second")
    assert second.cp.returncode == 0, second.tail()
    # The build is the run's only change.
    changed = second.changed_tasks()
    assert second.stats.get("changed") == 1 and len(changed) == 1 and changed[0].endswith(KERNELS_TASK), \
        (second.stats, changed)
    kernels = second.task(KERNELS_TASK)
    assert len(kernels) == 1 and kernels[0]["built"] == [release] and not kernels[0]["build_failures"], kernels
    # DKMS built and installed it for both kernels; the module file is where DKMS installs it.
    status = dkms_status()
    assert (module, release, "installed") in status and (module, old, "installed") in status, status
    files = module_files(release)
    assert files, sh(f"ls -lR /lib/modules/{release}/updates 2>&1 || true")
    assert sh(f"modinfo -F vermagic {files[0]}").split()[0] == release, files
    # The role's result: every kernel ok, the new one (the newest image) is the one the host boots.
    result = second.result
    assert result["boot_kernel"] == release and result["boot_kernel_ok"] is True, result
    assert any(line.startswith(f"{release}: ok - module {module.replace('/', ' ')} installed") for line in
               result["kernels"]), result["kernels"]
    assert any(line.startswith(f"{old}: ok") for line in result["kernels"]), result["kernels"]
    assert f"the kernel it boots, {release}" in result["boot_kernel_reason"], result["boot_kernel_reason"]
    # Nothing left to build: the next run changes nothing.
    third = role(inventory, tmp_path, "third")
    assert third.cp.returncode == 0 and third.stats.get("changed") == 0, (third.stats, third.changed_tasks())
    assert third.task(KERNELS_TASK)[0]["built"] == []
    assert boot_marks() == before


def test_without_headers_the_run_reports_it_and_refuses_the_reboot(inventory, new_kernel, tmp_path):
    release, module = new_kernel["new"], new_kernel["module"]
    # The new kernel's module (where the test before built it) and its headers removed: an image without them.
    if [s for s in dkms_status() if s[1] == release]:
        sh(f"dkms remove {module} -k {release}")
    sh(f"DEBIAN_FRONTEND=noninteractive apt-get -q -y purge linux-headers-{release}")
    assert not module_files(release) and sh(f"test -f /boot/vmlinuz-{release} && echo yes").strip() == "yes"
    before = boot_marks()
    refused = role(inventory, tmp_path, "refused", {"driver_reboot": "reboot"})
    assert refused.cp.returncode != 0 and refused.result is None, refused.tail()
    # Reported: the kernel has no headers, the fix names its headers package.
    kernels = refused.task(KERNELS_TASK)
    assert len(kernels) == 1 and kernels[0]["built"] == [] and kernels[0]["kernels"][release]["status"] == "no_headers", \
        kernels
    warning = f"{HOST}: kernel {release}: no headers, so DKMS cannot build the NVIDIA module"
    assert warning in refused.text() and f"apt-get install linux-headers-{release}" in refused.text(), refused.tail()
    # Refused before the reboot task ran, naming the host, the kernel (the newest image) and the fix.
    refusal = refused.task(REFUSAL_TASK)
    assert len(refusal) == 1 and refusal[0].get("failed"), refused.tail()
    msg = refusal[0]["msg"]
    assert msg.startswith(f"{HOST}: reboot refused: the kernel it would boot, {release} (the newest installed kernel "
                          "image"), msg
    assert f"apt-get install linux-headers-{release} && dkms autoinstall -k {release}" in msg, msg
    assert not refused.task(REBOOT_TASK), [name for name, _result in refused.tasks]
    assert refused.stats.get("failures") == 1, refused.stats
    # Not rebooted: PID 1 and the container are the same as before.
    assert boot_marks() == before
