"""Issue 34.8: k8s_serving_cert trusts only a CA it made (its fingerprint recorded on the Secret's Namespace, which
who may write the Secret may not write), or a pinned one, unless told to trust an existing CA. 1.0.0 kept any valid
CA found in the Secret, so whoever could write the Secret chose the CA the aggregator trusts for the adapter."""
from __future__ import annotations

import base64
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _serving_cert
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._serving_cert import ca_fingerprint, issue
from ansible_collections.k8sgpu.nvidia.plugins.modules import k8s_serving_cert
from module_harness import AnsibleExitJson, AnsibleFailJson

pytestmark = pytest.mark.usefixtures("module_io")
NAMES = ["prometheus-adapter.gpu-monitoring.svc", "prometheus-adapter.gpu-monitoring", "prometheus-adapter"]
NS, NAME = "gpu-monitoring", "prometheus-adapter-serving-cert"
SECRET = f"/api/v1/namespaces/{NS}/secrets/{NAME}"
NAMESPACE = f"/api/v1/namespaces/{NS}"
ANNOTATION = "k8sgpu.nvidia/serving-ca-sha256"


class FakeApi:
    """The API server's Secret and Namespace, as plain dicts; patches applied as the server would."""

    def __init__(self, secret_pem=None, annotations=None):
        self.objects = {NAMESPACE: {"metadata": {"name": NS, "annotations": dict(annotations or {})}}}
        if secret_pem:
            self.objects[SECRET] = {"type": "kubernetes.io/tls", "metadata": {"name": NAME},
                                    "data": {k: base64.b64encode(v.encode()).decode() for k, v in secret_pem.items()}}
        self.writes = []

    def request(self, method, path, body=None, serializer=None, **kw):
        if method == "get":
            if path not in self.objects:
                exc = RuntimeError("HTTP 404")
                exc.status = 404
                raise exc
            return self.objects[path]
        assert method == "patch", method
        self.writes.append((path, kw.get("content_type"), kw.get("field_manager")))
        if path == NAMESPACE:
            self.objects[NAMESPACE]["metadata"]["annotations"].update(body["metadata"]["annotations"])
        else:
            self.objects[path] = body
        return body

    def secret_ca(self) -> str:
        return base64.b64decode(self.objects[SECRET]["data"]["ca.crt"]).decode()


def run(api, monkeypatch, **args) -> dict:
    monkeypatch.setattr(k8s_serving_cert, "dynamic_client", lambda module: api)
    with patch_module_args({"namespace": NS, "name": NAME, "dns_names": NAMES, **args}):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as raised:
            k8s_serving_cert.main()
    result = raised.value.args[0]
    result["failed"] = isinstance(raised.value, AnsibleFailJson)
    return result


def test_a_foreign_valid_ca_in_the_secret_is_not_trusted(monkeypatch):
    foreign = issue(NAMES, 730, ca_name="attacker CA")  # valid for the Service's names: 1.0.0 kept it
    api = FakeApi(foreign)
    result = run(api, monkeypatch)
    assert not result["failed"] and result["changed"]
    assert "not a CA this module made" in result["reason"]
    assert api.secret_ca() != foreign["ca.crt"] and result["ca_bundle"] == api.secret_ca()
    recorded = json.loads(api.objects[NAMESPACE]["metadata"]["annotations"][ANNOTATION])
    assert recorded == {NAME: ca_fingerprint(api.secret_ca())} and result["ca_sha256"] == recorded[NAME]
    assert (NAMESPACE, "application/merge-patch+json", "k8sgpu.nvidia/serving-cert") in api.writes
    # Its own CA, recorded, is kept: a second run changes nothing.
    again = run(api, monkeypatch)
    assert not again["changed"] and again["reason"] == "kept"


def test_a_record_in_the_secret_writers_reach_does_not_help(monkeypatch):
    # The attacker can write the Secret (and its annotations), not the Namespace: a record elsewhere is ignored.
    foreign = issue(NAMES, 730, ca_name="attacker CA")
    api = FakeApi(foreign, annotations={ANNOTATION: json.dumps({"other-secret": ca_fingerprint(foreign["ca.crt"])})})
    assert "not a CA this module made" in run(api, monkeypatch)["reason"]


def test_check_mode_reports_and_writes_nothing(monkeypatch):
    api = FakeApi(issue(NAMES, 730))
    result = run(api, monkeypatch, _ansible_check_mode=True)
    assert result["changed"] and not api.writes


def test_pinned_ca_is_kept_and_another_refused(monkeypatch):
    site = issue(NAMES, 730, ca_name="site CA")
    pin = ca_fingerprint(site["ca.crt"]).upper()
    pin = ":".join(pin[i:i + 2] for i in range(0, len(pin), 2))  # as openssl prints it
    api = FakeApi(site)
    result = run(api, monkeypatch, trusted_ca_sha256=[pin])
    assert not result["failed"] and not result["changed"] and not api.writes
    other = FakeApi(issue(NAMES, 730))
    result = run(other, monkeypatch, trusted_ca_sha256=[pin])
    assert result["failed"] and "pinned" in result["msg"] and "Nothing was changed" in result["msg"]
    assert not other.writes


def test_trust_existing_ca_keeps_any_valid_ca(monkeypatch):
    api = FakeApi(issue(NAMES, 730, ca_name="cert-manager CA"))
    result = run(api, monkeypatch, trust_existing_ca=True)
    assert not result["changed"] and not api.writes


def test_ca_trust_problem():
    pem = issue(NAMES, 730)
    fp = ca_fingerprint(pem["ca.crt"])
    assert _serving_cert.ca_trust_problem(pem, fp) == ""
    assert "not a CA this module made" in _serving_cert.ca_trust_problem(pem, None)
    assert "not a CA this module made" in _serving_cert.ca_trust_problem(pem, "0" * 64)
    assert _serving_cert.ca_trust_problem(pem, None, trust_existing=True) == ""
    assert "pinned" in _serving_cert.ca_trust_problem(pem, fp, pins=["ab" * 32])
