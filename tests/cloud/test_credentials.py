"""Credentials of the cloud modules (issue 19 item 6): never printed, also at -vvv, and the GKE token sent only to
Google API hosts over https or to the api_endpoint the task sets.

The runs are `ansible localhost -m ... -vvv` with the default stdout callback, whose whole output (the task's
invocation included) is searched for marker strings of the secrets. What they prove: the module's own output
hides the credentials, and the token reaches no host an API answer names. What they do not prove: anything about
Google's or AWS's own endpoints (the contract server and moto stand in for them).
"""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import GKE_PROJECT, GKE_REGION, GkeRunner, own_address
from k8sgpu_testlib import gke_contract_server

POOL = {"name": "gpu-t4", "machine_type": "n1-standard-4", "accelerator": {"type": "nvidia-tesla-t4"},
        "autoscaling": {"min_node_count": 0, "max_node_count": 2}}
NO_LOG = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def service_account_key(server, private_key_id: str) -> tuple[dict, str]:
    """A key of a service account the contract server knows (token_uri: the server): (key file's JSON, its PEM)."""
    from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import rsa  # pylint: disable=import-outside-toplevel

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    email = "pools@k8sgpu-test.iam.gserviceaccount.com"
    server.service_accounts[email] = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {"type": "service_account", "project_id": GKE_PROJECT, "private_key_id": private_key_id,
            "client_email": email, "client_id": "1", "token_uri": f"{server.base}/token", "private_key": pem}, pem


def test_key_contents_mapping_never_printed_at_vvv(gke_run, gke_server, gke_cluster):
    """service_account_contents given as a mapping: jsonarg turned it into JSON text whose escaped newlines no
    longer matched the no_log values, so invocation.module_args printed the private key whole."""
    key_id = "key-id-marker-3f9a61"
    info, pem = service_account_key(gke_server, key_id)
    body = [line for line in pem.splitlines() if "PRIVATE KEY" not in line]
    rc, out = gke_run.verbose({"cluster": gke_cluster, **POOL, "service_account_contents": info})
    assert rc == 0 and "CHANGED" in out, out[-3000:]
    assert gke_server.pool(GKE_PROJECT, GKE_REGION, gke_cluster, "gpu-t4") is not None  # the key was used
    assert "module_args" in out  # -vvv prints the invocation
    for secret in (key_id, *body[:3], body[-1]):
        assert secret not in out, f"{secret!r} printed"
    assert f"service_account_contents: {NO_LOG}" in out
    # The key's other fields are not secrets and are no longer masked elsewhere in the output.
    assert f"project: {GKE_PROJECT}" in out and "cloud.google.com/gke-nodepool: gpu-t4" in out


def test_key_contents_as_text_never_printed_at_vvv(gke_run, gke_server, gke_cluster):
    key_id = "key-id-marker-b0c4e2"
    info, pem = service_account_key(gke_server, key_id)
    rc, out = gke_run.verbose({"cluster": gke_cluster, **POOL, "service_account_contents": json.dumps(info)})
    assert rc == 0 and "CHANGED" in out, out[-3000:]
    assert key_id not in out and pem.splitlines()[1] not in out


def test_access_token_never_printed_at_vvv(gke_run, gke_server, gke_cluster):
    token = "ya29.token-marker-7c2d"
    gke_server.tokens.add(token)
    rc, out = gke_run.verbose({"cluster": gke_cluster, **POOL, "access_token": token})
    assert rc == 0 and "CHANGED" in out and "module_args" in out, out[-3000:]
    assert token not in out and f"access_token: {NO_LOG}" in out


class Collector(BaseHTTPRequestHandler):
    """Records every request it gets (method, path, Authorization), answering as an instance group would."""

    seen: list = []

    def do_GET(self):  # noqa: N802  (http.server's name)
        self.seen.append((self.command, self.path, self.headers.get("Authorization")))
        body = json.dumps({"targetSize": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@contextmanager
def collector():
    handler = type("Seen", (Collector,), {"seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler.seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_no_token_to_an_instance_group_url_off_google_and_api_endpoint(gke_run, gke_server, gke_cluster):
    """The pool's instance group URLs come from the API's answer; the Compute read sent the token to whatever host
    they named. Now only to https *.googleapis.com or to api_endpoint's origin."""
    with collector() as (elsewhere, seen):
        gke_server.mig_base = elsewhere
        try:
            r = gke_run({"cluster": gke_cluster, **POOL})
        finally:
            gke_server.mig_base = ""
    assert r.get("failed") and elsewhere in r["msg"], r.get("msg")
    assert "not an https URL of a Google API host" in r["msg"] and "credentials are not sent there" in r["msg"]
    assert seen == [], f"the module sent requests to {elsewhere}: {seen}"


def test_plain_http_endpoint_off_loopback_refused_before_any_request(gke_run, gke_server, gke_cluster):
    mark = len(gke_server.log)
    r = gke_run({"cluster": gke_cluster, **POOL, "api_endpoint": "http://gke-emulator.invalid:8080"})
    assert r.get("failed") and "plain http on gke-emulator.invalid" in r["msg"], r.get("msg")
    assert "allow_http_api_endpoint" in r["msg"]
    r = gke_run({"cluster": gke_cluster, **POOL, "api_endpoint": f"http://user:pw@{gke_server.base[7:]}"})
    assert r.get("failed") and "user information" in r["msg"] and "pw" not in r["msg"]
    assert gke_server.log[mark:] == []


def test_plain_http_endpoint_off_loopback_with_opt_in(tmp_path):
    """With allow_http_api_endpoint the task uses a plain-http endpoint on a non-loopback address of this machine."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no address other than loopback to serve the contract server on")
    with gke_contract_server.running(host=address) as server:
        server.add_cluster(GKE_PROJECT, GKE_REGION, "train")
        run = GkeRunner(server, tmp_path)
        refused = run({"cluster": "train", **POOL})
        assert refused.get("failed") and f"plain http on {address}" in refused["msg"], refused.get("msg")
        assert server.log == []
        r = run({"cluster": "train", **POOL, "allow_http_api_endpoint": True})
    assert not r.get("failed"), r.get("msg")
    assert r["changed"] and server.pool(GKE_PROJECT, GKE_REGION, "train", "gpu-t4") is not None
    assert any(x["path"].startswith("/compute/") for x in server.log)  # the same origin got the Compute read


def test_eks_secret_key_and_session_token_never_printed_at_vvv(run, cluster, network):
    secret, session = "aws-secret-marker-51d0e8", "aws-session-marker-9a7b33"
    rc, out = run.verbose({"cluster_name": cluster, "name": "gpu-t4", "node_role": network["role"],
                           "subnets": network["subnets"], "ami_type": "AL2023_x86_64_NVIDIA",
                           "instance_types": ["g4dn.xlarge"], "scaling": {"min_size": 0, "max_size": 1},
                           "autoscaler_tags": False, "aws_access_key_id": "testing",
                           "aws_secret_access_key": secret, "aws_session_token": session})
    assert rc == 0 and "CHANGED" in out and "module_args" in out, out[-3000:]
    assert secret not in out and session not in out
    assert f"secret_key: {NO_LOG}" in out and f"session_token: {NO_LOG}" in out
