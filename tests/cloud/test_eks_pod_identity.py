"""k8sgpu.nvidia.eks_pod_identity against botocore's Stubber with the installed botocore's EKS service model.

moto 5.2.5 has no Pod Identity API, so the module runs in-process (its main(), the real AWS session and client code
of module_utils/_aws_common.py) with the EKS client's answers queued on a Stubber: every request the module sends is
validated against the service model's input shape (required members, types, no unknown field) and must be the one
expected, in order, with exactly these parameters; every answer is validated against the output shape. A request
the test did not expect, or an expected one not sent, fails the test.

What this does not prove: how EKS itself answers (the answers here are the API reference's shapes, written by
hand), IAM's checks of the role (iam:PassRole, the trust policy), nor the agent giving pods the credentials.
"""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from botocore.stub import Stubber

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "collections") not in sys.path:
    sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.k8sgpu.nvidia.plugins.modules import eks_pod_identity  # noqa: E402

CLUSTER, NS, SA = "train", "kube-system", "cluster-autoscaler"
ROLE = "arn:aws:iam::111122223333:role/train-cluster-autoscaler"
OTHER_ROLE = "arn:aws:iam::111122223333:role/train-other"
ASSOC_ID = "a-abcdefghijkl01234"
ASSOC_ARN = f"arn:aws:eks:eu-west-1:111122223333:podidentityassociation/{CLUSTER}/{ASSOC_ID}"
WHEN = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
BASE = {"cluster_name": CLUSTER, "namespace": NS, "service_account": SA, "region": "eu-west-1",
        "access_key": "testing", "secret_key": "testing-secret"}


class Exit(Exception):
    pass


class Fail(Exception):
    pass


def association(**over) -> dict:
    a = {"clusterName": CLUSTER, "namespace": NS, "serviceAccount": SA, "roleArn": ROLE, "associationArn": ASSOC_ARN,
         "associationId": ASSOC_ID, "tags": {}, "createdAt": WHEN, "modifiedAt": WHEN, "disableSessionTags": False}
    a.update(over)
    return a


def summary(**over) -> dict:
    a = {"clusterName": CLUSTER, "namespace": NS, "serviceAccount": SA, "associationArn": ASSOC_ARN,
         "associationId": ASSOC_ID}
    a.update(over)
    return a


LIST = {"clusterName": CLUSTER, "namespace": NS, "serviceAccount": SA}
DESCRIBE = {"clusterName": CLUSTER, "associationId": ASSOC_ID}


@pytest.fixture
def eks(monkeypatch):
    """The expected EKS calls: eks.expect(method, answer, params). The module's own client (made by its AWS class,
    from a real boto3 session) gets a Stubber with them; after the run, every one must have been used."""

    class Expected:
        def __init__(self):
            self.calls: list[tuple] = []
            self.stubbers: list[Stubber] = []

        def expect(self, method: str, answer: dict, params: dict):
            self.calls.append((method, answer, params))

        def error(self, method: str, code: str, params: dict, status: int = 404):
            self.calls.append((method, {"error": code, "status": status}, params))

    expected = Expected()
    original = boto3.session.Session.client

    def client(self, service, *args, **kwargs):
        c = original(self, service, *args, **kwargs)
        assert service == "eks", f"the module asked for a {service} client"
        stubber = Stubber(c)
        for method, answer, params in expected.calls:
            if "error" in answer:
                stubber.add_client_error(method, service_error_code=answer["error"], http_status_code=answer["status"],
                                         expected_params=params)
            else:
                stubber.add_response(method, answer, params)
        stubber.activate()
        expected.stubbers.append(stubber)
        return c

    monkeypatch.setattr(boto3.session.Session, "client", client)
    for k in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    yield expected
    for stubber in expected.stubbers:
        stubber.assert_no_pending_responses()


def run(monkeypatch, args: dict, *, check: bool = False, diff: bool = True) -> dict:
    def exit_json(self, **kw):
        raise Exit(kw)

    def fail_json(self, msg, **kw):
        raise Fail({"msg": msg, **kw})

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with patch_module_args({**BASE, **args, "_ansible_check_mode": check, "_ansible_diff": diff}):
        with pytest.raises((Exit, Fail)) as res:
            eks_pod_identity.main()
    out = res.value.args[0]
    out["failed"] = isinstance(res.value, Fail)
    return out


