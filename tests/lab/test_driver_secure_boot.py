"""Secure Boot (issue 45 item 2): DKMS signs the NVIDIA modules with the site's key, the role checks every module's
signer, and a reboot into modules no enrolled key signed is refused.

A GPU host of the lab's recipe of its own (lab/lab.sh node --gpu-host: the gpu-host image, the lab's apt proxy and
DKMS ccache) gets Debian 12's 535 driver from the role with driver_secure_boot_signing on and a key pair the test makes
with openssl (given as content, as from a vault). Checked on the host: DKMS's drop-in, the key (0600, never in the
run's output), and ``modinfo``'s ``signer``/``sig_key`` of every module DKMS built against the certificate's issuer
and serial (real DKMS, real sign-file of linux-kbuild, real kmod); DKMS made no key of its own. The next run changes
nothing. Then the EFI variables are a tree the test lays out as efivarfs shows them (SecureBoot, SetupMode, shim's
MokListRT as EFI_SIGNATURE_LISTs): with Secure Boot enabled and only another certificate enrolled, a
``driver_reboot=reboot`` run is refused before the reboot task, naming the host, the kernel, the module and
``mokutil --import``; PID 1 and the container are the same afterwards. With the certificate in MokListRT,
driver_kernels (the decision the driver role, node_maintenance's reboot and gpu_health's recovery share) allows it.
Signing turned off removes the drop-in and keeps the key.

What the container cannot prove: that a real firmware and shim enforce what the tree says (the kernel here is the
machine's own, it never loads these modules), and mokutil's enrolment at the console; the signatures, DKMS's use of
the key and the decisions are real.
"""
from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import LAB_NAME, node_sh, run

HOST = f"{LAB_NAME}-secure-boot-1"
PLAY = "tests/lab/playbooks/driver.yml"
SUBJECT = "/O=k8sgpu lab/CN=k8sgpu lab module signing"
SIGNER = "k8sgpu lab module signing"
OWN_CERT = "/var/lib/k8sgpu-nvidia/secure-boot/signing.der"
DROP_IN = "/etc/dkms/framework.conf.d/90-k8sgpu-nvidia-signing.conf"
REFUSAL_TASK = "Refuse a reboot into a kernel without the NVIDIA module"
REBOOT_TASK = "Reboot into the new driver"
GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SHIM = "605dab50-e046-4300-abb6-3dd810dd8b23"
X509 = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072").bytes_le
# A hang guard, not a figure: the first run (the driver's install, DKMS's build) takes minutes.
BUILD_TIMEOUT = 1800


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


def boot_marks() -> tuple[str, str]:
    started = sh("cut -d' ' -f22 /proc/1/stat").strip()
    restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}} {{.State.StartedAt}}", HOST],
                              capture_output=True, text=True, check=True).stdout.strip()
    return started, restarts


def dkms_modules() -> list[str]:
    return sh("find /lib/modules/*/updates/dkms -name 'nvidia*.ko*' 2>/dev/null | sort || true").split()


