"""_secure_boot: X.509 identities as kmod shows a module's signer, the EFI variables' state and signature lists, the
reboot decision. Certificates are made by the real openssl; the EFI trees are laid out as efivarfs shows them."""
from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _secure_boot as sb

pytestmark = pytest.mark.skipif(not shutil.which("openssl"), reason="openssl is not installed")
ATTRS = b"\x06\x00\x00\x00"  # efivarfs' attribute word: BOOTSERVICE_ACCESS | RUNTIME_ACCESS


def make_cert(tmp: Path, subj: str, serial: str = "", name: str = "mok") -> tuple[Path, Path]:
    key, cert = tmp / f"{name}.key", tmp / f"{name}.pem"
    cmd = ["openssl", "req", "-new", "-x509", "-nodes", "-days", "30", "-subj", subj, "-newkey", "rsa:2048",
           "-keyout", str(key), "-out", str(cert)]
    if serial:
        cmd += ["-set_serial", serial]
    subprocess.run(cmd, check=True, capture_output=True)
    return key, cert


def der(cert: Path) -> bytes:
    return subprocess.run(["openssl", "x509", "-in", str(cert), "-outform", "DER"], check=True,
                          capture_output=True).stdout


def openssl_serial(cert: Path) -> str:
    out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-serial"], check=True,
                         capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1]


def signature_list(*certs: bytes, sig_type: bytes = sb.EFI_CERT_X509) -> bytes:
    """One EFI_SIGNATURE_LIST per certificate (sizes differ), each entry an owner GUID then the DER."""
    out = b""
    owner = uuid.uuid4().bytes_le
    for data in certs:
        size = 16 + len(data)
        out += sig_type + (28 + size).to_bytes(4, "little") + (0).to_bytes(4, "little") + size.to_bytes(4, "little")
        out += owner + data
    return out


def efi_tree(root: Path, secure_boot: int | None = 1, setup: int = 0, db: bytes = b"", mok: bytes = b"",
             mok_new: bool = False, mok_table: bytes = b"") -> Path:
    efivars = root / "efivars"
    efivars.mkdir(parents=True)
    if secure_boot is not None:
        (efivars / f"SecureBoot-{sb.GLOBAL_GUID}").write_bytes(ATTRS + bytes([secure_boot]))
    (efivars / f"SetupMode-{sb.GLOBAL_GUID}").write_bytes(ATTRS + bytes([setup]))
    if db:
        (efivars / f"db-{sb.IMAGE_SECURITY_GUID}").write_bytes(ATTRS + db)
    if mok:
        (efivars / f"MokListRT-{sb.SHIM_LOCK_GUID}").write_bytes(ATTRS + mok)
    if mok_new:
        (efivars / f"MokNew-{sb.SHIM_LOCK_GUID}").write_bytes(ATTRS + b"\x00" * 40)
    if mok_table:
        (root / "mok-variables").mkdir()
        (root / "mok-variables" / "MokListRT").write_bytes(mok_table)
    return root


def test_identity_is_what_kmod_shows(tmp_path):
    """signer: the issuer's last name entry (kmod's libkmod-signature.c); serial: upper-case hex pairs as sig_key."""
    _key, cert = make_cert(tmp_path, "/O=Example GPU Fleet/CN=Fleet module signing 2026", "0x00ab12cd34ef")
    ident = sb.identity(der(cert))
    assert ident["signer"] == "Fleet module signing 2026"
    assert ident["subject"] == "Fleet module signing 2026"
    assert ident["serial"] == "AB:12:CD:34:EF"
    assert sb.key_id(openssl_serial(cert)) == ident["serial"]


def test_random_serial_matches_openssl(tmp_path):
    _key, cert = make_cert(tmp_path, "/CN=DKMS module signing key")
    assert sb.identity(der(cert))["serial"] == sb.key_id(openssl_serial(cert))


def test_pem_and_der_give_one_der(tmp_path):
    _key, cert = make_cert(tmp_path, "/CN=x")
    assert sb.to_der(cert.read_text()) == der(cert) == sb.to_der(der(cert))


def test_a_key_given_as_certificate_is_refused(tmp_path):
    key, _cert = make_cert(tmp_path, "/CN=x")
    with pytest.raises(sb.CertificateError, match="without a CERTIFICATE block"):
        sb.to_der(key.read_text())
    with pytest.raises(sb.CertificateError):
        sb.to_der(b"\x30\x03\x02\x01\x01")


