# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: a CA and a serving certificate for an aggregated API server (prometheus-adapter).

Pure functions over PEM text (the `cryptography` package), unit-tested without a cluster:
- issue(): a fresh CA and a serving certificate it signs, for the Service's DNS names; the CA's private key is
  thrown away once the certificate is signed, so the CA can vouch for this one certificate only (the APIService's
  caBundle trusts nothing else). Renewing means a new CA too, and a new caBundle.
- problems(): why an existing pair (a Secret's ca.crt, tls.crt, tls.key) cannot be kept: unreadable, the key not
  the certificate's, not signed by the CA, other DNS names, expiring within the renewal window.
- ca_trust_problem(): why the pair's CA is not to be trusted although valid: not the CA the module made (its
  fingerprint, recorded on the Secret's Namespace, which who may write the Secret may not write), or not pinned.
"""
from __future__ import annotations

import datetime
import hashlib
import json

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    HAS_CRYPTOGRAPHY = True
except ImportError:  # reported by the module, with the fix
    HAS_CRYPTOGRAPHY = False

KEYS = ("ca.crt", "tls.crt", "tls.key")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _name(common_name: str):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def issue(dns_names: list[str], validity_days: int, ca_name: str = "k8sgpu.nvidia serving CA") -> dict:
    """{'ca.crt', 'tls.crt', 'tls.key'} as PEM text: an ECDSA P-256 CA and a serving certificate for dns_names."""
    if not dns_names:
        raise ValueError("a serving certificate needs at least one DNS name")
    now = _now() - datetime.timedelta(minutes=5)  # clock skew between this host and the API server
    until = now + datetime.timedelta(days=int(validity_days))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name)).issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0])).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return {
        "ca.crt": ca_cert.public_bytes(serialization.Encoding.PEM).decode(),
        "tls.crt": cert.public_bytes(serialization.Encoding.PEM).decode(),
        "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode(),
    }


def describe(pem: dict) -> dict:
    """What may be shown of a pair (no key material): DNS names, expiry, the CA's and certificate's SHA-256."""
    if not pem or not pem.get("tls.crt"):
        return {}
    try:
        cert = x509.load_pem_x509_certificate(pem["tls.crt"].encode())
    except ValueError:
        return {}
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    return {
        "dns_names": sorted(names),
        "not_after": cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cert_sha256": hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest(),
        "ca_sha256": hashlib.sha256(pem.get("ca.crt", "").encode()).hexdigest() if pem.get("ca.crt") else "",
    }


def problems(pem: dict, dns_names: list[str], renew_before_days: int) -> list[str]:
    """Why the pair cannot be kept (empty: keep it)."""
    missing = [k for k in KEYS if not (pem or {}).get(k)]
    if missing:
        return [f"no {', '.join(missing)}"]
    try:
        ca = x509.load_pem_x509_certificate(pem["ca.crt"].encode())
        cert = x509.load_pem_x509_certificate(pem["tls.crt"].encode())
        key = serialization.load_pem_private_key(pem["tls.key"].encode(), password=None)
    except (ValueError, TypeError) as exc:
        return [f"unreadable PEM ({exc})"]
    out = []
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, pub) != cert.public_key().public_bytes(
            serialization.Encoding.DER, pub):
        out.append("tls.key is not the key of tls.crt")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        out.append("tls.crt is not signed by ca.crt")
    have = set(describe(pem).get("dns_names", []))
    if have != set(dns_names):
        out.append(f"DNS names {sorted(have)} are not {sorted(set(dns_names))}")
    horizon = _now() + datetime.timedelta(days=int(renew_before_days))
    for what, c in (("tls.crt", cert), ("ca.crt", ca)):
        if c.not_valid_after_utc <= horizon:
            out.append(f"{what} expires {c.not_valid_after_utc:%Y-%m-%d}, within {renew_before_days} days")
        elif c.not_valid_before_utc > _now() + datetime.timedelta(minutes=10):
            out.append(f"{what} is not valid before {c.not_valid_before_utc:%Y-%m-%dT%H:%M}Z")
    return out


# Where the module records the SHA-256 fingerprint of each CA it made: an annotation of the Secret's Namespace, a
# JSON object {secret name: fingerprint}. The Namespace is cluster-scoped: who may write Secrets in the namespace
# (a RoleBinding to admin or edit there) may not write it, so cannot make the module trust a CA of their own.
RECORD_ANNOTATION = "k8sgpu.nvidia/serving-ca-sha256"


def ca_fingerprint(ca_pem: str) -> str:
    """SHA-256 of the CA certificate (DER), lower-case hex; '' when it is not a readable certificate."""
    try:
        cert = x509.load_pem_x509_certificate((ca_pem or "").encode())
    except (ValueError, TypeError):
        return ""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def _normal(fingerprint: str) -> str:
    return str(fingerprint or "").replace(":", "").strip().lower()


def recorded_fingerprints(namespace: dict | None) -> dict:
    """{secret name: fingerprint} from the Namespace's annotation; {} when absent or not a JSON object."""
    value = (((namespace or {}).get("metadata") or {}).get("annotations") or {}).get(RECORD_ANNOTATION)
    try:
        found = json.loads(value) if value else {}
    except ValueError:
        return {}
    return {str(k): _normal(v) for k, v in found.items()} if isinstance(found, dict) else {}


def record_patch(namespace: dict | None, secret_name: str, fingerprint: str) -> dict:
    """The merge patch of the Namespace that records fingerprint for secret_name, keeping the other Secrets'."""
    records = recorded_fingerprints(namespace)
    records[secret_name] = _normal(fingerprint)
    return {"metadata": {"annotations": {RECORD_ANNOTATION: json.dumps(records, sort_keys=True)}}}


def ca_trust_problem(pem: dict, recorded: str | None, pins: list | None = None, trust_existing: bool = False) -> str:
    """Why the CA in pem is not to be trusted ('' when it is): with trust_existing any CA is; with pins its
    fingerprint must be one of them; otherwise it must be the one recorded when the module made it."""
    if trust_existing:
        return ""
    fingerprint = ca_fingerprint(pem.get("ca.crt", ""))
    if pins:
        if fingerprint in {_normal(p) for p in pins}:
            return ""
        return f"ca.crt (SHA-256 {fingerprint or 'unreadable'}) is not one of the pinned CAs (trusted_ca_sha256)"
    if recorded and fingerprint and _normal(recorded) == fingerprint:
        return ""
    return (f"ca.crt (SHA-256 {fingerprint or 'unreadable'}) is not a CA this module made (the fingerprint recorded "
            f"on the Namespace's annotation {RECORD_ANNOTATION} is {recorded or 'absent'})")
