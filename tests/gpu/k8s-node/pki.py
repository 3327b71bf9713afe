"""Certificates and kubeconfigs for tests/gpu/k8s-node.sh's one-node cluster.

A throwaway cluster's PKI, made with the carried `cryptography` wheel (the GPU
machine may lack openssl): one CA, the API server's serving certificate, client
certificates (admin in system:masters for the controllers and Ansible; the
kubelet as system:node:NAME) and the service-account key pair. Existing files
are kept, so a second run reuses them.

    pki.py DIR NODE_NAME NODE_IP API_PORT
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAYS = 30


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _cert(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
          usages: list | None = None, sans: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now)
         .not_valid_after(now + datetime.timedelta(days=DAYS))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
    else:
        b = b.add_extension(x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True)
        b = b.add_extension(x509.ExtendedKeyUsage(usages or []), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    _write(path, f"""apiVersion: v1
kind: Config
clusters:
- name: k8sgpu-node
  cluster: {{server: "{server}", certificate-authority: "{ca}"}}
users:
- name: {user}
  user: {{client-certificate: "{cert}", client-key: "{key}"}}
contexts:
- name: k8sgpu-node
  context: {{cluster: k8sgpu-node, user: {user}}}
current-context: k8sgpu-node
""".encode(), 0o600)


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    d, node, node_ip, port = Path(argv[1]).resolve(), argv[2], argv[3], argv[4]
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "ca.crt").exists():
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("k8sgpu-node-ca")
        ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
        _write(d / "ca.key", _key_pem(ca_key), 0o600)
        _write(d / "ca.crt", _pem(ca))
    ca_key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), None)
    ca_name = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes()).subject
    server_sans = [x509.DNSName(n) for n in ("localhost", node, "kubernetes", "kubernetes.default",
                                             "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")]
    server_sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", node_ip, "10.96.0.1")]
    leaves = {
        "apiserver": (_name("kube-apiserver"), [ExtendedKeyUsageOID.SERVER_AUTH], server_sans),
        "admin": (_name("kubernetes-admin", "system:masters"), [ExtendedKeyUsageOID.CLIENT_AUTH], None),
        "kubelet": (_name(f"system:node:{node}", "system:nodes"), [ExtendedKeyUsageOID.CLIENT_AUTH], None),
    }
    for leaf, (subject, usages, sans) in leaves.items():
        if (d / f"{leaf}.crt").exists():
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        _write(d / f"{leaf}.key", _key_pem(key), 0o600)
        _write(d / f"{leaf}.crt", _pem(_cert(subject, key, ca_name, ca_key, usages=usages, sans=sans)))
    if not (d / "sa.key").exists():
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write(d / "sa.key", _key_pem(sa), 0o600)
        public = sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        _write(d / "sa.pub", public)
    server = f"https://127.0.0.1:{port}"
    kubeconfig(d / "admin.kubeconfig", server, d / "ca.crt", d / "admin.crt", d / "admin.key", "admin")
    kubeconfig(d / "kubelet.kubeconfig", server, d / "ca.crt", d / "kubelet.crt", d / "kubelet.key", f"system:node:{node}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