def test_key_id_forms():
    assert sb.key_id(b"\x00\x0a\x1b") == "0A:1B" == sb.key_id("0a:1b") == sb.key_id("A1B")


def test_secure_boot_enabled_with_db_and_mok(tmp_path):
    _k1, platform = make_cert(tmp_path, "/CN=Platform db key", "0x01", "db")
    _k2, mok = make_cert(tmp_path, "/O=Site/CN=Site MOK", "0x02", "mok")
    root = efi_tree(tmp_path / "efi", db=signature_list(der(platform)), mok=signature_list(der(mok)), mok_new=True)
    state = sb.secure_boot(root)
    assert state["state"] == "enabled" and state["enforcing"] and state["pending_enrolment"]
    assert [(t["signer"], t["serial"], t["source"]) for t in state["trusted"]] == [
        ("Platform db key", "01", "db"), ("Site MOK", "02", "MokListRT")]


def test_mok_config_table_and_other_signature_types(tmp_path):
    """The kernel's copy of shim's list (no attribute word); SHA-256 entries (not certificates) are skipped."""
    _k, mok = make_cert(tmp_path, "/CN=Site MOK", "0x0102")
    sha256_type = uuid.UUID("c1c41626-504c-4092-aca9-41f936934328").bytes_le
    table = signature_list(b"\x11" * 32, sig_type=sha256_type) + signature_list(der(mok))
    state = sb.secure_boot(efi_tree(tmp_path / "efi", mok_table=table))
    assert [(t["serial"], t["source"]) for t in state["trusted"]] == [("01:02", "mok-variables/MokListRT")]


@pytest.mark.parametrize("value,setup,expected", [(0, 0, "disabled"), (1, 1, "setup_mode"), (None, 0, "unknown")])
def test_states_that_do_not_enforce(tmp_path, value, setup, expected):
    state = sb.secure_boot(efi_tree(tmp_path / "efi", secure_boot=value, setup=setup))
    assert state["state"] == expected and not state["enforcing"]


def test_no_efi(tmp_path):
    assert sb.secure_boot(tmp_path / "absent")["state"] == "not_efi"


def test_truncated_signature_list_is_not_read_past(tmp_path):
    _k, mok = make_cert(tmp_path, "/CN=x")
    data = signature_list(der(mok))
    assert sb.signature_list_certs(data[:-10]) == []


# modinfo's output for two DKMS-built modules of Debian 12's 535 driver (the fields that matter here; signature lines
# continue with tabs, as modinfo prints them).
MODINFO = """filename:       /lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current.ko
alias:          char-major-195-*
version:        535.261.03
sig_id:         PKCS#7
signer:         Site MOK
sig_key:        01:02
sig_hashalgo:   sha256
signature:      30:82:01:22:02:01:01:31:0D:30:0B:06:09:60:86:48:01:65:03:04:
\t\t02:01:30:0B:06:09:2A:86:48:86:F7:0D:01:07:01:31:82:01:01:30:
filename:       /lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current-uvm.ko
version:        535.261.03
vermagic:       6.1.0-44-amd64 SMP preempt mod_unload modversions
"""


def test_parse_modinfo():
    found = sb.parse_modinfo(MODINFO)
    assert found["/lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current.ko"] == {
        "signer": "Site MOK", "sig_key": "01:02", "sig_hashalgo": "sha256"}
    assert found["/lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current-uvm.ko"]["sig_key"] == ""


def test_reboot_refused_into_untrusted_modules(tmp_path):
    _k, mok = make_cert(tmp_path, "/CN=Site MOK", "0x0102")
    state = sb.secure_boot(efi_tree(tmp_path / "efi", mok=signature_list(der(mok))))
    trust = sb.module_trust(sb.parse_modinfo(MODINFO), state["trusted"])
    assert [(m["signed"], m["trusted_by"]) for m in trust] == [(False, ""), (True, "MokListRT")]
    decision = sb.reboot_decision("gpu-7", "6.1.0-44-amd64", trust, state, "/var/lib/dkms/mok.pub")
    assert not decision["allowed"]
    assert decision["reason"].startswith("gpu-7: refusing to reboot into kernel 6.1.0-44-amd64: Secure Boot")
    assert "nvidia-current-uvm.ko: unsigned" in decision["reason"]
    assert "mokutil --import /var/lib/dkms/mok.pub" in decision["reason"]
    signed = [dict(m, trusted_by="MokListRT", signed=True) for m in trust]
    assert sb.reboot_decision("gpu-7", "6.1.0-44-amd64", signed, state)["allowed"]


