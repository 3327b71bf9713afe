"""Where the AWS modules send signed requests (issue 34 item 4): a plain-http endpoint only on loopback, unless
allow_http_endpoint_url.

Each request of eks_cluster, eks_nodegroup and eks_pod_identity carries a SigV4 Authorization header (replayable
for minutes) and the session token (X-Amz-Security-Token). Before this check, a capture server on a non-loopback
address given as a plain-http endpoint_url received both. Here a capture server listens on this machine's own
non-loopback address (its interface on the default route; nothing leaves the machine) and records every request;
the modules run as a user runs them (`ansible localhost -m`). What is proven: with such an endpoint - from the
option or from AWS_ENDPOINT_URL - each module fails naming the endpoint and the option, and the capture server
receives nothing; with allow_http_endpoint_url it does receive the signed requests (so the capture is real); a
loopback endpoint (moto on 127.0.0.1, as `localhost`) still works. What is not: anything about a real network path.
"""
from __future__ import annotations

import json
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import CREDS, REGION, run_module, own_address

TOKEN = "aws-session-marker-34d4c1"
MODULES = {
    "k8sgpu.nvidia.eks_cluster": {"name": "train", "state": "absent"},
    "k8sgpu.nvidia.eks_nodegroup": {"cluster_name": "train", "name": "gpu-t4", "state": "absent"},
    "k8sgpu.nvidia.eks_pod_identity": {"cluster_name": "train", "namespace": "kube-system",
                                       "service_account": "cluster-autoscaler", "state": "absent"},
}


class Capture(BaseHTTPRequestHandler):
    """Records every request (method, path, Authorization, X-Amz-Security-Token); answers as EKS does for a
    resource that does not exist (404 ResourceNotFoundException), so an opted-in module ends cleanly."""

    seen: list = []

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append({"method": self.command, "path": self.path,
                          "authorization": self.headers.get("Authorization"),
                          "token": self.headers.get("X-Amz-Security-Token")})
        body = json.dumps({"message": "not found"}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-ErrorType", "ResourceNotFoundException")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = answer  # noqa: N815  (http.server's names)

    def log_message(self, *_args):
        pass


@contextmanager
def capture_server(host: str):
    handler = type("Seen", (Capture,), {"seen": []})
    httpd = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{httpd.server_address[1]}", handler.seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def off_loopback():
    """A capture server on this machine's non-loopback address: (its URL, the requests it received)."""
    address = own_address()
    if address is None:
        pytest.fail("this machine has no address other than loopback for the capture server")
    with capture_server(address) as served:
        yield served


def module_run(run, module: str, args: dict, *, env: dict | None = None) -> dict:
    connection = {"region": REGION, **CREDS, "aws_session_token": TOKEN}
    return run_module(module, {**connection, **args}, env or run.env, check=False, diff=False, python=sys.executable)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_plain_http_endpoint_off_loopback_refused_before_any_request(run, off_loopback, module):
    url, seen = off_loopback
    r = module_run(run, module, {**MODULES[module], "endpoint_url": url})
    assert seen == [], f"{module} sent requests to {url}: {seen}"
    assert r.get("failed"), r
    assert f"endpoint_url {url} is plain http on {url[7:].rsplit(':', 1)[0]}, not a loopback address" in r["msg"]
    assert "allow_http_endpoint_url: true" in r["msg"]
    assert TOKEN not in r["_stdout"]


def test_plain_http_endpoint_from_environment_refused(run, off_loopback):
    """The endpoint boto3 takes from AWS_ENDPOINT_URL (no endpoint_url option) is checked too."""
    url, seen = off_loopback
    r = module_run(run, "k8sgpu.nvidia.eks_cluster", MODULES["k8sgpu.nvidia.eks_cluster"],
                   env={**run.env, "AWS_ENDPOINT_URL": url})
    assert seen == [], f"eks_cluster sent requests to {url}: {seen}"
    assert r.get("failed") and f"{url} is plain http" in r["msg"] and "AWS_ENDPOINT_URL" in r["msg"], r.get("msg")


def test_endpoint_with_user_information_refused(run, endpoint):
    r = module_run(run, "k8sgpu.nvidia.eks_cluster",
                   {**MODULES["k8sgpu.nvidia.eks_cluster"], "endpoint_url": f"http://user:pw-marker@{endpoint[7:]}"})
    assert r.get("failed") and "user information" in r["msg"] and "pw-marker" not in r["msg"], r.get("msg")


def test_opt_in_sends_the_signed_requests(run, off_loopback):
    """With allow_http_endpoint_url the module sends to that endpoint: the capture server receives the signature
    and the session token, as every module did before the check without being asked."""
    url, seen = off_loopback
    r = module_run(run, "k8sgpu.nvidia.eks_cluster",
                   {**MODULES["k8sgpu.nvidia.eks_cluster"], "endpoint_url": url, "allow_http_endpoint_url": True})
    assert not r.get("failed") and not r["changed"], r.get("msg")
    assert seen and seen[0]["path"] == "/clusters/train", seen
    assert seen[0]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert seen[0]["token"] == TOKEN


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_http_endpoint_still_works(run, endpoint, network, host):
    """moto on 127.0.0.1, named by address or as localhost: no option needed."""
    url = endpoint.replace("127.0.0.1", host)
    name = f"loopback-{host.replace('.', '-')}"
    r = module_run(run, "k8sgpu.nvidia.eks_cluster", {"name": name, "role_arn": network["role"],
                                                      "subnets": network["subnets"], "endpoint_url": url})
    assert not r.get("failed") and r["changed"] and r["cluster"]["name"] == name, r.get("msg")
