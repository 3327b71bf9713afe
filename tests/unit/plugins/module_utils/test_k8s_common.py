"""_k8s_apply_common's request_timeout (issue 36: a kube-apiserver that stops answering held a run for ever).

An API server that accepts connections and never answers is a listening socket nobody reads (the kernel completes
the TCP handshake into its backlog, as for a kube-apiserver stopped with SIGSTOP)."""
from __future__ import annotations

import socket
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _k8s_common
from ansible_collections.k8sgpu.nvidia.plugins.modules import k8s_cluster_nodes
from module_harness import AnsibleExitJson, AnsibleFailJson

kubernetes_client = pytest.importorskip("kubernetes.client")
rest = pytest.importorskip("kubernetes.client.rest")


@pytest.fixture
def silent():
    """The URL of a server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.fixture(autouse=True)
def unbound():
    """The client's REST class as it was, after each test."""
    before = rest.RESTClientObject.request
    yield
    rest.RESTClientObject.request = getattr(before, "_k8sgpu_unbound", before)


def api_client(url: str):
    configuration = kubernetes_client.Configuration()
    configuration.host = url
    return kubernetes_client.ApiClient(configuration)


def timed(call) -> tuple[float, Exception]:
    start = time.monotonic()
    with pytest.raises(Exception) as raised:  # urllib3's ReadTimeoutError, or MaxRetryError around it
        call()
    return time.monotonic() - start, raised.value


def test_a_request_gives_up_after_the_timeout(silent):
    _k8s_common.bound_requests(0.3)
    client = api_client(silent)
    took, exc = timed(lambda: client.rest_client.request("PATCH", silent + "/api/v1/nodes/n", body={},
                                                         headers={"Content-Type": "application/merge-patch+json"}))
    assert "Read timed out" in str(exc) and 0.25 < took < 2, (took, exc)
    # A GET is retried by urllib3 (3 times): at most 4 x the timeout.
    took, exc = timed(lambda: client.rest_client.request("GET", silent + "/api"))
    assert "Read timed out" in str(exc) and 0.9 < took < 3, (took, exc)


def test_the_callers_own_timeout_wins_and_a_second_bound_does_not_stack(silent):
    _k8s_common.bound_requests(5)
    _k8s_common.bound_requests(0.2)  # the module's last word: 0.2, not 5 around 0.2
    client = api_client(silent)
    took, _exc = timed(lambda: client.rest_client.request("PATCH", silent + "/x", body={}, _request_timeout=(1, 0.6)))
    assert 0.55 < took < 2, took
    took, _exc = timed(lambda: client.rest_client.request("PATCH", silent + "/x", body={}))
    assert took < 0.55, took


def test_zero_leaves_the_client_unbounded():
    original = rest.RESTClientObject.request
    _k8s_common.bound_requests(0)
    assert rest.RESTClientObject.request is original


def test_a_module_fails_naming_the_timeout_instead_of_hanging(silent, module_io):
    """The whole module (kubernetes.core's get_api_client, its discovery included) against the silent server."""
    pytest.importorskip("ansible_collections.kubernetes.core")
    start = time.monotonic()
    with patch_module_args({"host": silent, "api_key": "token", "request_timeout": 0.3}):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as raised:
            k8s_cluster_nodes.main()
    took = time.monotonic() - start
    assert isinstance(raised.value, AnsibleFailJson), raised.value.args
    msg = raised.value.args[0]["msg"]
    assert "Read timed out" in msg and msg.endswith("(request_timeout 0.3 s)"), msg
    assert took < 10, took