def test_reboot_allowed_when_not_enforced():
    decision = sb.reboot_decision("h", "k", [{"path": "x", "signed": False, "trusted_by": ""}],
                                  {"state": "disabled", "enforcing": False})
    assert decision["allowed"] and "disabled" in decision["reason"]


def test_signed_by_lists_what_to_rebuild():
    modules = sb.parse_modinfo(MODINFO)
    assert sb.signed_by(modules, {"signer": "Site MOK", "serial": "01:02"}) == [
        "/lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current-uvm.ko"]
    assert len(sb.signed_by(modules, {"signer": "Other", "serial": "01:02"})) == 2


@pytest.mark.parametrize("path,ok", [("/var/lib/k8sgpu-nvidia/secure-boot/signing.key", True),
                                     ("relative/key", False), ("/a b/key", False), ("/a/$(reboot)", False),
                                     ('/a/"x', False), ("/a/../etc/shadow", False), ("", False)])
def test_shell_safe_path(path, ok):
    assert sb.shell_safe_path(path) is ok


def test_dkms_drop_in():
    text = sb.dkms_drop_in("/k", "/c")
    assert 'mok_signing_key="/k"\nmok_certificate="/c"\n' in text and text.startswith("# Managed by k8sgpu.nvidia")


def test_dkms_certificate_last_file_wins(tmp_path):
    assert sb.dkms_certificate(tmp_path) == sb.DKMS_DEFAULT_CERTIFICATE
    (tmp_path / "etc/dkms/framework.conf.d").mkdir(parents=True)
    (tmp_path / "etc/dkms/framework.conf").write_text('# mok_certificate=/var/lib/dkms/mok.pub\n')
    (tmp_path / "etc/dkms/framework.conf.d/10-a.conf").write_text('mok_certificate="/a.der"\n')
    (tmp_path / "etc/dkms/framework.conf.d/90-k8sgpu-nvidia-signing.conf").write_text(sb.dkms_drop_in("/k", "/c"))
    assert sb.dkms_certificate(tmp_path) == "/c"


def kernels_read(allowed: bool = True) -> dict:
    files = ["/lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current.ko",
             "/lib/modules/6.1.0-44-amd64/updates/dkms/nvidia-current-uvm.ko"]
    return {"kernels": {"6.1.0-44-amd64": {"module_files": files}, "6.1.0-40-amd64": {"module_files": []}},
            "reboot": {"allowed": allowed, "candidates": ["6.1.0-44-amd64", "6.1.0-40-amd64"], "reason": "ok",
                       "refused_kernels": []}}


def test_kernels_reboot_refused_under_secure_boot(tmp_path):
    _k, mok = make_cert(tmp_path, "/CN=Site MOK", "0x0102")
    efi = efi_tree(tmp_path / "efi", mok=signature_list(der(mok)))
    asked = []

    def modinfo(paths):
        asked.append(paths)
        return MODINFO
    read = sb.kernels_reboot("gpu-7", "/", kernels_read(), efi, modinfo)
    assert asked == [kernels_read()["kernels"]["6.1.0-44-amd64"]["module_files"]]
    assert read["secure_boot"]["state"] == "enabled" and read["secure_boot"]["modules_trusted"] is False
    assert not read["reboot"]["allowed"] and read["reboot"]["refused_kernels"] == ["6.1.0-44-amd64"]
    assert "nvidia-current-uvm.ko: unsigned" in read["reboot"]["reason"]


def test_kernels_reboot_reads_no_module_without_secure_boot(tmp_path):
    def modinfo(paths):
        raise AssertionError("modinfo run without Secure Boot")
    for efi in (efi_tree(tmp_path / "off", secure_boot=0), tmp_path / "none"):
        read = sb.kernels_reboot("gpu-7", "/", kernels_read(), efi, modinfo)
        assert read["reboot"]["allowed"] and not read["secure_boot"]["enforcing"]
    # A reboot the kernel check refused already stays refused, its reason kept.
    read = sb.kernels_reboot("gpu-7", "/", kernels_read(False), efi_tree(tmp_path / "on"), modinfo)
    assert not read["reboot"]["allowed"] and read["reboot"]["reason"] == "ok"