class Run:
    def __init__(self, cp: subprocess.CompletedProcess, result: dict | None):
        self.cp, self.result = cp, result
        self.out = json.loads(cp.stdout) if cp.stdout.strip().startswith("{") else {}
        self.tasks = [(t["task"]["name"], t["hosts"].get(HOST, {}))
                      for play in self.out.get("plays", []) for t in play["tasks"]]

    @property
    def stats(self) -> dict:
        return self.out.get("stats", {}).get(HOST, {})

    def task(self, name: str) -> list[dict]:
        return [r for n, r in self.tasks if n.endswith(name) and not r.get("skipped")]

    def text(self) -> str:
        return self.cp.stdout + self.cp.stderr

    def tail(self) -> str:
        return f"rc {self.cp.returncode}\n{self.cp.stdout[-4000:]}\n{self.cp.stderr[-2000:]}"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp("secure-boot") / "hosts.yml"
    path.write_text(json.dumps({"gpu_nodes": {"hosts": {HOST: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    try:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
        cp = run(["lab/lab.sh", "node", "--gpu-host", HOST, "bookworm"], timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
        yield path
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)


def role(inventory: Path, tmp_path: Path, name: str, extra: dict) -> Run:
    out = tmp_path / f"{name}.json"
    extra_file = tmp_path / f"{name}-vars.json"
    extra_file.write_text(json.dumps({"node": HOST, "out": str(out), **extra}))
    cp = run(["ansible-playbook", "-i", "inventories/lab", "-i", str(inventory), "-l", HOST, PLAY,
              "-e", f"@{extra_file}"], timeout=BUILD_TIMEOUT,
             env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"})
    return Run(cp, json.loads(out.read_text()) if out.exists() else None)


def signing(keys: dict, **more) -> dict:
    return {"driver_secure_boot_signing": True, "driver_secure_boot_key_content": keys["site"]["key"],
            "driver_secure_boot_certificate_content": keys["site"]["cert"],
            "driver_secure_boot_efi_root": "/srv/no-efi", **more}


def key_body(keys: dict) -> str:
    return "".join(keys["site"]["key"].splitlines()[1:-1])


@pytest.fixture(scope="module")
def converged(inventory, keys, tmp_path_factory):
    first = role(inventory, tmp_path_factory.mktemp("first"), "first", signing(keys))
    assert first.cp.returncode == 0, first.tail()
    assert first.result and first.result["status"].startswith("installed"), first.result
    assert key_body(keys)[:48] not in first.text(), "the private key is in the run's output"
    return first


def test_dkms_signs_every_module_with_the_site_key(inventory, keys, converged, tmp_path):
    drop_in = sh(f"cat {DROP_IN}")
    assert 'mok_certificate="/var/lib/k8sgpu-nvidia/secure-boot/signing.der"' in drop_in, drop_in
    assert sh("stat -c '%a %U' /var/lib/k8sgpu-nvidia/secure-boot/signing.key").split() == ["600", "root"]
    assert sh("stat -c '%a' /var/lib/k8sgpu-nvidia/secure-boot").strip() == "700"
    modules = dkms_modules()
    assert len(modules) >= 4, modules  # nvidia, -modeset, -drm, -uvm (and -peermem)
    for path in modules:
        assert sh(f"modinfo -F signer {path}").strip() == SIGNER, path
        assert sh(f"modinfo -F sig_key {path}").strip() == keys["site"]["serial"], path
    # DKMS used the site's key: it made none of its own.
    assert sh("ls /var/lib/dkms/mok.key 2>/dev/null || echo none").strip() == "none"
    again = role(inventory, tmp_path, "again", signing(keys))
    assert again.cp.returncode == 0 and again.stats.get("changed") == 0, (again.stats, again.tail())
    assert key_body(keys)[:48] not in again.text()


def test_reboot_into_modules_no_enrolled_key_signed_is_refused(inventory, keys, converged, tmp_path):
    put_tree(efi_tree(tmp_path / "wrong", 1, keys["other"]["der"]), "/srv/efi-wrong")
    before = boot_marks()
    refused = role(inventory, tmp_path, "refused", signing(keys, driver_reboot="reboot",
                                                           driver_secure_boot_efi_root="/srv/efi-wrong"))
    assert refused.cp.returncode != 0 and refused.result is None, refused.tail()
    refusal = refused.task(REFUSAL_TASK)
    assert len(refusal) == 1 and refusal[0].get("failed"), refused.tail()
    msg = refusal[0]["msg"]
    assert msg.startswith(f"{HOST}: refusing to reboot into kernel 6.1.0-"), msg
    assert "Secure Boot is enabled" in msg and f"signed by '{SIGNER}'" in msg, msg
    assert f"mokutil --import {OWN_CERT}" in msg and "/updates/dkms/nvidia" in msg, msg
    assert not refused.task(REBOOT_TASK) and boot_marks() == before


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


def test_signing_off_removes_the_drop_in(inventory, keys, converged, tmp_path):
    off = role(inventory, tmp_path, "off", {"driver_secure_boot_efi_root": "/srv/no-efi"})
    assert off.cp.returncode == 0 and off.stats.get("changed") == 1, (off.stats, off.tail())
    assert sh(f"test -e {DROP_IN} && echo present || echo gone").strip() == "gone"
    assert sh(f"test -e {OWN_CERT} && echo kept").strip() == "kept"
    assert role(inventory, tmp_path, "off-again", {"driver_secure_boot_efi_root": "/srv/no-efi"}).stats.get(
        "changed") == 0
