"""amazon.aws's common options through `module_defaults: group/k8sgpu.nvidia.aws` (issue 38 item 4).

The group extends amazon.aws's, so a play sets amazon.aws's connection options once for amazon.aws's modules and
the collection's. Before, the EKS modules refused aws_ca_bundle, aws_config and debug_botocore_endpoint_logs
("Unsupported parameters"), so such a play failed every EKS task. Here moto serves over TLS on 127.0.0.1 with a
certificate from a CA made for the test; a playbook sets the options through the group and runs eks_cluster,
eks_nodegroup and amazon.aws.aws_caller_info. What is proven: the options are accepted and honoured -
aws_ca_bundle is the CA bundle TLS is verified against (the same play without it fails certificate verification),
aws_config reaches botocore's Config (its user_agent_appid is in every request's User-Agent, and its retries
setting makes the failing run end after one attempt), debug_botocore_endpoint_logs returns the operations called
(resource_actions). What is not: anything about AWS's own endpoints (moto stands in for them).
"""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import CREDS, REGION, ROOT, free_port

APPID = "k8sgpu-test-appid"


def tls_files(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for localhost and 127.0.0.1 that it signed: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8sgpu test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.fixture(scope="module")
def tls_moto(tmp_path_factory):
    """moto over https on 127.0.0.1 (the same in-process backends as the http server of conftest): (its URL, the CA
    bundle's path, the requests it received as (path, User-Agent))."""
    from moto.moto_server.werkzeug_app import (  # pylint: disable=import-outside-toplevel
        DomainDispatcherApplication,
        create_backend_app,
    )
    from werkzeug.serving import make_server  # pylint: disable=import-outside-toplevel

    ca, cert, key = tls_files(tmp_path_factory.mktemp("tls"))
    app = DomainDispatcherApplication(create_backend_app)
    seen: list[tuple[str, str]] = []

    def recording(environ, start_response):
        seen.append((environ.get("PATH_INFO", ""), environ.get("HTTP_USER_AGENT", "")))
        return app(environ, start_response)

    port = free_port()
    server = make_server("127.0.0.1", port, recording, threaded=True, ssl_context=(str(cert), str(key)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://localhost:{port}", ca, seen
    finally:
        server.shutdown()


def play(tmp: Path, defaults: dict, tasks: list) -> tuple[int, list[dict], str]:
    """Runs a one-play playbook on localhost with module_defaults for group/k8sgpu.nvidia.aws: (exit status, each
    task's result, the whole output)."""
    book = tmp / f"play-{uuid.uuid4().hex[:6]}.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                                     "module_defaults": {"group/k8sgpu.nvidia.aws": defaults},
                                     "tasks": tasks}], sort_keys=False))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(book),
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    results = [t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]]
    return proc.returncode, results, proc.stdout + proc.stderr


def defaults(url: str) -> dict:
    return {"endpoint_url": url, "region": REGION, **CREDS, "validate_certs": True,
            "aws_config": {"user_agent_appid": APPID, "connect_timeout": 10,
                           "retries": {"mode": "standard", "max_attempts": 1}},
            "debug_botocore_endpoint_logs": True}


def test_group_defaults_with_amazon_aws_common_options(tls_moto, network, aws, tmp_path):
    url, ca, seen = tls_moto
    name = f"train-{uuid.uuid4().hex[:8]}"
    rc, results, out = play(tmp_path, {**defaults(url), "aws_ca_bundle": str(ca)}, [
        {"name": "cluster", "k8sgpu.nvidia.eks_cluster": {"name": name, "role_arn": network["role"],
                                                          "subnets": network["subnets"]}},
        {"name": "no nodegroup",
         "k8sgpu.nvidia.eks_nodegroup": {"cluster_name": name, "name": "gpu-t4", "state": "absent"}},
        {"name": "amazon.aws's module with the same defaults", "amazon.aws.aws_caller_info": {}},
    ])
    assert rc == 0, out[-4000:]
    cluster, nodegroup, caller = results
    assert cluster["changed"] and cluster["cluster"]["name"] == name
    assert aws["eks"].describe_cluster(name=name)["cluster"]["status"] == "ACTIVE"
    assert {"eks:CreateCluster", "eks:DescribeCluster"} <= set(cluster["resource_actions"]), cluster
    assert not nodegroup["changed"] and nodegroup["resource_actions"] == ["eks:DescribeNodegroup"], nodegroup
    assert caller["account"]
    eks = [ua for path, ua in seen if path.startswith("/clusters")]
    assert eks and all(f"app/{APPID}" in ua and "k8sgpu.nvidia" in ua for ua in eks), eks


def test_without_the_ca_bundle_tls_verification_fails(tls_moto, tmp_path):
    """The same play without aws_ca_bundle: the test CA is unknown to botocore, so aws_ca_bundle above was what
    verified the endpoint."""
    url, _ca, seen = tls_moto
    mark = len(seen)
    rc, results, out = play(tmp_path, defaults(url), [
        {"name": "cluster", "k8sgpu.nvidia.eks_cluster": {"name": "train-untrusted", "state": "absent"}},
    ])
    assert rc != 0 and results[0].get("failed"), out[-4000:]
    assert "certificate verify failed" in results[0]["msg"].lower() or "SSL" in results[0]["msg"], results[0]["msg"]
    assert results[0]["resource_actions"] == ["eks:DescribeCluster"]
    assert len(seen) == mark  # no request got through the TLS handshake
