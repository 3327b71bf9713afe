#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: eks_pod_identity
short_description: Create, update or delete an EKS Pod Identity association (an IAM role for a ServiceAccount)
version_added: 1.0.0
description:
  - Associates an IAM role with a Kubernetes ServiceAccount of an EKS cluster through EKS Pod Identity
    (C(CreatePodIdentityAssociation), C(UpdatePodIdentityAssociation), C(DeletePodIdentityAssociation)), so the
    pods of that ServiceAccount get the role's credentials from the EKS Pod Identity Agent - how
    C(playbooks/eks.yml) gives the cluster-autoscaler and Karpenter's controller their AWS permissions. The role
    must trust C(pods.eks.amazonaws.com) (actions C(sts:AssumeRole) and C(sts:TagSession)); the cluster needs the
    C(eks-pod-identity-agent) add-on.
  - The association is found by cluster, namespace and ServiceAccount (C(ListPodIdentityAssociations), EKS allows
    one per ServiceAccount), read with C(DescribePodIdentityAssociation), and only what differs is sent - the role
    (O(role_arn)), the target role (O(target_role_arn)), the session tags (O(disable_session_tags)) in one
    C(UpdatePodIdentityAssociation), the tags through C(TagResource)/C(UntagResource). EKS applies an association
    at once; there is nothing to wait for. An association that an EKS add-on owns (C(ownerArn)) is refused, naming
    the add-on.
  - A cluster that does not exist has no association - nothing to do with O(state=absent), a create planned in check
    mode (the cluster itself may be planned in the same run); otherwise the module fails naming the fix.
  - Why this module - amazon.aws and community.aws have no module for Pod Identity associations (amazon.aws 10,
    community.aws 10), and moto, the AWS stand-in of the collection's tests, has no Pod Identity API; the module is
    tested against botocore's Stubber with the EKS service model, which checks every request's shape.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.aws
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details: Reads the association and returns the requests it would send (RV(requests)); sends none.
  diff_mode:
    support: full
    details: Before and after of the role, target role, session tags setting and tags.
