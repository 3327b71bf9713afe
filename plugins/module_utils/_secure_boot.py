# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secure Boot and the NVIDIA modules' signatures: what the firmware trusts, who signed each module, and whether a
host may boot into them.

Sources: the EFI variables under ``<efi_root>/efivars`` (UEFI 2.10 section 3.3: ``SecureBoot`` and ``SetupMode`` of
the global variable GUID, one attribute word then one byte; ``db`` of the image security database GUID, section
32.4.1's EFI_SIGNATURE_LIST), shim's ``MokListRT`` (shim's lock GUID; also ``<efi_root>/mok-variables/MokListRT``,
the kernel's copy of shim's MOK config table, without the attribute word) and ``MokNew`` (an import waiting for the
console on the next boot); ``modinfo``'s ``signer`` and ``sig_key`` of each module file (kmod reads them from the
module's PKCS#7 signature: the issuer's last name entry and the serial number of the signing certificate, as
``sign-file`` writes it); the certificates' own DER (X.509, RFC 5280 section 4.1).
"""
from __future__ import annotations

import base64
import binascii
import re
import uuid
from pathlib import Path
from typing import Iterable, Mapping, Sequence

GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
IMAGE_SECURITY_GUID = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"
SHIM_LOCK_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
EFI_CERT_X509 = uuid.UUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072").bytes_le

# DKMS (3.x) reads these two from /etc/dkms/framework.conf and framework.conf.d/*.conf, which it sources as shell.
DKMS_DROP_IN = "/etc/dkms/framework.conf.d/90-k8sgpu-nvidia-signing.conf"
DKMS_DEFAULT_CERTIFICATE = "/var/lib/dkms/mok.pub"
_SHELL_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+@/-]+$")
_OID_COMMON_NAME = b"\x55\x04\x03"
_STRING_TAGS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x14: "latin-1", 0x1E: "utf-16-be", 0x1C: "utf-32-be"}


class CertificateError(ValueError):
    """A certificate that is not an X.509 certificate in PEM or DER."""


# ---------------------------------------------------------------- DER ----------------------------------------------

def _tlv(data: bytes, pos: int) -> tuple[int, bytes, int]:
    """One DER element at pos: (tag, content, position after it)."""
    if pos + 2 > len(data):
        raise CertificateError("truncated DER")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if not 0 < count <= 4 or pos + count > len(data):
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    end = pos + length
    if end > len(data):
        raise CertificateError("truncated DER")
    return tag, data[pos:end], end


def _children(content: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(content):
        tag, value, pos = _tlv(content, pos)
        out.append((tag, value))
    return out


def to_der(text_or_bytes: str | bytes) -> bytes:
    """A certificate in PEM (the first CERTIFICATE block) or DER, as DER."""
    data = text_or_bytes.encode() if isinstance(text_or_bytes, str) else bytes(text_or_bytes)
    if b"-----BEGIN" in data:
        m = re.search(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", data, re.S)
        if not m:
            raise CertificateError("PEM without a CERTIFICATE block (a private key given as the certificate?)")
        try:
            data = base64.b64decode(b"".join(m.group(1).split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CertificateError(f"PEM block is not base64: {exc}") from None
    identity(data)
    return data


def _name_entries(name: bytes) -> list[tuple[bytes, str]]:
    entries = []
    for tag, rdn in _children(name):
        if tag != 0x31:
            raise CertificateError("bad Name")
        for _tag, attr in _children(rdn):
            parts = _children(attr)
            if len(parts) != 2 or parts[0][0] != 0x06:
                raise CertificateError("bad name attribute")
            vtag, value = parts[1]
            entries.append((parts[0][1], value.decode(_STRING_TAGS.get(vtag, "latin-1"), "replace")))
    return entries


def identity(der: bytes) -> dict:
    """The certificate's issuer, subject and serial as kmod shows a module's signer: ``signer`` is the issuer's last
    name entry (kmod's libkmod-signature.c), ``serial`` the serial number in upper-case hex pairs joined by ':'
    (``modinfo``'s ``sig_key``)."""
    try:
        tag, cert, end = _tlv(der, 0)
        if tag != 0x30 or end != len(der):
            raise CertificateError("not a DER SEQUENCE")
        parts = _children(cert)
        if len(parts) != 3 or parts[0][0] != 0x30:
            raise CertificateError("not an X.509 certificate")
        tbs = _children(parts[0][1])
        if tbs and tbs[0][0] == 0xA0:
            tbs = tbs[1:]
        if len(tbs) < 5 or tbs[0][0] != 0x02 or tbs[2][0] != 0x30 or tbs[4][0] != 0x30:
            raise CertificateError("not an X.509 certificate")
    except IndexError:
        raise CertificateError("truncated DER") from None
    issuer = _name_entries(tbs[2][1])
    subject = _name_entries(tbs[4][1])
    cn = [value for oid, value in subject if oid == _OID_COMMON_NAME]
    return {
        "serial": key_id(tbs[0][1]),
        "signer": issuer[-1][1] if issuer else "",
        "subject": cn[-1] if cn else (subject[-1][1] if subject else ""),
    }


def key_id(raw: bytes | str) -> str:
    """Serial bytes (or modinfo's hex) as upper-case hex pairs without leading zero bytes: ``0A:1B``."""
    if isinstance(raw, str):
        digits = re.sub(r"[^0-9A-Fa-f]", "", raw)
        if len(digits) % 2:
            digits = "0" + digits
        raw = bytes.fromhex(digits)
    raw = raw.lstrip(b"\x00") or b"\x00"
    return ":".join(f"{b:02X}" for b in raw)


# ---------------------------------------------------------------- EFI ----------------------------------------------

def _var(efi_root: Path, name: str, guid: str) -> bytes | None:
    """An EFI variable's data without efivarfs' attribute word; None when absent or unreadable."""
    try:
        data = (efi_root / "efivars" / f"{name}-{guid}").read_bytes()
    except OSError:
        return None
    return data[4:] if len(data) >= 4 else None


def signature_list_certs(data: bytes) -> list[bytes]:
    """The X.509 certificates (DER) in a run of EFI_SIGNATURE_LISTs (UEFI 2.10 section 32.4.1)."""
    certs, pos = [], 0
    while pos + 28 <= len(data):
        sig_type = data[pos:pos + 16]
        list_size = int.from_bytes(data[pos + 16:pos + 20], "little")
        header_size = int.from_bytes(data[pos + 20:pos + 24], "little")
        sig_size = int.from_bytes(data[pos + 24:pos + 28], "little")
        if list_size < 28 or pos + list_size > len(data) or sig_size < 16:
            break
        if sig_type == EFI_CERT_X509:
            first = pos + 28 + header_size
            for at in range(first, pos + list_size - sig_size + 1, sig_size):
                certs.append(data[at + 16:at + sig_size])
        pos += list_size
    return certs


def secure_boot(efi_root: str | Path = "/sys/firmware/efi") -> dict:
    """The firmware's Secure Boot state and the certificates it and shim trust for kernel modules.

    ``state``: ``enabled``, ``disabled``, ``setup_mode`` (no platform key: nothing enforced), ``unknown`` (EFI but the
    variable unreadable) or ``not_efi`` (no ``efi_root``: BIOS boot, or a container)."""
    root = Path(efi_root)
    out: dict = {"efi_root": str(root), "state": "not_efi", "enforcing": False, "trusted": [],
                 "pending_enrolment": False, "sources": []}
    if not root.is_dir():
        return out
    value = _var(root, "SecureBoot", GLOBAL_GUID)
    setup = _var(root, "SetupMode", GLOBAL_GUID)
    if value is None:
        out["state"] = "unknown"
    elif setup and setup[:1] == b"\x01":
        out["state"] = "setup_mode"
    else:
        out["state"] = "enabled" if value[:1] == b"\x01" else "disabled"
    out["enforcing"] = out["state"] == "enabled"
    seen: set[bytes] = set()
    sources = [("db", _var(root, "db", IMAGE_SECURITY_GUID)), ("MokListRT", _var(root, "MokListRT", SHIM_LOCK_GUID))]
    try:
        sources.append(("mok-variables/MokListRT", (root / "mok-variables" / "MokListRT").read_bytes()))
    except OSError:
        pass
    for source, data in sources:
        if not data:
            continue
        out["sources"].append(source)
        for der in signature_list_certs(data):
            if der in seen:
                continue
            seen.add(der)
            try:
                out["trusted"].append(dict(identity(der), source=source))
            except CertificateError:
                continue
    out["pending_enrolment"] = _var(root, "MokNew", SHIM_LOCK_GUID) is not None
    return out


# ------------------------------------------------------------- modules ---------------------------------------------

def parse_modinfo(text: str) -> dict[str, dict]:
    """``modinfo FILE...``'s output: per file, its ``signer``, ``sig_key`` and ``sig_hashalgo`` ('' when unsigned)."""
    found: dict[str, dict] = {}
    current: dict | None = None
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+):\s*(.*)$", line)
        if not m:
            continue
        field, value = m.group(1), m.group(2).strip()
        if field == "filename":
            current = found.setdefault(value, {"signer": "", "sig_key": "", "sig_hashalgo": ""})
        elif current is not None and field in current:
            current[field] = value
    return found


def module_trust(modules: Mapping[str, Mapping], trusted: Sequence[Mapping]) -> list[dict]:
    """Each module with the trusted certificate that signed it ('' when none): a module is trusted when an enrolled
    certificate has its issuer's last name entry as the module's signer and its serial as the module's sig_key."""
    keys = {(c["signer"], key_id(c["serial"])): c for c in trusted}
    out = []
    for path in sorted(modules):
        info = modules[path]
        signed = bool(info.get("sig_key"))
        match = keys.get((info.get("signer", ""), key_id(info["sig_key"]))) if signed else None
        out.append({"path": path, "signer": info.get("signer", ""), "sig_key": info.get("sig_key", ""),
                    "signed": signed, "trusted_by": match["source"] if match else ""})
    return out


def signed_by(modules: Mapping[str, Mapping], certificate: Mapping) -> list[str]:
    """The modules NOT signed by the certificate (its identity()): the ones to rebuild."""
    want = (certificate["signer"], key_id(certificate["serial"]))
    return sorted(p for p, info in modules.items()
                  if not info.get("sig_key") or (info.get("signer", ""), key_id(info["sig_key"])) != want)


def reboot_decision(host: str, kernel: str, modules: Iterable[Mapping], state: Mapping, certificate: str = "") -> dict:
    """Whether booting ``kernel`` loads its NVIDIA modules under the firmware's Secure Boot state."""
    modules = list(modules)
    if not state.get("enforcing"):
        return {"allowed": True, "reason": f"Secure Boot {state.get('state', 'not_efi')}: module signatures not "
                                           f"enforced by the firmware"}
    refused = [m for m in modules if not m.get("trusted_by")]
    if not refused:
        return {"allowed": True, "reason": f"Secure Boot enabled: every NVIDIA module of {kernel} is signed by an "
                                           f"enrolled key"}
    first = refused[0]
    why = (f"signed by '{first['signer']}' (key {first['sig_key']}), a key the firmware and shim do not trust"
           if first["signed"] else "unsigned")
    cert = certificate or DKMS_DEFAULT_CERTIFICATE
    pending = (" An import is waiting (MokNew): it takes effect only when confirmed at the console during the "
               "next boot, which an unattended reboot does not do." if state.get("pending_enrolment") else "")
    return {"allowed": False, "reason": (
        f"{host}: refusing to reboot into kernel {kernel}: Secure Boot is enabled and {len(refused)} of its "
        f"{len(modules)} NVIDIA module(s) would be refused by the kernel ({first['path']}: {why}), leaving the host "
        f"without its GPUs. Enrol the signing certificate: mokutil --import {cert} (DER), then confirm the import at "
        f"the console on the next boot (MokManager), then run again; or sign the modules with an enrolled key "
        f"(driver_secure_boot_signing).{pending}")}


def boot_decision(host: str, kernels: Mapping[str, Sequence[Mapping]], candidates: Iterable[str], state: Mapping,
                  certificate: str = "") -> dict:
    """reboot_decision over every kernel the host may boot (those with NVIDIA modules): ``allowed``, ``kernels``,
    ``reason`` (the first refusal's, else the first kernel's)."""
    checked = [k for k in candidates if kernels.get(k)]
    decisions = [reboot_decision(host, k, kernels[k], state, certificate) for k in checked]
    refused = [d for d in decisions if not d["allowed"]]
    reason = (refused or decisions)[0]["reason"] if decisions else "no NVIDIA module in a kernel the host may boot"
    return {"allowed": not refused, "kernels": checked, "secure_boot": state.get("state", "not_efi"),
            "reason": reason}


def kernels_reboot(host: str, root: str | Path, read: dict, efi_root: str | Path, modinfo) -> dict:
    """driver_kernels' reading (``_driver_kernels.read_kernels``) with Secure Boot added to its reboot decision, in
    place: ``secure_boot`` (the state, always: a few small file reads), and where Secure Boot is enforcing and the
    kernel check allowed the reboot, the NVIDIA modules of every kernel it may boot must be trusted (signed by an
    enrolled key), else ``reboot.allowed`` is false and ``reboot.reason`` names the host, kernel, module and fix.
    ``modinfo``: a callable taking host paths (under ``root``) and returning ``modinfo``'s output, called only then."""
    state = secure_boot(efi_root)
    read["secure_boot"] = {k: state[k] for k in ("state", "enforcing", "pending_enrolment", "sources")}
    reboot = read["reboot"]
    if not state["enforcing"] or not reboot["allowed"]:
        return read
    candidates = [k for k in (reboot.get("candidates") or []) if read["kernels"].get(k, {}).get("module_files")]
    if not candidates:
        return read
    base = str(Path(root))
    local = {f: (f if base == "/" else base + f) for k in candidates for f in read["kernels"][k]["module_files"]}
    found = parse_modinfo(modinfo(list(local.values())))
    trust = {k: module_trust({f: found.get(local[f], {"signer": "", "sig_key": ""})
                              for f in read["kernels"][k]["module_files"]}, state["trusted"]) for k in candidates}
    decision = boot_decision(host or "this host", trust, candidates, state, dkms_certificate(root))
    read["secure_boot"]["modules_trusted"] = decision["allowed"]
    if not decision["allowed"]:
        reboot.update(allowed=False, reason=decision["reason"],
                      refused_kernels=[k for k in candidates if any(not m["trusted_by"] for m in trust[k])])
    return read


# ------------------------------------------------------------------ DKMS -------------------------------------------

def dkms_certificate(root: str | Path = "/") -> str:
    """The certificate DKMS signs with: ``mok_certificate`` of its framework files (the last one read wins, as DKMS
    sources them in order), else its default."""
    base = Path(root)
    conf = base / "etc/dkms"
    files = [conf / "framework.conf"] + sorted((conf / "framework.conf.d").glob("*.conf"))
    found = DKMS_DEFAULT_CERTIFICATE
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for m in re.finditer(r"^\s*mok_certificate=[\"']?([^\"'\s]+)", text, re.M):
            found = m.group(1)
    return found


def shell_safe_path(path: str) -> bool:
    """DKMS sources its framework files as shell: a path there is absolute and plain."""
    return bool(_SHELL_SAFE_PATH.match(path or "")) and "/../" not in path + "/"


def dkms_drop_in(key: str, certificate: str) -> str:
    return ("# Managed by k8sgpu.nvidia (driver role, driver_secure_boot_signing): DKMS signs the NVIDIA modules it\n"
            "# builds with the site's Secure Boot key. Removed by the role when signing is off.\n"
            f'mok_signing_key="{key}"\nmok_certificate="{certificate}"\n')
