#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_module_signing
short_description: Secure Boot for the host-installed NVIDIA driver - DKMS's signing key, the modules' signers, the
  firmware's state
version_added: 2.0.0
description:
  - With O(signing), configures DKMS (3.x, Debian 12 and later, Ubuntu 22.04 and later) to sign the modules it builds
    with the site's key - C(mok_signing_key) and C(mok_certificate) in
    C(/etc/dkms/framework.conf.d/90-k8sgpu-nvidia-signing.conf) - and, with O(rebuild), rebuilds
    (C(dkms build --force) then C(dkms install --force)) the NVIDIA module of every kernel whose DKMS-built module
    files (under C(/lib/modules/<release>/updates/)) are not signed by that certificate, so a key turned on later
    covers the modules built before. Then every such module must be signed by the certificate, else the module fails
    naming the host, the module file, its signer and the fix.
  - The key and the certificate are files on the host (O(key), O(certificate)), or their content (O(key_content),
    O(certificate_content), PEM), written to C(/var/lib/k8sgpu-nvidia/secure-boot/) (key 0600, directory 0700). The
    key is never returned, logged or shown in a diff. A key that does not belong to the certificate is refused
    before anything is written (where C(openssl) is on the host).
  - Reads the firmware's Secure Boot state from the EFI variables under O(efi_root) (C(SecureBoot), C(SetupMode)) and
    the certificates the kernel trusts for modules besides its own - the firmware's C(db) and shim's C(MokListRT) (the
    EFI variable, and the kernel's copy in C(mok-variables/)); C(MokNew) means an import waits for the console. A
    module is trusted when an enrolled certificate's issuer (last name entry) and serial number are the module's
    C(signer) and C(sig_key) (C(modinfo)). Decides whether a reboot may be done (RV(reboot)) - with Secure Boot
    enabled, every NVIDIA module of every kernel the host may boot (M(k8sgpu.nvidia.driver_kernels)'s decision of
    the boot kernel) must be trusted, else the kernel would refuse them and the host come up without its GPUs.
  - O(state=absent) removes the DKMS drop-in and the files this module wrote under
    C(/var/lib/k8sgpu-nvidia/secure-boot/); key and certificate files the site gave by path are left.
  - Written because the reading is binary (EFI signature lists, X.509 DER) and the decision must be the driver
    role's before a reboot; no collection reads Secure Boot or module signers.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details: The DKMS drop-in and the certificate are shown; the key never is (only that it would be written).
  platform:
    platforms: linux
options:
  state:
    description: V(present) configures (with O(signing)) and reads; V(absent) removes what this module wrote.
    type: str
    choices: [present, absent]
    default: present
  signing:
    description: Configure DKMS to sign with the site's key and check that every DKMS-built NVIDIA module is signed
      by its certificate. Off, the drop-in is removed (DKMS then signs with its own key, C(/var/lib/dkms/mok.key),
      where the kernel's sign-file is installed) and the modules are only read.
    type: bool
    default: false
  key:
    description: The private key's path on the host (PEM, or a C(pkcs11:) URI that the kernel's C(sign-file)
      understands). Ignored with O(key_content). An absolute path of letters, digits and C(._+@/-) (DKMS reads it as
      shell).
    type: str
    default: ""
  key_content:
    description: The private key (PEM), written to C(/var/lib/k8sgpu-nvidia/secure-boot/signing.key) with mode 0600.
    type: str
    default: ""
  certificate:
    description: The certificate's path on the host (DER or PEM). Ignored with O(certificate_content).
    type: str
    default: ""
  certificate_content:
    description: The certificate (PEM), written as DER to C(/var/lib/k8sgpu-nvidia/secure-boot/signing.der), the form
      C(mokutil --import) takes.
    type: str
    default: ""
  rebuild:
    description: With O(signing), rebuild the NVIDIA module of kernels whose modules are not signed by the certificate.
    type: bool
    default: true
  efi_root:
    description: Where the EFI variables are read (C(<efi_root>/efivars), C(<efi_root>/mok-variables)); for tests, a
      tree of one's own.
    type: path
    default: /sys/firmware/efi
  root:
    description: The filesystem root the module and DKMS trees are read under; for tests, V(/) on hosts.
    type: path
    default: /
  host:
    description: The inventory host name, for the messages.
    type: str
    default: ""
notes:
  - Proven in the lab with real DKMS builds signed by a key the test makes and C(modinfo)'s signer read back; the EFI
    state is read from a test tree there (no firmware in a container), so that a real firmware enforces what is read
    is not proven there.
seealso:
  - module: k8sgpu.nvidia.driver_kernels
  - name: DKMS's framework.conf (mok_signing_key, mok_certificate)
    description: The variables DKMS reads for module signing.
    link: https://github.com/dell/dkms/blob/master/dkms_framework.conf
"""

EXAMPLES = r"""
- name: Sign the NVIDIA modules with the site's Secure Boot key
  k8sgpu.nvidia.driver_module_signing:
    signing: true
    key_content: "{{ vault_mok_key }}"
    certificate_content: "{{ lookup('ansible.builtin.file', 'files/mok.pem') }}"
    host: "{{ inventory_hostname }}"
  register: signing

- name: Refuse a reboot into modules the firmware refuses
  ansible.builtin.assert:
    that: signing.reboot.allowed
    fail_msg: "{{ signing.reboot.reason }}"
"""

RETURN = r"""
secure_boot:
  description: The firmware's state, read from the EFI variables under O(efi_root).
  returned: always
  type: dict
  contains:
    state:
      description: V(enabled), V(disabled), V(setup_mode), V(unknown) (EFI, the variable unreadable) or V(not_efi).
      type: str
    enforcing:
      description: True when the state is V(enabled) (the kernel then refuses modules not signed by a trusted key).
      type: bool
    trusted:
      description: The enrolled certificates (C(signer), C(serial), C(subject), C(source) - V(db), V(MokListRT)).
      type: list
      elements: dict
    pending_enrolment:
      description: Shim's C(MokNew) exists - an import waits for confirmation at the console on the next boot.
      type: bool
certificate:
  description: The signing certificate (with O(signing); else the one DKMS's framework files name, by default its own
    C(/var/lib/dkms/mok.pub), where it exists) -
    C(path), C(signer), C(serial), C(subject), C(enrolled) (null where the firmware's lists cannot be read).
  returned: always
  type: dict
kernels:
  description: Per installed kernel, its NVIDIA module files with C(signer), C(sig_key) (C(modinfo)), C(signed),
    C(trusted_by) (V(db), V(MokListRT) or empty) and C(signed_by_certificate).
  returned: always
  type: dict
rebuilt:
  description: The kernels whose module was rebuilt to be signed by the certificate.
  returned: always
  type: list
  elements: str
would_rebuild:
  description: In check mode, the kernels it would rebuild for.
  returned: always
  type: list
  elements: str
files:
  description: The files written or removed (C(path), C(action) - V(written), V(removed)); the key's content never.
  returned: always
  type: list
  elements: dict
reboot:
  description: Whether a reboot may be done under Secure Boot (C(allowed), C(kernels) checked, C(reason) naming the
    host, the kernel, the module and the fix when refused).
  returned: always
  type: dict
"""

import os
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _atomic_file
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _secure_boot as sb
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_kernels import (
    boot_kernel, dkms_tree, installed_kernels, module_files)

OWN_DIR = "/var/lib/k8sgpu-nvidia/secure-boot"
OWN_KEY = OWN_DIR + "/signing.key"
OWN_CERT = OWN_DIR + "/signing.der"


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _write(module: AnsibleModule, path: str, data: bytes, exists: bool, mode: int, dir_mode: int) -> None:
    """Atomically (_atomic_file.write_file: a temporary file beside it, fsync, rename), the file and a directory
    this module made given their modes whatever the umask; an existing file gets ``mode`` too (a key made 0644 by
    hand becomes 0600), the collection's own directory 0700."""
    directory = os.path.dirname(path)
    _atomic_file.make_parents(directory, dir_mode)
    if dir_mode == 0o700 and os.stat(directory).st_mode & 0o777 != dir_mode:
        os.chmod(directory, dir_mode)
    if exists:
        os.chmod(path, mode)  # before the write: the secret is never readable by others
    _atomic_file.write_file(module, path, data, exists, backup=False, new_mode=mode)


class Signing:
    def __init__(self, module: AnsibleModule):
        self.m = module
        self.p = module.params
        self.root = self.p["root"]
        self.who = self.p["host"] or "this host"
        self.files: list[dict] = []
        self.diff = {"before": "", "after": "", "before_header": sb.DKMS_DROP_IN, "after_header": sb.DKMS_DROP_IN}

    def fail(self, msg: str) -> None:
        self.m.fail_json(msg=f"{self.who}: {msg}", files=self.files)

    # --- the site's key and certificate -------------------------------------------------------------------------
    def _paths(self) -> tuple[str, str]:
        key = OWN_KEY if self.p["key_content"] else self.p["key"]
        cert = OWN_CERT if self.p["certificate_content"] else self.p["certificate"]
        for name, value in (("key", key), ("certificate", cert)):
            if not value:
                self.fail(f"driver_secure_boot_signing is on but no {name} is given: set "
                          f"driver_secure_boot_{name} (a path on the host) or driver_secure_boot_{name}_content.")
            if not (value.startswith("pkcs11:") and name == "key") and not sb.shell_safe_path(value):
                self.fail(f"driver_secure_boot_{name} {value!r} is not an absolute path of letters, digits and "
                          "'._+@/-' (DKMS reads it as shell): move the file to such a path.")
        return key, cert

    def _certificate(self, cert_path: str) -> tuple[bytes, dict]:
        if self.p["certificate_content"]:
            source, raw = "driver_secure_boot_certificate_content", self.p["certificate_content"]
        else:
            source, raw = cert_path, _read(_under(self.root, cert_path))
            if raw is None:
                self.fail(f"the certificate {cert_path} (driver_secure_boot_certificate) does not exist or cannot be "
                          "read: put it there or give driver_secure_boot_certificate_content.")
        try:
            der = sb.to_der(raw)
        except sb.CertificateError as exc:
            self.fail(f"{source} is not an X.509 certificate in PEM or DER ({exc}): give the certificate whose key "
                      "signs the modules.")
        return der, sb.identity(der)

    def _key_matches(self, key_path: str, der: bytes) -> None:
        """The key belongs to the certificate (openssl on the host); skipped for pkcs11: keys or without openssl."""
        openssl = self.m.get_bin_path("openssl")
        if not openssl or key_path.startswith("pkcs11:"):
            return
        if self.p["key_content"]:
            rc, key_pub, _err = self.m.run_command([openssl, "pkey", "-pubout"], data=self.p["key_content"],
                                                   binary_data=True)
        else:
            if not os.path.isfile(_under(self.root, key_path)):
                self.fail(f"the key {key_path} (driver_secure_boot_key) does not exist: put it there (mode 0600) or "
                          "give driver_secure_boot_key_content.")
            rc, key_pub, _err = self.m.run_command([openssl, "pkey", "-pubout", "-in", _under(self.root, key_path)])
        if rc != 0:
            self.fail("the signing key is not a private key openssl can read (PEM): give the key of the certificate.")
        with tempfile.NamedTemporaryFile(suffix=".der") as handle:
            handle.write(der)
            handle.flush()
            rc2, cert_pub, _err = self.m.run_command([openssl, "x509", "-inform", "DER", "-in", handle.name,
                                                      "-noout", "-pubkey"])
        if rc2 != 0 or key_pub.strip() != cert_pub.strip():
            self.fail("the signing key does not belong to the certificate (their public keys differ): give the key "
                      "and certificate of one pair; nothing was written.")

    def _put(self, path: str, data: bytes, mode: int, secret: bool = False) -> None:
        target = _under(self.root, path)
        current = _read(target)
        mode_now = os.stat(target).st_mode & 0o777 if current is not None else None
        if current == data and mode_now == mode:
            return
        self.files.append({"path": path, "action": "written"})
        if not secret and path == sb.DKMS_DROP_IN:
            self.diff.update(before=(current or b"").decode("utf-8", "replace"), after=data.decode())
        if not self.m.check_mode:
            try:
                _write(self.m, target, data, current is not None, mode, 0o700 if path.startswith(OWN_DIR) else 0o755)
            except (_atomic_file.ConfigFileError, OSError) as exc:
                self.fail(f"{exc}")

    def _remove(self, path: str, marker: bytes | None = None) -> None:
        target = _under(self.root, path)
        current = _read(target)
        if current is None or (marker is not None and marker not in current):
            return
        self.files.append({"path": path, "action": "removed"})
        if path == sb.DKMS_DROP_IN:
            self.diff["before"] = current.decode("utf-8", "replace")
        if not self.m.check_mode:
            os.unlink(target)

    def configure(self) -> tuple[str, dict]:
        key, cert = self._paths()
        der, ident = self._certificate(cert)
        self._key_matches(key, der)
        if self.p["key_content"]:
            self._put(OWN_KEY, self.p["key_content"].encode(), 0o600, secret=True)
        if self.p["certificate_content"]:
            self._put(OWN_CERT, der, 0o644)
        self._put(sb.DKMS_DROP_IN, sb.dkms_drop_in(key, cert).encode(), 0o644)
        return cert, ident

    def unconfigure(self, everything: bool) -> None:
        self._remove(sb.DKMS_DROP_IN, marker=b"Managed by k8sgpu.nvidia")
        if everything:
            self._remove(OWN_KEY)
            self._remove(OWN_CERT)

    # --- the modules ---------------------------------------------------------------------------------------------
    def read_modules(self, kernels: list[str]) -> dict[str, dict]:
        paths = {k: module_files(Path(self.root), k) for k in kernels}
        every = [p for files in paths.values() for p in files]
        info: dict[str, dict] = {}
        if every:
            modinfo = self.m.get_bin_path("modinfo", required=True)
            rc, out, err = self.m.run_command([modinfo] + [_under(self.root, p) for p in every])
            if rc != 0 and not out:
                self.fail(f"modinfo failed on the NVIDIA module files: {err.strip()[-400:]}")
            info = sb.parse_modinfo(out)
        prefix = os.path.normpath(self.root)
        result = {}
        for release, files in paths.items():
            result[release] = {}
            for path in files:
                full = _under(self.root, path)
                result[release][path] = info.get(full) or info.get(os.path.normpath(full)) or info.get(
                    prefix + path) or {"signer": "", "sig_key": "", "sig_hashalgo": ""}
        return result

    def rebuild(self, releases: list[str]) -> list[str]:
        dkms = self.m.get_bin_path("dkms")
        if not dkms:
            self.fail("dkms is not installed, so the modules cannot be rebuilt to be signed: install the driver first.")
        entries = [d for d in dkms_tree(Path(self.root)) if d["kernel"] in releases and d["state"] == "installed"]
        done = []
        for entry in entries:
            mv = f"{entry['module']}/{entry['version']}"
            for verb in ("build", "install"):
                rc, out, err = self.m.run_command([dkms, verb, "--force", mv, "-k", entry["kernel"]])
                if rc != 0:
                    self.fail(f"dkms {verb} --force {mv} -k {entry['kernel']} failed (rc {rc}) while re-signing: "
                              f"{((out or '') + (err or ''))[-600:].strip()}")
            done.append(entry["kernel"])
        return sorted(set(done))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "signing": {"type": "bool", "default": False},
            "key": {"type": "str", "default": "", "no_log": False},
            "key_content": {"type": "str", "default": "", "no_log": True},
            "certificate": {"type": "str", "default": ""},
            "certificate_content": {"type": "str", "default": ""},
            "rebuild": {"type": "bool", "default": True},
            "efi_root": {"type": "path", "default": "/sys/firmware/efi"},
            "root": {"type": "path", "default": "/"},
            "host": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    s = Signing(module)
    p = module.params
    cert_path, ident = "", None
    if p["state"] == "present" and p["signing"]:
        cert_path, ident = s.configure()
    else:
        s.unconfigure(everything=p["state"] == "absent")
        dkms_cert = sb.dkms_certificate(s.root)
        default = _read(_under(s.root, dkms_cert))
        if default:
            try:
                ident = sb.identity(sb.to_der(default))
                cert_path = dkms_cert
            except sb.CertificateError:
                ident = None
    state = sb.secure_boot(p["efi_root"])
    installed = installed_kernels(Path(s.root))
    releases = list(installed)
    modules = s.read_modules(releases)
    rebuilt, would = [], []
    if ident and p["state"] == "present" and p["signing"]:
        stale = [k for k in releases if sb.signed_by({f: i for f, i in modules[k].items() if "/updates/" in f}, ident)]
        if stale and p["rebuild"]:
            if module.check_mode:
                would = stale
            else:
                rebuilt = s.rebuild(stale)
                modules = s.read_modules(releases)
        if not module.check_mode:
            for release in releases:
                wrong = sb.signed_by({f: i for f, i in modules[release].items() if "/updates/" in f}, ident)
                if wrong:
                    info = modules[release][wrong[0]]
                    s.fail(f"kernel {release}: {wrong[0]} is signed by '{info['signer'] or 'nobody'}' "
                           f"(key {info['sig_key'] or '-'}), not by the certificate {cert_path} ('{ident['signer']}', "
                           f"serial {ident['serial']}). DKMS signs only where the kernel's sign-file is installed "
                           f"(Debian: linux-kbuild-<version>; Ubuntu: kmodsign): install it, then run again"
                           + ("" if p["rebuild"] else " with driver_secure_boot_rebuild on") + ".")
    kernels = {}
    for release in releases:
        trust = sb.module_trust(modules[release], state["trusted"])
        for entry in trust:
            info = modules[release][entry["path"]]
            entry["signed_by_certificate"] = bool(ident) and not sb.signed_by({entry["path"]: info}, ident)
        kernels[release] = {"modules": trust}
    boot = boot_kernel(Path(s.root), installed)
    reboot = sb.boot_decision(s.who, {k: v["modules"] for k, v in kernels.items()}, boot["candidates"], state,
                              cert_path)
    certificate = dict(ident or {}, path=cert_path)
    if ident:
        certificate["enrolled"] = (any(sb.key_id(t["serial"]) == sb.key_id(ident["serial"]) and
                                       t["signer"] == ident["signer"] for t in state["trusted"])
                                   if state["sources"] else None)
    result = {"changed": bool(s.files) or bool(rebuilt) or bool(would), "secure_boot": state,
              "certificate": certificate, "kernels": kernels, "rebuilt": rebuilt, "would_rebuild": would,
              "files": s.files, "reboot": reboot}
    if module._diff and (s.diff["before"] or s.diff["after"]):
        result["diff"] = s.diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