options:
  cluster_name:
    description: The EKS cluster (C(clusterName)).
    type: str
    required: true
  namespace:
    description: Namespace of the ServiceAccount (C(namespace)).
    type: str
    required: true
  service_account:
    description: Name of the ServiceAccount (C(serviceAccount)); it need not exist yet.
    type: str
    required: true
  state:
    description: V(present) creates or updates the association, V(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  role_arn:
    description: ARN of the IAM role the ServiceAccount's pods assume (C(roleArn)). Required with V(present).
    type: str
  target_role_arn:
    description:
      - A role in another account that EKS assumes with the credentials of O(role_arn) (C(targetRoleArn)), for
        cross-account access. Unset - not compared; V("") removes it.
    type: str
  disable_session_tags:
    description:
      - C(disableSessionTags) - no session tags (cluster, namespace, ServiceAccount) on the role's sessions.
      - Unset - not compared (EKS's default on create - false).
    type: bool
  tags:
    description: Tags of the association (C(tags); TagResource, UntagResource).
    type: dict
  purge_tags:
    description: Remove tags not in O(tags) (only when O(tags) is given).
    type: bool
    default: true
notes:
  - IAM permissions - C(eks:ListPodIdentityAssociations), C(eks:DescribePodIdentityAssociation),
    C(eks:CreatePodIdentityAssociation), C(eks:UpdatePodIdentityAssociation), C(eks:DeletePodIdentityAssociation),
    C(eks:TagResource), C(eks:UntagResource), C(iam:PassRole) and C(iam:GetRole) on O(role_arn).
  - Tested against botocore's Stubber with the EKS service model of the installed botocore (request shapes
    validated), not against EKS; see the collection's README for what that proves.
"""

EXAMPLES = r"""
- name: The cluster-autoscaler's IAM role for its ServiceAccount
  k8sgpu.nvidia.eks_pod_identity:
    cluster_name: train
    region: us-east-1
    namespace: kube-system
    service_account: cluster-autoscaler
    role_arn: arn:aws:iam::123456789012:role/train-cluster-autoscaler

- name: Remove it
  k8sgpu.nvidia.eks_pod_identity:
    cluster_name: train
    region: us-east-1
    namespace: kube-system
    service_account: cluster-autoscaler
    state: absent
"""

RETURN = r"""
association:
  description: The association as DescribePodIdentityAssociation returns it (the API's camelCase field names), after the changes.
  returned: when it exists (in check mode, the live one)
  type: dict
  sample: {"associationId": "a-abcdefghijkl01234", "namespace": "kube-system", "serviceAccount": "cluster-autoscaler",
           "roleArn": "arn:aws:iam::123456789012:role/train-cluster-autoscaler"}
requests:
  description: The write requests sent (in check mode, that would be sent), in order, each with its parameters.
  returned: always
  type: list
  elements: dict
  sample: [{"operation": "CreatePodIdentityAssociation", "params": {"clusterName": "train", "namespace": "kube-system",
            "serviceAccount": "cluster-autoscaler", "roleArn": "arn:aws:iam::123456789012:role/train-ca"}}]
resource_actions:
  description:
    - The AWS operations the task called, C(<service>:<Operation>), sorted and each once - for a least privilege IAM
      policy.
  returned: with O(debug_botocore_endpoint_logs=true), also when the task fails
  type: list
  elements: str
  sample: ["eks:CreatePodIdentityAssociation", "eks:ListPodIdentityAssociations"]
  version_added: 1.1.0
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._aws_common import (
    AWS,
    BotoCoreError,
    ClientError,
    aws_module,
    describe_error,
    error_code,
    plain,
    tag_update,
)

# Fields compared with the task: option -> DescribePodIdentityAssociation's field.
COMPARED = {"role_arn": "roleArn", "target_role_arn": "targetRoleArn", "disable_session_tags": "disableSessionTags"}


def compared(association: dict | None) -> dict:
    """The fields the module manages, for the diff."""
    if not association:
        return {}
    out = {field: association.get(field) for field in COMPARED.values() if association.get(field) not in (None, "")}
    out["tags"] = dict(sorted((association.get("tags") or {}).items()))
    return out


def update_request(live: dict, params: dict) -> dict:
    """UpdatePodIdentityAssociation's changed fields (empty: nothing to change)."""
    body = {}
    for option, field in COMPARED.items():
        want = params[option]
        if want is None:
            continue
        have = live.get(field)
        if option == "target_role_arn":
            if (want or "") != (have or ""):
                body[field] = want  # "" removes the target role
        elif want != (have if have is not None else (False if option == "disable_session_tags" else None)):
            body[field] = want
    return body


class Association:
    """One module run: the EKS client, the write requests, one failure path naming the association."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.eks = AWS(module, services=("eks",)).client("eks")
        self.requests: list[dict] = []
        self.ident = (f"EKS Pod Identity association of {self.p['namespace']}/{self.p['service_account']} "
                      f"in cluster {self.p['cluster_name']}")

    def fail(self, msg: str, **kw):
        self.module.fail_json(msg=msg, requests=self.requests, **kw)

    def call(self, what: str, fn, **params):
        try:
            return fn(**params)
        except (ClientError, BotoCoreError) as e:
            self.fail(describe_error(f"{self.ident}: {what}", e))

    def list_page(self, token: str | None) -> dict:
        """One page of ListPodIdentityAssociations. A cluster that does not exist has no association: nothing to
        delete with state absent, one to create in check mode (the cluster is still to be created in the same run);
        otherwise a failure naming the fix."""
        try:
            return self.eks.list_pod_identity_associations(
                clusterName=self.p["cluster_name"], namespace=self.p["namespace"],
                serviceAccount=self.p["service_account"], **({"nextToken": token} if token else {}))
        except (ClientError, BotoCoreError) as e:
            if error_code(e) == "ResourceNotFoundException":
                if self.p["state"] == "absent" or self.module.check_mode:
                    return {"associations": []}
                self.fail(f"{self.ident}: the cluster does not exist "
                          f"({describe_error('ListPodIdentityAssociations', e)}); create it first "
                          "(k8sgpu.nvidia.eks_cluster)")
            self.fail(describe_error(f"{self.ident}: ListPodIdentityAssociations", e))

    def write(self, operation: str, fn, **params):
        """Record a write request; send it unless in check mode."""
        self.requests.append({"operation": operation, "params": plain(params)})
        if self.module.check_mode:
            return None
        return self.call(operation, fn, **params)

    def find(self) -> dict | None:
        """The live association of the ServiceAccount (DescribePodIdentityAssociation), or None."""
        found, token = [], None
        while True:
            page = self.list_page(token)
            # The filters are exact in EKS; compared again in case an endpoint ignores them.
            found += [a for a in page.get("associations") or []
                      if a.get("namespace") == self.p["namespace"] and a.get("serviceAccount") == self.p["service_account"]]
            token = page.get("nextToken")
            if not token:
                break
        if not found:
            return None
        if len(found) > 1:
            self.fail(f"{self.ident}: EKS lists {len(found)} associations for it "
                      f"({', '.join(a['associationId'] for a in found)}); delete all but one")
        return self.call("DescribePodIdentityAssociation", self.eks.describe_pod_identity_association,
                         clusterName=self.p["cluster_name"], associationId=found[0]["associationId"])["association"]

    def create(self) -> dict | None:
        p = self.p
        if not p["role_arn"]:
            self.fail(f"{self.ident} does not exist; to create it, give role_arn")
        req = {"clusterName": p["cluster_name"], "namespace": p["namespace"], "serviceAccount": p["service_account"],
               "roleArn": p["role_arn"]}
        if p["target_role_arn"]:
            req["targetRoleArn"] = p["target_role_arn"]
        if p["disable_session_tags"] is not None:
            req["disableSessionTags"] = p["disable_session_tags"]
        if p["tags"]:
            req["tags"] = {k: str(v) for k, v in p["tags"].items()}
        res = self.write("CreatePodIdentityAssociation", self.eks.create_pod_identity_association, **req)
        return res["association"] if res else None

    def update(self, live: dict) -> dict:
        if live.get("ownerArn"):
            self.fail(f"{self.ident} is owned by {live['ownerArn']} (an EKS add-on): change it through the add-on",
                      association=plain(live))
        body = update_request(live, self.p)
        if body:
            res = self.write("UpdatePodIdentityAssociation", self.eks.update_pod_identity_association,
                             clusterName=self.p["cluster_name"], associationId=live["associationId"], **body)
            if res:
                live = {**live, **res["association"]}
        if self.p["tags"] is not None:
            want = {k: str(v) for k, v in self.p["tags"].items()}
            add, remove = tag_update(live.get("tags") or {}, want, self.p["purge_tags"])
            if remove:
                self.write("UntagResource", self.eks.untag_resource, resourceArn=live["associationArn"], tagKeys=remove)
            if add:
                self.write("TagResource", self.eks.tag_resource, resourceArn=live["associationArn"], tags=add)
            if (add or remove) and not self.module.check_mode:
                live = self.find() or live
        return live

    def planned(self, live: dict | None) -> dict:
        """The association as the requests would leave it (check mode)."""
        after = dict(live or {})
        for r in self.requests:
            params = r["params"]
            if r["operation"] in ("CreatePodIdentityAssociation", "UpdatePodIdentityAssociation"):
                after.update({k: v for k, v in params.items() if k in COMPARED.values() or k == "tags"})
            elif r["operation"] == "UntagResource":
                after["tags"] = {k: v for k, v in (after.get("tags") or {}).items() if k not in params["tagKeys"]}
            elif r["operation"] == "TagResource":
                after["tags"] = {**(after.get("tags") or {}), **params["tags"]}
        return compared(after)

    def run(self):
        live = self.find()
        before = compared(live)
        if self.p["state"] == "absent":
            if live is not None:
                if live.get("ownerArn"):
                    self.fail(f"{self.ident} is owned by {live['ownerArn']} (an EKS add-on): remove it through the "
                              "add-on", association=plain(live))
                self.write("DeletePodIdentityAssociation", self.eks.delete_pod_identity_association,
                           clusterName=self.p["cluster_name"], associationId=live["associationId"])
            self.module.exit_json(changed=bool(self.requests), requests=self.requests,
                                  diff={"before": before, "after": {}})
        after = self.create() if live is None else self.update(live)
        result = {"requests": self.requests}
        if after or live:
            result["association"] = plain(after or live)
        diff_after = self.planned(live) if self.module.check_mode else compared(after)
        self.module.exit_json(changed=bool(self.requests), diff={"before": before, "after": diff_after}, **result)


def main():
    module = aws_module(
        argument_spec={
            "cluster_name": {"type": "str", "required": True},
            "namespace": {"type": "str", "required": True},
            "service_account": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "role_arn": {"type": "str"},
            "target_role_arn": {"type": "str"},
            "disable_session_tags": {"type": "bool"},
            "tags": {"type": "dict"},
            "purge_tags": {"type": "bool", "default": True},
        },
        required_if=[("state", "present", ["role_arn"])],
        supports_check_mode=True,
    )
    Association(module).run()


if __name__ == "__main__":
    main()
