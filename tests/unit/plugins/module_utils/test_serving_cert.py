"""The prometheus-adapter serving certificate: issued for the Service's names, kept while valid, replaced when not.

Checked with the cryptography package and with Python's own TLS client verifying a real handshake against the CA."""
from __future__ import annotations

import datetime
import socket
import ssl
import threading

import pytest
from cryptography import x509

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._serving_cert import describe, issue, problems

NAMES = ["prometheus-adapter.gpu-monitoring.svc", "prometheus-adapter.gpu-monitoring", "prometheus-adapter"]


@pytest.fixture(scope="module")
def pem() -> dict:
    return issue(NAMES, 730)


def test_issued_pair_is_kept(pem):
    assert problems(pem, NAMES, 30) == []
    info = describe(pem)
    assert info["dns_names"] == sorted(NAMES)
    not_after = datetime.datetime.strptime(info["not_after"], "%Y-%m-%dT%H:%M:%SZ")
    assert 728 < (not_after - datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)).days <= 730
    assert "PRIVATE" not in str(info)


def test_ca_is_a_ca_and_the_cert_is_for_servers_only(pem):
    ca = x509.load_pem_x509_certificate(pem["ca.crt"].encode())
    cert = x509.load_pem_x509_certificate(pem["tls.crt"].encode())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert [u.dotted_string for u in eku] == ["1.3.6.1.5.5.7.3.1"]  # serverAuth
    cert.verify_directly_issued_by(ca)


def test_a_tls_client_trusting_the_ca_accepts_the_service_name_and_refuses_others(pem, tmp_path):
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / key).write_text(pem[key])
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        for _attempt in range(2):
            conn, _addr = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with client_ctx.wrap_socket(raw, server_hostname=NAMES[0]) as tls:
            assert tls.version()
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
            client_ctx.wrap_socket(raw, server_hostname="other.gpu-monitoring.svc")
    thread.join(5)
    listener.close()


def test_each_defect_is_named(pem):
    other = issue(NAMES, 730)
    assert problems({}, NAMES, 30) == ["no ca.crt, tls.crt, tls.key"]
    assert problems({**pem, "tls.key": other["tls.key"]}, NAMES, 30) == ["tls.key is not the key of tls.crt"]
    assert problems({**pem, "ca.crt": other["ca.crt"]}, NAMES, 30) == ["tls.crt is not signed by ca.crt"]
    assert problems(pem, NAMES[:1], 30) == [f"DNS names {sorted(NAMES)} are not {NAMES[:1]}"]
    assert problems({**pem, "tls.crt": "garbage"}, NAMES, 30)[0].startswith("unreadable PEM")


def test_renewal_window(pem):
    short = issue(NAMES, 10)
    assert problems(short, NAMES, 9) == []
    assert problems(short, NAMES, 30)[0].startswith("tls.crt expires ")
    assert problems(pem, NAMES, 800)[0].startswith("tls.crt expires ")


def test_every_issue_is_new(pem):
    again = issue(NAMES, 730)
    assert again["ca.crt"] != pem["ca.crt"] and again["tls.key"] != pem["tls.key"]
    with pytest.raises(ValueError, match="at least one DNS name"):
        issue([], 730)
