"""_aws_common: where the AWS modules' signed requests may go (issue 34 item 4), and amazon.aws's common options taken
and honoured (issue 38 item 4), one case at a time and without a request.

The end-to-end proofs - a capture server off loopback that receives nothing, and a playbook setting the options
through group/k8sgpu.nvidia.aws against moto over TLS - are in tests/cloud/test_aws_endpoints.py and
tests/cloud/test_aws_common_options.py.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.doc_fragments.aws import ModuleDocFragment
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _aws_common
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._aws_common import (
    AWS,
    EndpointError,
    PlainHttpRefused,
    aws_module,
    check_endpoint,
    is_loopback,
)
from module_harness import AnsibleExitJson, AnsibleFailJson

BASE = {"region": "eu-west-1", "access_key": "testing", "secret_key": "secret-marker-4411"}


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
              "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EKS",
              "AWS_CA_BUNDLE", "ANSIBLE_DEBUG_BOTOCORE_LOGS", "AWS_ACCESS_KEY", "AWS_SECRET_KEY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


def module(args: dict):
    with patch_module_args({**BASE, **args}):
        return aws_module({}, supports_check_mode=True)


# ---- check_endpoint ----
@pytest.mark.parametrize("url", [
    "https://eks.eu-west-1.amazonaws.com", "https://vpce-1.eks.eu-west-1.vpce.amazonaws.com:8443/",
    "https://10.0.0.5", "http://127.0.0.1:5000", "http://127.9.9.9", "http://localhost:4566", "http://LOCALHOST.:1",
    "http://[::1]:5000/",
])
def test_endpoints_taken(url):
    check_endpoint(url)


@pytest.mark.parametrize("url, why", [
    ("http://10.0.0.5:5000", "plain http on 10.0.0.5, not a loopback address"),
    ("http://192.0.2.2", "plain http on 192.0.2.2"),
    ("http://localhost.attacker.example", "plain http on localhost.attacker.example"),
    ("http://127.0.0.1.nip.io", "plain http on 127.0.0.1.nip.io"),
    ("http://[::ffff:10.0.0.1]", "plain http on ::ffff:10.0.0.1"),
    ("http://0.0.0.0:5000", "plain http on 0.0.0.0"),
    ("https://user:pw@eks.eu-west-1.amazonaws.com", "user information"),
    ("ftp://127.0.0.1", "is not an https://"),
    ("eks.eu-west-1.amazonaws.com", "is not an https://"),
    ("http://127.0.0.1:99999", "malformed port"),
    ("ftp://user:pw@127.0.0.1:99999", "user information"),
])
def test_endpoints_refused(url, why):
    with pytest.raises(EndpointError) as e:
        check_endpoint(url)
    assert why in str(e.value)
    if "user information" not in why:
        assert url in str(e.value)
    else:
        assert "pw" not in str(e.value)


def test_plain_http_off_loopback_with_opt_in():
    check_endpoint("http://10.0.0.5:5000", allow_http=True)
    with pytest.raises(EndpointError, match="user information"):
        check_endpoint("http://u:p@10.0.0.5:5000", allow_http=True)


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.1") and not is_loopback(None) and not is_loopback("localhost.localdomain")


def test_before_send_guard_stops_a_request_the_check_refuses():
    """The guard on every client: a request about to be sent (already signed) to a refused URL raises, so it is
    not sent, whatever made the URL."""
    guard = _aws_common._guard(False)
    guard(request=SimpleNamespace(url="http://127.0.0.1:5000/clusters/train"))
    guard(request=SimpleNamespace(url="https://eks.eu-west-1.amazonaws.com/clusters/train?x=1"))
    with pytest.raises(PlainHttpRefused, match=r"http://10\.1\.2\.3/clusters/train is plain http.*\(not sent\)"):
        guard(request=SimpleNamespace(url="http://10.1.2.3/clusters/train?maxResults=1"))
    _aws_common._guard(True)(request=SimpleNamespace(url="http://10.1.2.3/clusters/train"))


# ---- the session and clients ----
def test_endpoint_url_option_refused_before_any_client(module_io):
    m = module({"endpoint_url": "http://10.0.0.5:5000"})
    with pytest.raises(AnsibleFailJson) as e:
        AWS(m, services=("eks",))
    msg = e.value.args[0]["msg"]
    assert "endpoint_url http://10.0.0.5:5000 is plain http on 10.0.0.5" in msg and "allow_http_endpoint_url" in msg


def test_endpoint_from_aws_url_refused(module_io, monkeypatch):
    """amazon.aws's endpoint_url falls back to AWS_URL."""
    monkeypatch.setenv("AWS_URL", "http://10.0.0.6")
    with pytest.raises(AnsibleFailJson, match="endpoint_url http://10.0.0.6 is plain http"):
        AWS(module({}), services=("eks",))


