"""The driver through a GPU host's lifetime (issue 45 items 1 and 2), on one host and one DKMS build of its own:
DKMS signs the NVIDIA modules with the site's key and a reboot into modules no enrolled key signed is refused
(Secure Boot); then a newer kernel installed after the driver gets its module built, signed, by the role's next run,
and without its headers the run says so and a reboot into it is refused (kernel updates); then signing turned off.

The host is of the lab's recipe (lab/lab.sh node --gpu-host: the gpu-host image, the PCI bus of eight H100s, the
lab's apt proxy and ccache for DKMS). The role installs Debian 12's 535 branch, built by DKMS for the kernel of Debian's
headers metapackage (6.1.0-*-amd64), with driver_secure_boot_signing on and a key pair the test makes with openssl
(given as content, as from a vault). Checked on the host: DKMS's drop-in, the key (0600, never in the run's output),
``modinfo``'s ``signer``/``sig_key`` of every module DKMS built against the certificate's issuer and serial (real
DKMS, real sign-file of linux-kbuild, real kmod); DKMS made no key of its own; the next run changes nothing. The EFI
variables are a tree the test lays out as efivarfs shows them (SecureBoot, SetupMode, shim's MokListRT as
EFI_SIGNATURE_LISTs): with Secure Boot enabled and only another certificate enrolled, a ``driver_reboot=reboot`` run
is refused before the reboot task, naming the host, the kernel, the module and ``mokutil --import``; with the
certificate in MokListRT driver_kernels (the decision the driver role, node_maintenance's reboot and gpu_health's
recovery share) allows it.

Then the newest kernel of bookworm-backports (linux-image-6.12.*+deb12-amd64, read from the backports index with
apt-cache on the host, through the lab's apt proxy) is installed with its headers the way a site's patching does,
with DKMS's kernel hooks switched off (/etc/kernel/*/dkms not executable): the package's own hook does not build, so
the module the test finds for that kernel afterwards is the role's (dkms autoinstall -k, module driver_kernels),
signed with the site's key. Checked: ``dkms status``, the module file under /lib/modules/<kernel>/updates/dkms, the
role's driver_result and the recap; a second run changes nothing. Then the module and the headers of the new kernel
are removed and a run with driver_reboot=reboot must warn that the kernel has no headers (naming the package), and
refuse the reboot before the reboot task, naming the host, the kernel (the newest installed image) and the fix.
PID 1's start time (the lab's boot time of a node container) and Docker's restart count show that the host was never
rebooted. Last, signing turned off removes the drop-in and keeps the key.

What the container cannot prove: it never boots either kernel with these modules (it runs the machine's own kernel,
for which Debian has no headers), so that a real firmware and shim enforce what the tree says, mokutil's enrolment at
the console, that GRUB would pick the newest image (there is no GRUB here: the decision comes from the images under
/boot), and the initramfs; the builds, signatures, DKMS's records, the module files and the decisions are real.
"""
from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import LAB_NAME, node_sh, run
from k8sgpu_testlib.driver_runs import boot_marks, role_run

HOST = f"{LAB_NAME}-driver-lifecycle-1"
SUBJECT = "/O=k8sgpu lab/CN=k8sgpu lab module signing"
SIGNER = "k8sgpu lab module signing"
OWN_CERT = "/var/lib/k8sgpu-nvidia/secure-boot/signing.der"
DROP_IN = "/etc/dkms/framework.conf.d/90-k8sgpu-nvidia-signing.conf"
KERNELS_TASK = "Read the NVIDIA module of every installed kernel, build what is missing"
REFUSAL_TASK = "Refuse a reboot into a kernel without the NVIDIA module"
REBOOT_TASK = "Reboot into the new driver"
BACKPORTS = "deb http://deb.debian.org/debian bookworm-backports main"
GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SHIM = "605dab50-e046-4300-abb6-3dd810dd8b23"
X509 = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072").bytes_le