def test_create_then_nothing_to_change(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": []}, LIST)
    eks.expect("create_pod_identity_association", {"association": association(tags={"team": "ml"})},
               {**LIST, "roleArn": ROLE, "tags": {"team": "ml"}})
    res = run(monkeypatch, {"role_arn": ROLE, "tags": {"team": "ml"}})
    assert not res["failed"] and res["changed"], res
    assert [r["operation"] for r in res["requests"]] == ["CreatePodIdentityAssociation"]
    assert res["association"]["associationId"] == ASSOC_ID and res["association"]["createdAt"].startswith("2026-11-25")
    assert res["diff"] == {"before": {}, "after": {"roleArn": ROLE, "disableSessionTags": False, "tags": {"team": "ml"}}}


def test_existing_and_equal_sends_no_write(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": [summary()]}, LIST)
    eks.expect("describe_pod_identity_association", {"association": association(tags={"team": "ml"})}, DESCRIBE)
    res = run(monkeypatch, {"role_arn": ROLE, "tags": {"team": "ml"}, "disable_session_tags": False})
    assert not res["failed"] and not res["changed"] and res["requests"] == [], res


def test_list_follows_next_token(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": [], "nextToken": "t1"}, LIST)
    eks.expect("list_pod_identity_associations", {"associations": [summary()]}, {**LIST, "nextToken": "t1"})
    eks.expect("describe_pod_identity_association", {"association": association()}, DESCRIBE)
    res = run(monkeypatch, {"role_arn": ROLE})
    assert not res["failed"] and not res["changed"], res


def test_changed_role_is_one_update_and_tags_are_purged(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": [summary()]}, LIST)
    eks.expect("describe_pod_identity_association", {"association": association(tags={"old": "x", "team": "ml"})},
               DESCRIBE)
    eks.expect("update_pod_identity_association", {"association": association(roleArn=OTHER_ROLE, tags={"old": "x", "team": "ml"})},
               {**DESCRIBE, "roleArn": OTHER_ROLE})
    eks.expect("untag_resource", {}, {"resourceArn": ASSOC_ARN, "tagKeys": ["old"]})
    eks.expect("list_pod_identity_associations", {"associations": [summary()]}, LIST)
    eks.expect("describe_pod_identity_association",
               {"association": association(roleArn=OTHER_ROLE, tags={"team": "ml"})}, DESCRIBE)
    res = run(monkeypatch, {"role_arn": OTHER_ROLE, "tags": {"team": "ml"}})
    assert not res["failed"] and res["changed"], res
    assert [r["operation"] for r in res["requests"]] == ["UpdatePodIdentityAssociation", "UntagResource"]
    assert res["diff"]["before"]["roleArn"] == ROLE and res["diff"]["after"]["roleArn"] == OTHER_ROLE
    assert res["diff"]["after"]["tags"] == {"team": "ml"}


def test_check_mode_reads_only_and_plans_the_change(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": [summary()]}, LIST)
    eks.expect("describe_pod_identity_association", {"association": association()}, DESCRIBE)
    res = run(monkeypatch, {"role_arn": OTHER_ROLE, "disable_session_tags": True, "tags": {"team": "ml"}}, check=True)
    assert not res["failed"] and res["changed"], res
    assert res["requests"] == [
        {"operation": "UpdatePodIdentityAssociation",
         "params": {**DESCRIBE, "roleArn": OTHER_ROLE, "disableSessionTags": True}},
        {"operation": "TagResource", "params": {"resourceArn": ASSOC_ARN, "tags": {"team": "ml"}}}]
    assert res["diff"]["after"] == {"roleArn": OTHER_ROLE, "disableSessionTags": True, "tags": {"team": "ml"}}


def test_check_mode_create_sends_nothing(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": []}, LIST)
    res = run(monkeypatch, {"role_arn": ROLE}, check=True)
    assert res["changed"] and res["requests"][0]["operation"] == "CreatePodIdentityAssociation"
    assert "association" not in res and res["diff"]["after"]["roleArn"] == ROLE


def test_absent_deletes_then_nothing(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": [summary()]}, LIST)
    eks.expect("describe_pod_identity_association", {"association": association()}, DESCRIBE)
    eks.expect("delete_pod_identity_association", {"association": association()}, DESCRIBE)
    res = run(monkeypatch, {"state": "absent"})
    assert not res["failed"] and res["changed"] and res["diff"]["after"] == {}, res
    assert [r["operation"] for r in res["requests"]] == ["DeletePodIdentityAssociation"]


def test_absent_when_gone_changes_nothing(monkeypatch, eks):
    eks.expect("list_pod_identity_associations", {"associations": []}, LIST)
    res = run(monkeypatch, {"state": "absent"})
    assert not res["failed"] and not res["changed"] and res["requests"] == []


def test_an_add_on_owned_association_is_refused(monkeypatch, eks):
    owner = "arn:aws:eks:eu-west-1:111122223333:addon/train/aws-ebs-csi-driver/abc"
    eks.expect("list_pod_identity_associations", {"associations": [summary(ownerArn=owner)]}, LIST)
    eks.expect("describe_pod_identity_association", {"association": association(ownerArn=owner)}, DESCRIBE)
    res = run(monkeypatch, {"role_arn": OTHER_ROLE})
    assert res["failed"] and f"is owned by {owner} (an EKS add-on)" in res["msg"] and res["requests"] == []


def test_missing_cluster_names_the_fix(monkeypatch, eks):
    eks.error("list_pod_identity_associations", "ResourceNotFoundException", LIST)
    res = run(monkeypatch, {"role_arn": ROLE})
    assert res["failed"] and "the cluster does not exist" in res["msg"] and "k8sgpu.nvidia.eks_cluster" in res["msg"]


def test_missing_cluster_is_nothing_to_delete(monkeypatch, eks):
    eks.error("list_pod_identity_associations", "ResourceNotFoundException", LIST)
    res = run(monkeypatch, {"state": "absent"})
    assert not res["failed"] and not res["changed"], res


def test_missing_cluster_is_a_planned_create_in_check_mode(monkeypatch, eks):
    eks.error("list_pod_identity_associations", "ResourceNotFoundException", LIST)
    res = run(monkeypatch, {"role_arn": ROLE}, check=True)
    assert not res["failed"] and res["changed"] and res["requests"][0]["operation"] == "CreatePodIdentityAssociation"


def test_present_without_role_fails_before_any_request(monkeypatch, eks):
    res = run(monkeypatch, {})
    assert res["failed"] and "role_arn" in res["msg"]


def test_the_stubber_refuses_a_request_outside_the_model():
    """The contract is strict: a member the model does not have (or a missing required one) fails validation."""
    c = boto3.session.Session(region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b").client("eks")
    with Stubber(c) as stub:
        stub.add_response("create_pod_identity_association", {"association": association()})
        with pytest.raises(Exception, match="Unknown parameter in input"):
            c.create_pod_identity_association(**LIST, roleArn=ROLE, roleName="x")
        with pytest.raises(Exception, match="Missing required parameter in input"):
            c.create_pod_identity_association(**LIST)
        with pytest.raises(Exception, match="Unknown parameter in association"):
            stub.add_response("describe_pod_identity_association", {"association": {**association(), "bad": 1}})


# --------------------------------------------------------------------------------------------------------------
# A Pod Identity API for moto, for the playbook tests (tests/cloud/test_eks_playbook_cluster.py and the lab's
# tests/lab/test_karpenter.py): moto 5.2.5 routes EKS requests by botocore's model but has neither the URL paths
# nor the handlers of the five Pod Identity operations. add_pod_identity_to_moto() adds both, with the API
# reference's behaviour the playbook relies on: one association per ServiceAccount (ResourceInUseException),
# ResourceNotFoundException for an unknown cluster or association, list filtered by namespace and ServiceAccount.
# It must run before moto's server answers its first EKS request (the EKS app reads its URL paths then): the test
# modules call it when imported. The module itself is proven against the Stubber above, not against this.
# --------------------------------------------------------------------------------------------------------------
_PI_STORE: dict[tuple, dict] = {}


def _pi_handlers():
    import uuid as _uuid  # pylint: disable=import-outside-toplevel

    from moto.core.responses import ActionResult  # pylint: disable=import-outside-toplevel
    from moto.eks.exceptions import (  # pylint: disable=import-outside-toplevel
        ResourceInUseException,
        ResourceNotFoundException,
    )

    def not_found(message):
        return ResourceNotFoundException(clusterName=None, nodegroupName=None, fargateProfileName=None,
                                         addonName=None, message=message)

    def store(self) -> dict:
        cluster = self._get_param("name") or self._get_param("clusterName")  # pylint: disable=protected-access
        if cluster not in self.eks_backend.clusters:
            raise not_found(f"No cluster found for name: {cluster}.")
        # Keyed by the cluster's ARN: a cluster deleted and made again starts without associations, as in EKS.
        arn = self.eks_backend.clusters[cluster].arn
        return cluster, _PI_STORE.setdefault((self.current_account, self.region, arn), {})

    def get(self, assocs: dict) -> dict:
        assoc_id = self._get_param("associationId")  # pylint: disable=protected-access
        if assoc_id not in assocs:
            raise not_found(f"No Pod Identity Association found for id: {assoc_id}.")
        return assocs[assoc_id]

    def create_pod_identity_association(self):
        cluster, assocs = store(self)
        ns, sa = self._get_param("namespace"), self._get_param("serviceAccount")  # pylint: disable=protected-access
        if any(a["namespace"] == ns and a["serviceAccount"] == sa for a in assocs.values()):
            raise ResourceInUseException(clusterName=cluster, nodegroupName=None, fargateProfileName=None,
                                         addonName=None, message="Association already exists")
        assoc_id = "a-" + _uuid.uuid4().hex[:17]
        now = datetime.now(timezone.utc)
        a = {"clusterName": cluster, "namespace": ns, "serviceAccount": sa,
             "roleArn": self._get_param("roleArn"),  # pylint: disable=protected-access
             "associationArn": f"arn:aws:eks:{self.region}:{self.current_account}:podidentityassociation/{cluster}/{assoc_id}",
             "associationId": assoc_id, "tags": self._get_param("tags") or {},  # pylint: disable=protected-access
             "createdAt": now, "modifiedAt": now,
             "disableSessionTags": bool(self._get_param("disableSessionTags"))}  # pylint: disable=protected-access
        assocs[assoc_id] = a
        return ActionResult({"association": a})

    def describe_pod_identity_association(self):
        return ActionResult({"association": get(self, store(self)[1])})

    def update_pod_identity_association(self):
        a = get(self, store(self)[1])
        for field in ("roleArn", "disableSessionTags", "targetRoleArn"):
            value = self._get_param(field)  # pylint: disable=protected-access
            if value is not None:
                a[field] = value
        a["modifiedAt"] = datetime.now(timezone.utc)
        return ActionResult({"association": a})

    def delete_pod_identity_association(self):
        assocs = store(self)[1]
        a = get(self, assocs)
        del assocs[a["associationId"]]
        return ActionResult({"association": a})

    def list_pod_identity_associations(self):
        ns, sa = self._get_param("namespace"), self._get_param("serviceAccount")  # pylint: disable=protected-access
        found = [{k: a[k] for k in ("clusterName", "namespace", "serviceAccount", "associationArn", "associationId")}
                 for a in store(self)[1].values()
                 if (ns is None or a["namespace"] == ns) and (sa is None or a["serviceAccount"] == sa)]
        return ActionResult({"associations": found})

    return {f.__name__: f for f in (create_pod_identity_association, describe_pod_identity_association,
                                    update_pod_identity_association, delete_pod_identity_association,
                                    list_pod_identity_associations)}


def add_pod_identity_to_moto() -> None:
    """Add the Pod Identity operations to moto's EKS (idempotent)."""
    from moto.eks import urls  # pylint: disable=import-outside-toplevel
    from moto.eks.responses import EKSResponse  # pylint: disable=import-outside-toplevel

    urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/pod-identity-associations$", urls.response.dispatch)
    urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/pod-identity-associations/(?P<associationId>[^/]+)$",
                              urls.response.dispatch)
    for name, fn in _pi_handlers().items():
        if not hasattr(EKSResponse, name):
            setattr(EKSResponse, name, fn)


def pod_identity_associations(aws, cluster: str) -> list[dict]:
    """The associations moto's stand-in holds for cluster (boto3 through the HTTP server)."""
    return [aws["eks"].describe_pod_identity_association(clusterName=cluster, associationId=a["associationId"])
            ["association"] for a in aws["eks"].list_pod_identity_associations(clusterName=cluster)["associations"]]


add_pod_identity_to_moto()


def test_amazon_aws_common_options_taken(monkeypatch, eks, tmp_path):
    """group/k8sgpu.nvidia.aws extends amazon.aws's group, whose defaults may carry amazon.aws's common options; the
    module refused aws_ca_bundle, aws_config and debug_botocore_endpoint_logs (Unsupported parameters)."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    eks.expect("list_pod_identity_associations", {"associations": []}, LIST)
    res = run(monkeypatch, {"state": "absent", "aws_ca_bundle": str(bundle), "validate_certs": True,
                            "aws_config": {"user_agent_appid": "k8sgpu-test", "connect_timeout": 5},
                            "debug_botocore_endpoint_logs": True})
    assert not res["failed"] and not res["changed"], res
    assert res["resource_actions"] == ["eks:ListPodIdentityAssociations"]