def test_endpoint_from_aws_endpoint_url_refused_when_the_client_is_made(module_io, monkeypatch):
    """boto3 takes AWS_ENDPOINT_URL itself when endpoint_url is unset: the client's resolved endpoint is checked."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.7:4566")
    aws = AWS(module({}), services=("eks",))
    with pytest.raises(AnsibleFailJson) as e:
        aws.client("eks")
    msg = e.value.args[0]["msg"]
    assert "the eks endpoint (from AWS_ENDPOINT_URL" in msg and "http://10.0.0.7:4566 is plain http" in msg


def test_endpoint_from_environment_with_opt_in(module_io, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.7:4566")
    client = AWS(module({"allow_http_endpoint_url": True}), services=("eks",)).client("eks")
    assert client.meta.endpoint_url == "http://10.0.0.7:4566"


def test_public_endpoint_and_loopback_taken(module_io):
    assert AWS(module({}), services=("eks",)).client("eks").meta.endpoint_url == "https://eks.eu-west-1.amazonaws.com"
    client = AWS(module({"endpoint_url": "http://localhost:5000"}), services=("eks",)).client("eks")
    assert client.meta.endpoint_url == "http://localhost:5000"


def test_aws_ca_bundle_and_aws_config_reach_botocore(module_io, tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    aws = AWS(module({"aws_ca_bundle": str(bundle),
                      "aws_config": {"user_agent_appid": "appid-1", "read_timeout": 7,
                                     "retries": {"max_attempts": 2}}}), services=("eks",))
    client = aws.client("eks")
    assert aws.verify == str(bundle)
    assert client._endpoint.http_session._verify == str(bundle)  # pylint: disable=protected-access
    assert client.meta.config.user_agent_appid == "appid-1" and client.meta.config.read_timeout == 7
    assert client.meta.config.retries["total_max_attempts"] == 3  # the task's retries replace the modules' 8
    assert client.meta.config.user_agent_extra == "k8sgpu.nvidia"  # the modules' own, not overridden
    assert AWS(module({"aws_ca_bundle": str(bundle), "validate_certs": False})).verify is False
    default = AWS(module({})).client("eks").meta.config
    assert default.retries == {"mode": "standard", "total_max_attempts": 9}


def test_aws_ca_bundle_from_environment(module_io, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "env-ca.pem"))
    assert AWS(module({})).verify == str(tmp_path / "env-ca.pem")


def test_unknown_aws_config_key_fails_naming_it(module_io):
    with pytest.raises(AnsibleFailJson, match=r"aws_config: .*no_such_setting.*botocore\.config\.Config"):
        AWS(module({"aws_config": {"no_such_setting": 1}}))


def test_profile_with_keys_refused_as_amazon_aws_does(module_io):
    with pytest.raises(AnsibleFailJson, match="Passing both a profile and access tokens"):
        AWS(module({"profile": "ml"}))


def test_debug_botocore_endpoint_logs_returns_the_operations_called(module_io):
    from botocore.stub import Stubber  # pylint: disable=import-outside-toplevel

    m = module({"debug_botocore_endpoint_logs": True})
    eks = AWS(m, services=("eks",)).client("eks")
    with Stubber(eks) as stub:
        stub.add_response("list_clusters", {"clusters": []}, {})
        stub.add_response("list_clusters", {"clusters": []}, {})
        eks.list_clusters()
        eks.list_clusters()
    with pytest.raises(AnsibleExitJson) as e:
        m.exit_json(changed=False)
    assert e.value.args[0]["resource_actions"] == ["eks:ListClusters"]
    with pytest.raises(AnsibleFailJson) as e:
        m.fail_json(msg="boom")
    assert e.value.args[0]["resource_actions"] == ["eks:ListClusters"]
    quiet = module({})
    with pytest.raises(AnsibleExitJson) as e:
        quiet.exit_json(changed=False)
    assert "resource_actions" not in e.value.args[0]


# ---- the options: amazon.aws's, all of them, documented ----
def amazon_aws_spec() -> dict:
    from ansible_collections.amazon.aws.plugins.module_utils.modules import (  # pylint: disable=import-outside-toplevel
        aws_argument_spec,
    )

    return aws_argument_spec()


# amazon.aws 9 (galaxy.yml's lower bound) still has the aliases and variables it deprecated for removal in 10
# (ec2_access_key, security_token, ec2_url, ..., EC2_URL): taken as amazon.aws takes them, not documented here.
OLD_ENV = ("EC2_ACCESS_KEY", "EC2_SECRET_KEY", "EC2_SECURITY_TOKEN", "AWS_SECURITY_TOKEN", "EC2_URL", "S3_URL",
           "EC2_REGION")


def current(spec: dict) -> dict:
    """An option's spec without the aliases amazon.aws deprecated and its environment fallbacks."""
    old = {d["name"] for d in spec.get("deprecated_aliases", [])}
    out = {k: v for k, v in spec.items() if k not in ("fallback", "deprecated_aliases")}
    if "aliases" in out:
        out["aliases"] = [a for a in out["aliases"] if a not in old]
    return out