def sh(cmd: str, timeout: int = 600) -> str:
    return node_sh(HOST, cmd, timeout=timeout)


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    """The site's key pair and another certificate (enrolled in the 'wrong key' case)."""
    tmp = tmp_path_factory.mktemp("keys")
    out = {}
    for name, subject in (("site", SUBJECT), ("other", "/CN=some other vendor")):
        key, cert = tmp / f"{name}.key", tmp / f"{name}.pem"
        openssl("req", "-new", "-x509", "-nodes", "-days", "30", "-subj", subject, "-newkey", "rsa:2048",
                "-keyout", str(key), "-out", str(cert))
        der = subprocess.run(["openssl", "x509", "-in", str(cert), "-outform", "DER"], check=True,
                             capture_output=True).stdout
        serial = openssl("x509", "-in", str(cert), "-noout", "-serial").strip().split("=", 1)[1]
        out[name] = {"key": key.read_text(), "cert": cert.read_text(), "der": der,
                     "serial": ":".join(serial[i:i + 2] for i in range(0, len(serial), 2)).upper()}
    return out


def efi_tree(path: Path, secure_boot: int, *enrolled: bytes) -> Path:
    """An EFI variable tree as efivarfs shows it: an attribute word, then the data."""
    efivars = path / "efivars"
    efivars.mkdir(parents=True)
    attrs = b"\x06\x00\x00\x00"
    (efivars / f"SecureBoot-{GLOBAL}").write_bytes(attrs + bytes([secure_boot]))
    (efivars / f"SetupMode-{GLOBAL}").write_bytes(attrs + b"\x00")
    lists = b""
    for der in enrolled:
        size = 16 + len(der)
        lists += X509 + (28 + size).to_bytes(4, "little") + bytes(4) + size.to_bytes(4, "little")
        lists += uuid.uuid4().bytes_le + der
    (efivars / f"MokListRT-{SHIM}").write_bytes(attrs + lists)
    return path


def put_tree(local: Path, remote: str) -> None:
    sh(f"rm -rf {remote} && mkdir -p {Path(remote).parent}")
    subprocess.run(["docker", "cp", str(local), f"{HOST}:{remote}"], check=True, capture_output=True)


def dkms_status() -> list[tuple[str, str, str]]:
    """``dkms status``'s NVIDIA lines: (module/version, kernel, state)."""
    found = []
    for line in sh("dkms status").splitlines():
        m = re.match(r"^(nvidia[^,\s]*/[^,\s]+), ([^,\s]+), [^:]+: (\w+)", line.strip())
        if m:
            found.append((m.group(1), m.group(2), m.group(3)))
    return found


def module_files(release: str = "*") -> list[str]:
    return sh(f"find /lib/modules/{release}/updates/dkms -name 'nvidia*.ko*' 2>/dev/null | sort || true").split()


