"""k8sgpu.nvidia.openpgp_key_fetch (issue 34): the repository key fetched through a proxy given as a no_log option, not
the process environment, and no redirect to another scheme.

Real HTTP on this machine's loopback: a "proxy" that records each request's line and Proxy-Authorization and answers
for the origin (as a caching proxy would), and an origin that redirects. The code before issue 34 fetched with
ansible.builtin.uri and the proxy (credentials included) in the task's environment, followed an https->http
redirect, and had no such module: these tests fail there.
"""
from __future__ import annotations

import base64
import http.server
import json
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.modules import openpgp_key_fetch
from module_harness import AnsibleExitJson, AnsibleFailJson

KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxx\n-----END PGP PUBLIC KEY BLOCK-----\n"
PASSWORD = "S3cret:Pw"


class Handler(http.server.BaseHTTPRequestHandler):
    seen: list = []
    authorization: list = []
    routes: dict = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append({"line": self.requestline, "auth": self.headers.get("Proxy-Authorization")})
        self.authorization.append((self.headers.get("Host"), self.headers.get("Authorization")))
        path = self.path.split("://", 1)[-1].split("/", 1)[-1]
        status, body, location = self.routes.get("/" + path, (404, "no", None))
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Handler.seen, Handler.authorization, Handler.routes = [], [], {}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", Handler
    httpd.shutdown()


def run(**args) -> tuple[bool, dict]:
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as result:
            openpgp_key_fetch.main()
    return isinstance(result.value, AnsibleFailJson), result.value.args[0]


def test_a_credentialed_proxy_gets_them_in_proxy_authorization_and_nothing_shows_them(module_io, server, monkeypatch):
    base, handler = server
    handler.routes["/gpgkey"] = (200, KEY, None)
    monkeypatch.delenv("http_proxy", raising=False)
    proxy = f"http://alice:{PASSWORD.replace(':', '%3A')}@{base.split('://')[1]}"
    failed, result = run(url="http://mirror.site.invalid/gpgkey", proxy=proxy)
    assert not failed and result["content"] == KEY and result["status"] == 200
    # The proxy got the absolute URL and the credentials; the origin's host name never had to resolve here.
    assert handler.seen == [{"line": "GET http://mirror.site.invalid/gpgkey HTTP/1.1",
                             "auth": "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()}]
    shown = json.dumps(result)
    assert "S3cret" not in shown and "alice:" not in shown


def test_direct_reads_without_the_environments_proxy(module_io, server, monkeypatch):
    base, handler = server
    handler.routes["/gpgkey"] = (200, KEY, None)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    failed, result = run(url=f"{base}/gpgkey", proxy="DIRECT")
    assert not failed and result["content"] == KEY, result


def test_a_redirect_within_the_scheme_is_followed(module_io, server):
    base, handler = server
    handler.routes["/old"] = (301, "", f"{base}/gpgkey")
    handler.routes["/gpgkey"] = (200, KEY, None)
    failed, result = run(url=f"{base}/old", proxy="DIRECT")
    assert not failed and result["content"] == KEY and result["url"] == f"{base}/gpgkey"


def test_a_redirect_to_another_scheme_is_refused_before_it_is_read(module_io, server):
    base, handler = server
    handler.routes["/gpgkey"] = (302, "", "https://127.0.0.1:9/gpgkey")
    failed, result = run(url=f"{base}/gpgkey", proxy="DIRECT")
    assert failed and f"{base}/gpgkey redirects (302) to https://127.0.0.1:9/gpgkey, another scheme; refused" in result["msg"]
    assert len(handler.seen) == 1  # the second URL was not read


def test_errors_name_the_url_and_hide_the_password(module_io, server):
    base, handler = server
    failed, result = run(url="http://mirror.site.invalid/missing", proxy=f"http://alice:{PASSWORD}@{base.split('://')[1]}")
    assert failed and "http://mirror.site.invalid/missing: HTTP 404" in result["msg"]
    assert "http://***@127.0.0.1" in result["msg"] and "S3cret" not in json.dumps(result)
    failed, result = run(url="ftp://mirror/gpgkey")
    assert failed and "is not an http:// or https:// URL" in result["msg"]
    failed, result = run(url="http://mirror/gpgkey", proxy="socks5h://u:pw@proxy:1080")
    assert failed and "only http:// and https:// proxies" in result["msg"] and "pw@" not in result["msg"]


# A repository's login (https://user:password@host/...), issue 46 item 3: sent as Authorization to its host only.
def test_a_login_is_sent_in_authorization_and_dropped_on_a_redirect_to_another_host(server):
    base, handler = server
    port = base.rsplit(":", 1)[1]
    # 127.0.0.1 and localhost are two hosts to the client, one server here
    handler.routes["/old"] = (302, "", f"http://localhost:{port}/gpgkey")
    handler.routes["/same"] = (302, "", f"{base}/gpgkey")
    handler.routes["/gpgkey"] = (200, KEY, None)
    basic = "Basic " + base64.b64encode(f"ci:{PASSWORD}".encode()).decode()
    assert openpgp_key_fetch.fetch(f"{base}/same", "DIRECT", 5, 4096, ("ci", PASSWORD))[0] == KEY
    assert handler.authorization == [(f"127.0.0.1:{port}", basic)] * 2
    handler.authorization.clear()
    assert openpgp_key_fetch.fetch(f"{base}/old", "DIRECT", 5, 4096, ("ci", PASSWORD))[0] == KEY
    assert handler.authorization == [(f"127.0.0.1:{port}", basic), (f"localhost:{port}", None)]


def test_a_login_over_http_is_refused_before_any_request(module_io, server):
    base, handler = server
    failed, result = run(url=base.replace("://", f"://ci:{PASSWORD.replace(':', '%3A')}@") + "/gpgkey",
                         proxy="DIRECT")
    assert failed and "only over https://" in result["msg"] and handler.seen == []
    assert "S3cret" not in json.dumps(result)


def test_a_login_over_https_reaches_fetch_without_the_url_holding_it(module_io, monkeypatch):
    calls = []

    def fetch(url, proxy, timeout, max_bytes, login=None):
        calls.append((url, login))
        raise OSError("refused for %s" % url)
    monkeypatch.setattr(openpgp_key_fetch, "fetch", fetch)
    failed, result = run(url="https://ci:S3cret%3APw@mirror.site.invalid/gpgkey", proxy="DIRECT")
    assert calls == [("https://mirror.site.invalid/gpgkey", ("ci", PASSWORD))]
    assert failed and "https://mirror.site.invalid/gpgkey" in result["msg"] and "S3cret" not in json.dumps(result)