def test_every_amazon_aws_common_option_is_taken(module_io):
    m = module({})
    for name, spec in amazon_aws_spec().items():
        assert m.argument_spec[name] == spec, name
    assert m.params["allow_http_endpoint_url"] is False


def test_the_doc_fragment_documents_every_option_as_the_spec_has_it():
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    spec = {**amazon_aws_spec(), **_aws_common.AWS_EXTRA_ARG_SPEC}
    assert set(doc) == set(spec)
    for name, s in spec.items():
        assert doc[name]["type"] == s.get("type", "str"), name
        assert doc[name].get("default") == s.get("default"), name
        assert sorted(doc[name].get("aliases", [])) == sorted(current(s).get("aliases", [])), name
        for env in (s.get("fallback") or (None, []))[1]:
            assert env in str(doc[name]["description"]) or env in OLD_ENV, (name, env)


def test_the_spec_without_amazon_aws_is_amazon_aws_without_its_fallbacks():
    """Used only to fail naming amazon.aws when it is missing; must match, so that the failure hides the same
    secrets and validate-modules sees the same options without amazon.aws."""
    theirs = {name: current(spec) for name, spec in amazon_aws_spec().items()}
    assert _aws_common._WITHOUT_AMAZON_AWS_SPEC == theirs  # pylint: disable=protected-access


def test_without_amazon_aws_the_module_fails_naming_it(module_io, monkeypatch):
    monkeypatch.setattr(_aws_common, "_amazon_aws", lambda: None)
    with patch_module_args({**BASE, "aws_ca_bundle": "/x", "session_token": "tok-marker"}):
        with pytest.raises(AnsibleFailJson, match="needs the amazon.aws collection"):
            aws_module({"name": {"type": "str"}})


def test_module_utils_import_without_amazon_aws():
    """_aws_common itself imports without amazon.aws (its import is inside _amazon_aws)."""
    source = Path(_aws_common.__file__).read_text()
    top = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert not any("amazon" in line for line in top), top
    importlib.reload(_aws_common)


def test_tag_update_with_and_without_purge():
    assert _aws_common.tag_update({"a": "1", "b": "2"}, {"a": "1", "c": "3"}, True) == ({"c": "3"}, ["b"])
    assert _aws_common.tag_update({"a": "1", "b": "2"}, {"a": "9"}, False) == ({"a": "9"}, [])
