"""_gcp_common: where the GKE module's credentials may go, and service_account_contents hidden in the output.

The end-to-end proofs (a real `ansible -vvv` run, the token kept from a host an API answer names) are in
tests/cloud/test_credentials.py; these check the rules one case at a time.
"""
from __future__ import annotations

import json

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gcp_common import (
    GCP_ARG_SPEC,
    EndpointError,
    check_api_endpoint,
    hide_key_contents,
    is_google_api_url,
    is_loopback,
    token_may_go,
)

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC-marker\nZZZZ\n-----END PRIVATE KEY-----\n"
KEY = {"type": "service_account", "project_id": "p1", "private_key_id": "kid-marker-77", "client_id": "1",
       "client_email": "svc@p1.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token",
       "private_key": PEM}


@pytest.mark.parametrize("url", [
    "https://container.googleapis.com", "container.googleapis.com", "https://www.googleapis.com/compute/v1/x",
    "https://compute.googleapis.com/compute/v1/projects/p/zones/z/instanceGroupManagers/g",
    "https://container.us-central1.rep.googleapis.com", "https://container.mtls.googleapis.com:443/",
    "https://googleapis.com", "https://WWW.GOOGLEAPIS.COM./compute",
])
def test_google_api_urls(url):
    assert is_google_api_url(url)


@pytest.mark.parametrize("url", [
    "http://www.googleapis.com/compute/v1/x",  # plain http
    "https://googleapis.com.evil.example/x", "https://evilgoogleapis.com/x", "https://evil.example/.googleapis.com",
    "https://user:pw@www.googleapis.com/x", "https://www.googleapis.com:notaport/x", "ftp://www.googleapis.com/x",
    "https://container.evil.example",
])
def test_not_google_api_urls(url):
    assert not is_google_api_url(url)


@pytest.mark.parametrize("host, loopback", [("localhost", True), ("127.0.0.1", True), ("127.8.9.10", True),
                                            ("::1", True), ("10.0.0.1", False), ("gke.internal", False),
                                            ("", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("url, allow_http", [
    ("https://container.googleapis.com", False), ("container.googleapis.com", False),
    ("https://gke-psc.internal.example:8443", False), ("http://127.0.0.1:8080", False),
    ("http://localhost:8080", False), ("http://[::1]:8080", False), ("http://10.1.2.3:8080", True),
])
def test_accepted_api_endpoints(url, allow_http):
    check_api_endpoint(url, allow_http)


@pytest.mark.parametrize("url, fragment", [
    ("http://10.1.2.3:8080", "plain http on 10.1.2.3"),
    ("http://gke.corp.example", "allow_http_api_endpoint: true"),
    ("https://u:secret@container.googleapis.com", "user information"),
    ("ftp://container.googleapis.com", "not an https:// URL"),
    ("https://", "not an https:// URL"),
    ("https://host:99999", "not an https:// URL"),
])
def test_refused_api_endpoints(url, fragment):
    with pytest.raises(EndpointError, match=fragment.replace(".", r"\.")) as raised:
        check_api_endpoint(url)
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize("url, endpoint, may", [
    ("https://www.googleapis.com/compute/v1/g", None, True),
    ("https://www.googleapis.com/compute/v1/g", "http://127.0.0.1:5", True),
    ("http://127.0.0.1:5/compute/v1/g", "http://127.0.0.1:5", True),
    ("http://127.0.0.1:6/compute/v1/g", "http://127.0.0.1:5", False),  # another port
    ("https://127.0.0.1:5/compute/v1/g", "http://127.0.0.1:5", False),  # another scheme
    ("http://127.0.0.1:5/compute/v1/g", None, False),
    ("https://gke.corp.example/compute", "gke.corp.example", True),  # a bare host is https, port 443
    ("https://gke.corp.example:443/compute", "https://gke.corp.example", True),
    ("https://collector.example/compute/v1/g", "https://gke.corp.example", False),
    ("https://u:p@gke.corp.example/compute", "https://gke.corp.example", False),
])
def test_token_may_go(url, endpoint, may):
    assert token_may_go(url, endpoint) is may


def module_for(args: dict) -> AnsibleModule:
    with patch_module_args(args):
        return AnsibleModule(argument_spec={"project": {"type": "str"}, **GCP_ARG_SPEC})


@pytest.mark.parametrize("contents", [KEY, json.dumps(KEY)], ids=["mapping", "text"])
def test_key_contents_hidden_in_invocation(contents):
    module = module_for({"project": "p1", "service_account_contents": contents,
                         "access_token": "tok-marker-1"})
    hide_key_contents(module)
    shown = json.dumps(remove_values({"invocation": {"module_args": module.params}, "msg": f"failed with {PEM!r} "
                                      f"{json.dumps(PEM)} kid-marker-77"}, module.no_log_values))
    for secret in ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC-marker", "kid-marker-77", "tok-marker-1"):
        assert secret not in shown
    args = json.loads(shown)["invocation"]["module_args"]
    assert args["service_account_contents"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    # The key's other fields are no secrets: the project option (p1, also the key's project_id) stays readable.
    assert args["project"] == "p1"


def test_key_contents_mapping_printed_without_the_fix():
    """The defect itself: without hide_key_contents, AnsibleModule prints the private key of a mapping."""
    module = module_for({"project": "p1", "service_account_contents": KEY})
    shown = json.dumps(remove_values({"module_args": module.params}, module.no_log_values))
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC-marker" in shown
    hide_key_contents(module)
    shown = json.dumps(remove_values({"module_args": module.params}, module.no_log_values))
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC-marker" not in shown


def test_key_leaf_equal_to_another_secret_stays_hidden():
    module = module_for({"service_account_contents": {**KEY, "client_id": "same-as-token"},
                         "access_token": "same-as-token"})
    hide_key_contents(module)
    assert "same-as-token" in module.no_log_values


def test_no_contents_nothing_changes():
    module = module_for({"access_token": "tok"})
    before = set(module.no_log_values)
    hide_key_contents(module)
    assert module.no_log_values == before