def assert_signed_by_site(keys: dict, paths: list[str]) -> None:
    for path in paths:
        assert sh(f"modinfo -F signer {path}").strip() == SIGNER, path
        assert sh(f"modinfo -F sig_key {path}").strip() == keys["site"]["serial"], path


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """The GPU host and an inventory that puts it in gpu_nodes beside the lab's (removed at the end)."""
    path = tmp_path_factory.mktemp("driver-lifecycle") / "hosts.yml"
    path.write_text(json.dumps({"gpu_nodes": {"hosts": {HOST: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    try:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
        cp = run(["lab/lab.sh", "node", "--gpu-host", HOST, "bookworm"], timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        yield path
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)


def signing(keys: dict, **more) -> dict:
    return {"driver_secure_boot_signing": True, "driver_secure_boot_key_content": keys["site"]["key"],
            "driver_secure_boot_certificate_content": keys["site"]["cert"],
            "driver_secure_boot_efi_root": "/srv/no-efi", **more}


def role(inventory: Path, tmp_path: Path, name: str, extra: dict):
    return role_run(run, HOST, inventory, tmp_path, name, extra)


def key_body(keys: dict) -> str:
    return "".join(keys["site"]["key"].splitlines()[1:-1])


@pytest.fixture(scope="module")
def converged(inventory, keys, tmp_path_factory):
    """The driver installed by the role with signing on, DKMS's module built for the headers metapackage's kernel."""
    first = role(inventory, tmp_path_factory.mktemp("first"), "first", signing(keys))
    assert first.cp.returncode == 0, first.tail()
    assert first.result and first.result["status"].startswith("installed"), first.result
    assert key_body(keys)[:48] not in first.text(), "the private key is in the run's output"
    installed = [(m, k) for m, k, state in dkms_status() if state == "installed"]
    assert len(installed) == 1 and installed[0][1].startswith("6.1.0-"), sh("dkms status")
    module, old = installed[0]
    assert module_files(old), sh(f"ls -R /lib/modules/{old}/updates")
    return {"module": module, "old": old, "boot": boot_marks(HOST)}


# --- Secure Boot -------------------------------------------------------------------------------------------------

def test_dkms_signs_every_module_with_the_site_key(inventory, keys, converged, tmp_path):
    drop_in = sh(f"cat {DROP_IN}")
    assert 'mok_certificate="/var/lib/k8sgpu-nvidia/secure-boot/signing.der"' in drop_in, drop_in
    assert sh("stat -c '%a %U' /var/lib/k8sgpu-nvidia/secure-boot/signing.key").split() == ["600", "root"]
    assert sh("stat -c '%a' /var/lib/k8sgpu-nvidia/secure-boot").strip() == "700"
    modules = module_files()
    assert len(modules) >= 4, modules  # nvidia, -modeset, -drm, -uvm (and -peermem)
    assert_signed_by_site(keys, modules)
    # DKMS used the site's key: it made none of its own.
    assert sh("ls /var/lib/dkms/mok.key 2>/dev/null || echo none").strip() == "none"
    again = role(inventory, tmp_path, "again", signing(keys))
    assert again.cp.returncode == 0 and again.stats.get("changed") == 0, (again.stats, again.tail())
    assert key_body(keys)[:48] not in again.text()


def test_reboot_into_modules_no_enrolled_key_signed_is_refused(inventory, keys, converged, tmp_path):
    put_tree(efi_tree(tmp_path / "wrong", 1, keys["other"]["der"]), "/srv/efi-wrong")
    refused = role(inventory, tmp_path, "refused", signing(keys, driver_reboot="reboot",
                                                           driver_secure_boot_efi_root="/srv/efi-wrong"))
    assert refused.cp.returncode != 0 and refused.result is None, refused.tail()
    refusal = refused.task(REFUSAL_TASK)
    assert len(refusal) == 1 and refusal[0].get("failed"), refused.tail()
    msg = refusal[0]["msg"]
    assert msg.startswith(f"{HOST}: refusing to reboot into kernel 6.1.0-"), msg
    assert "Secure Boot is enabled" in msg and f"signed by '{SIGNER}'" in msg, msg
    assert f"mokutil --import {OWN_CERT}" in msg and "/updates/dkms/nvidia" in msg, msg
    assert not refused.task(REBOOT_TASK) and boot_marks(HOST) == converged["boot"]


def kernels_module(efi_root: str, inventory: Path) -> dict:
    cp = run(["ansible", "-i", "inventories/lab", "-i", str(inventory), HOST, "-m", "k8sgpu.nvidia.driver_kernels",
              "-a", json.dumps({"efi_root": efi_root, "host": HOST})],
             env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    return json.loads(cp.stdout)["plays"][0]["tasks"][0]["hosts"][HOST]


def test_enrolled_certificate_allows_the_reboot(inventory, keys, converged, tmp_path):
    put_tree(efi_tree(tmp_path / "enrolled", 1, keys["other"]["der"], keys["site"]["der"]), "/srv/efi-enrolled")
    read = kernels_module("/srv/efi-enrolled", inventory)
    assert read["secure_boot"]["state"] == "enabled" and read["secure_boot"]["modules_trusted"] is True, read
    assert read["reboot"]["allowed"], read["reboot"]
    put_tree(efi_tree(tmp_path / "off", 0), "/srv/efi-off")
    off = kernels_module("/srv/efi-off", inventory)
    assert off["secure_boot"]["state"] == "disabled" and off["reboot"]["allowed"], off


# --- a kernel update, signing still on ---------------------------------------------------------------------------

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


def test_next_run_builds_the_module_for_the_new_kernel(inventory, keys, new_kernel, tmp_path):
    release, old, module = new_kernel["new"], new_kernel["old"], new_kernel["module"]
    second = role(inventory, tmp_path, "second", signing(keys))
    assert second.cp.returncode == 0, second.tail()
    # The build is the run's only change.
    changed = second.changed_tasks()
    assert second.stats.get("changed") == 1 and len(changed) == 1 and changed[0].endswith(KERNELS_TASK), \
        (second.stats, changed)
    kernels = second.task(KERNELS_TASK)
    assert len(kernels) == 1 and kernels[0]["built"] == [release] and not kernels[0]["build_failures"], kernels
    # DKMS built and installed it for both kernels; the module file is where DKMS installs it, signed with the key.
    status = dkms_status()
    assert (module, release, "installed") in status and (module, old, "installed") in status, status
    files = module_files(release)
    assert files, sh(f"ls -lR /lib/modules/{release}/updates 2>&1 || true")
    assert sh(f"modinfo -F vermagic {files[0]}").split()[0] == release, files
    assert_signed_by_site(keys, files)
    # The role's result: every kernel ok, the new one (the newest image) is the one the host boots.
    result = second.result
    assert result["boot_kernel"] == release and result["boot_kernel_ok"] is True, result
    assert any(line.startswith(f"{release}: ok - module {module.replace('/', ' ')} installed") for line in
               result["kernels"]), result["kernels"]
    assert any(line.startswith(f"{old}: ok") for line in result["kernels"]), result["kernels"]
    assert f"the kernel it boots, {release}" in result["boot_kernel_reason"], result["boot_kernel_reason"]
    # Nothing left to build: the next run changes nothing.
    third = role(inventory, tmp_path, "third", signing(keys))
    assert third.cp.returncode == 0 and third.stats.get("changed") == 0, (third.stats, third.changed_tasks())
    assert third.task(KERNELS_TASK)[0]["built"] == []
    assert boot_marks(HOST) == new_kernel["boot"]


def test_without_headers_the_run_reports_it_and_refuses_the_reboot(inventory, keys, new_kernel, tmp_path):
    release, module = new_kernel["new"], new_kernel["module"]
    # The new kernel's module (where the test before built it) and its headers removed: an image without them.
    if [s for s in dkms_status() if s[1] == release]:
        sh(f"dkms remove {module} -k {release}")
    sh(f"DEBIAN_FRONTEND=noninteractive apt-get -q -y purge linux-headers-{release}")
    assert not module_files(release) and sh(f"test -f /boot/vmlinuz-{release} && echo yes").strip() == "yes"
    refused = role(inventory, tmp_path, "refused", signing(keys, driver_reboot="reboot"))
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
    assert boot_marks(HOST) == new_kernel["boot"]


# --- signing turned off ------------------------------------------------------------------------------------------

def test_signing_off_removes_the_drop_in(inventory, keys, converged, tmp_path):
    off = role(inventory, tmp_path, "off", {"driver_secure_boot_efi_root": "/srv/no-efi"})
    assert off.cp.returncode == 0 and off.stats.get("changed") == 1, (off.stats, off.tail())
    assert sh(f"test -e {DROP_IN} && echo present || echo gone").strip() == "gone"
    assert sh(f"test -e {OWN_CERT} && echo kept").strip() == "kept"
    again = role(inventory, tmp_path, "off-again", {"driver_secure_boot_efi_root": "/srv/no-efi"})
    assert again.cp.returncode == 0 and again.stats.get("changed") == 0, (again.stats, again.tail())
