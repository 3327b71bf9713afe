#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: eks_cluster
short_description: Create, update or delete an EKS cluster without nodegroups (the control plane for GPU pools)
version_added: 1.0.0
description:
  - Creates, updates or deletes an Amazon EKS cluster's control plane (C(CreateCluster), C(UpdateClusterConfig),
    C(TagResource), C(UntagResource), C(DeleteCluster)), as C(eksctl create cluster --without-nodegroup) does; the
    GPU capacity comes afterwards from M(k8sgpu.nvidia.eks_nodegroup) or Karpenter. Waits with boto3's waiters
    (C(cluster_active), C(cluster_deleted)) and C(DescribeUpdate).
  - Compares the task with the live cluster (C(DescribeCluster)) and sends only what differs, one
    C(UpdateClusterConfig) per kind of change (EKS runs one cluster update at a time), each waited for - the
    control-plane log types (O(logging)), the endpoint access (O(endpoint_public_access),
    O(endpoint_private_access), O(public_access_cidrs)) and the authentication mode (O(authentication_mode), only
    forward - C(CONFIG_MAP), C(API_AND_CONFIG_MAP), C(API)); tags through C(TagResource)/C(UntagResource). An
    option left unset is not compared.
  - Not changed on an existing cluster, failing the task naming the field, the live and the asked value before any
    write - O(role_arn) (EKS cannot change it), O(version) (an upgrade replaces the control plane and must be
    followed by the nodegroups, so the module does not start one), O(subnets) and O(security_groups).
  - O(state=absent) refuses to delete a cluster that still has nodegroups (it names them; delete them first, as
    C(playbooks/eks.yml)'s teardown does).
  - With O(state=present), warns (AWS's EKS best practices, CIS EKS benchmark 5.4.2 and 2.1.1) when the API server
    endpoint is public to any address - O(endpoint_public_access) true (asked, live, or EKS's create default) and
    O(public_access_cidrs) unset or holding C(0.0.0.0/0) - and when the audit log is off (O(logging) without
    C(audit)). C(playbooks/eks.yml) sets O(endpoint_private_access=true) and O(logging=[api, audit, authenticator])
    unless its inventory says otherwise.
  - Enum values (O(logging), O(authentication_mode)) are checked against botocore's EKS model (shapes C(LogType),
    C(AuthenticationMode)) before any request.
  - Why not M(community.aws.eks_cluster) (community.aws 10.0.0, read from its source) - it has no logging, no
    endpoint access, no authentication mode (access entries, which Karpenter's node role and Pod Identity need), no
    diff mode, and changes nothing on an existing cluster (not even tags); its check mode reports a create without
    any detail; its security groups are looked up by name through EC2 before the cluster is even read.
  - The IAM roles the cluster and its nodes need are not made here - M(amazon.aws.iam_role) does that well
    (C(playbooks/eks.yml) uses it).
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.aws
attributes:
  check_mode:
    support: full
    details: Reads the cluster (and, for O(state=absent), its nodegroups) and returns the requests it would send
      (RV(requests)); sends none.
  diff_mode:
    support: full
    details: Before and after of the compared fields.
options:
  name:
    description: The cluster's name (C(name)).
    type: str
    required: true
  state:
    description: V(present) creates or updates the cluster, V(absent) deletes it (C(DeleteCluster)).
    type: str
    choices: [present, absent]
    default: present
  version:
    description:
      - Kubernetes version of the control plane (C(version)), for example C("1.33"). Unset - EKS's default on
        create, not compared. Not changed on an existing cluster.
    type: str
  role_arn:
    description: ARN of the cluster's IAM role (C(roleArn), trusted by C(eks.amazonaws.com), with C(AmazonEKSClusterPolicy)). Needed to create; cannot change.
    type: str
  subnets:
    description: Subnet IDs of the control plane's network interfaces (C(resourcesVpcConfig.subnetIds)), in two zones or more. Needed to create; not changed.
    type: list
    elements: str
  security_groups:
    description: Additional security groups (C(resourcesVpcConfig.securityGroupIds)). Not changed.
    type: list
    elements: str
  endpoint_public_access:
    description: Public API server endpoint (C(resourcesVpcConfig.endpointPublicAccess)). EKS's default on create - true.
    type: bool
  endpoint_private_access:
    description: Private API server endpoint (C(resourcesVpcConfig.endpointPrivateAccess)). EKS's default on create - false.
    type: bool
  public_access_cidrs:
    description: CIDR blocks allowed to reach the public endpoint (C(resourcesVpcConfig.publicAccessCidrs)), compared as a set.
    type: list
    elements: str
  logging:
    description:
      - Control-plane log types sent to CloudWatch Logs (C(logging.clusterLogging)) - C(api), C(audit),
        C(authenticator), C(controllerManager), C(scheduler). The exact set; C([]) turns all off. Unset - not
        compared.
    type: list
    elements: str
  authentication_mode:
    description:
      - C(accessConfig.authenticationMode) - C(API_AND_CONFIG_MAP) (access entries and the aws-auth ConfigMap),
        C(API) or C(CONFIG_MAP). Changed only forward (C(CONFIG_MAP) to C(API_AND_CONFIG_MAP) to C(API)).
    type: str
  bootstrap_cluster_creator_admin_permissions:
    description:
      - C(accessConfig.bootstrapClusterCreatorAdminPermissions) on create - an access entry with cluster admin for
        the identity that creates the cluster. Not compared afterwards.
    type: bool
  tags:
    description: Tags of the cluster resource (C(tags); TagResource, UntagResource).
    type: dict
  purge_tags:
    description: Remove cluster tags not in O(tags) (only when O(tags) is given).
    type: bool
    default: true
  wait:
    description: Wait until the cluster is C(ACTIVE) (or deleted) and until each update has finished.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait in all, for O(wait). A new EKS control plane takes about 10 minutes.
    type: int
    default: 1800
notes:
  - IAM permissions - C(eks:DescribeCluster), C(eks:CreateCluster), C(eks:UpdateClusterConfig), C(eks:DescribeUpdate),
    C(eks:TagResource), C(eks:UntagResource), C(eks:DeleteCluster), C(eks:ListNodegroups), C(iam:PassRole) on
    O(role_arn).
  - Tested against moto's HTTP server, not against EKS; see the collection's README for what that proves.
"""

EXAMPLES = r"""
- name: The control plane, without nodegroups
  k8sgpu.nvidia.eks_cluster:
    name: train
    region: us-east-1
    version: "1.33"
    role_arn: arn:aws:iam::123456789012:role/train-eks-cluster
    subnets: [subnet-0a1b2c3d, subnet-4e5f6a7b]
    logging: [api, audit, authenticator]
    authentication_mode: API_AND_CONFIG_MAP
    bootstrap_cluster_creator_admin_permissions: true
    tags:
      team: ml

- name: Delete it (its nodegroups first)
  k8sgpu.nvidia.eks_cluster:
    name: train
    region: us-east-1
    state: absent

- name: The connection once for amazon.aws's modules and the collection's, through a VPC endpoint with a private CA
  module_defaults:
    group/k8sgpu.nvidia.aws:
      region: us-east-1
      endpoint_url: https://vpce-0123456789abcdef0-abcdefgh.eks.us-east-1.vpce.amazonaws.com
      aws_ca_bundle: /etc/pki/tls/certs/corporate-ca.pem
      aws_config:
        connect_timeout: 10
        retries: {mode: adaptive, max_attempts: 10}
  block:
    - name: The cluster
      k8sgpu.nvidia.eks_cluster:
        name: train
        role_arn: arn:aws:iam::123456789012:role/train-eks-cluster
        subnets: [subnet-0a1b2c3d, subnet-4e5f6a7b]
"""

RETURN = r"""
cluster:
  description: The cluster as DescribeCluster returns it (the API's camelCase field names), after the changes.
  returned: when it exists (in check mode, the live one)
  type: dict
  sample: {"name": "train", "status": "ACTIVE", "version": "1.33", "endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com"}
requests:
  description: The write requests sent (in check mode, that would be sent), in order, each with its parameters.
  returned: always
  type: list
  elements: dict
  sample: [{"operation": "UpdateClusterConfig", "params": {"logging": {"clusterLogging": [{"types": ["api"], "enabled": true}]}}}]
updates:
  description: The EKS updates started (DescribeUpdate's C(update)), with their final status.
  returned: always
  type: list
  elements: dict
resource_actions:
  description:
    - The AWS operations the task called, C(<service>:<Operation>), sorted and each once - for a least privilege IAM
      policy.
  returned: with O(debug_botocore_endpoint_logs=true), also when the task fails
  type: list
  elements: str
  sample: ["eks:CreateCluster", "eks:DescribeCluster"]
  version_added: 1.1.0
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_cluster as plan
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._aws_common import (
    BotoCoreError,
    ClientError,
    EksRun,
    aws_module,
    describe_error,
    error_code,
    plain,
    tag_update,
)

try:
    from botocore.exceptions import WaiterError
except ImportError:  # aws_module() fails first, naming boto3
    WaiterError = Exception


class Cluster(EksRun):
    """One module run."""

    def __init__(self, module):
        super().__init__(module, f"EKS cluster {module.params['name']}")
        self.planned_updates: list[dict] = []

    def validate(self) -> None:
        model = self.aws.service_model("eks")
        logs = model.shape_for("LogType").enum
        modes = model.shape_for("AuthenticationMode").enum
        bad = sorted(set(self.p["logging"] or []) - set(logs))
        if bad:
            self.fail(f"{self.ident}: logging {', '.join(bad)} is not a log type EKS accepts (botocore's EKS model, "
                      f"shape LogType): use {', '.join(logs)}")
        mode = self.p["authentication_mode"]
        if mode is not None and mode not in modes:
            self.fail(f"{self.ident}: authentication_mode={mode!r} is not a value EKS accepts (botocore's EKS model, "
                      f"shape AuthenticationMode): use one of {', '.join(modes)}")

    def describe(self) -> dict | None:
        try:
            return self.eks.describe_cluster(name=self.p["name"])["cluster"]
        except (ClientError, BotoCoreError) as e:
            if error_code(e) == "ResourceNotFoundException":
                return None
            self.fail(describe_error(f"{self.ident}: DescribeCluster", e))

    def wait_for(self, waiter_name: str) -> None:
        try:
            self.eks.get_waiter(waiter_name).wait(name=self.p["name"], WaiterConfig=self.waiter_config())
        except WaiterError as e:
            cluster = (e.last_response or {}).get("cluster", {})
            self.fail(f"{self.ident}: {waiter_name} did not succeed within wait_timeout={self.p['wait_timeout']}s: "
                      f"{e}; status {cluster.get('status', 'unknown')}")

    def started(self, response: dict | None) -> None:
        """Follow the update a request started (moto answers UpdateClusterConfig without one: nothing to follow)."""
        update = (response or {}).get("update") or {}
        if not update:
            return
        self.updates.append(plain(self.follow_update(update, self.p["wait"], name=self.p["name"])))

    # ---- state: present ----
    def create_request(self) -> dict:
        p = self.p
        missing = [o for o in ("role_arn", "subnets") if not p[o]]
        if missing:
            self.fail(f"{self.ident} does not exist; to create it, give {' and '.join(missing)}")
        vpc = {"subnetIds": p["subnets"]}
        for option, field in (("security_groups", "securityGroupIds"), ("endpoint_public_access", "endpointPublicAccess"),
                              ("endpoint_private_access", "endpointPrivateAccess"),
                              ("public_access_cidrs", "publicAccessCidrs")):
            if p[option] is not None:
                vpc[field] = p[option]
        req = {"name": p["name"], "roleArn": p["role_arn"], "resourcesVpcConfig": vpc}
        if p["version"]:
            req["version"] = str(p["version"])
        if p["logging"] is not None:
            req["logging"] = plan.logging_request(p["logging"])
        access = {}
        if p["authentication_mode"]:
            access["authenticationMode"] = p["authentication_mode"]
        if p["bootstrap_cluster_creator_admin_permissions"] is not None:
            access["bootstrapClusterCreatorAdminPermissions"] = p["bootstrap_cluster_creator_admin_permissions"]
        if access:
            req["accessConfig"] = access
        if p["tags"]:
            req["tags"] = p["tags"]
        return req

    def create(self) -> dict | None:
        req = self.create_request()
        self.write("CreateCluster", self.eks.create_cluster, **req)
        if self.module.check_mode:
            return None
        if self.p["wait"]:
            self.wait_for("cluster_active")
        return self.describe()

    def update(self, live: dict) -> dict:
        if live.get("status") in ("CREATING", "UPDATING") and self.p["wait"] and not self.module.check_mode:
            self.wait_for("cluster_active")
            live = self.describe() or live
        if live.get("status") == "DELETING":
            self.fail(f"{self.ident} is being deleted; run again when it is gone")
        changes = plan.immutable_changes(live, self.p)
        if changes:
            self.fail(plan.immutable_message(self.p["name"], changes), cluster=plain(live))
        try:
            bodies = plan.config_updates(live, self.p)
        except plan.PlanError as e:
            self.fail(f"{self.ident}: {e}", cluster=plain(live))
        for body in bodies:
            self.started(self.write("UpdateClusterConfig", self.eks.update_cluster_config, name=self.p["name"], **body))
        if self.p["tags"] is not None:
            add, remove = tag_update(live.get("tags") or {}, self.p["tags"], self.p["purge_tags"])
            if remove:
                self.write("UntagResource", self.eks.untag_resource, resourceArn=live["arn"], tagKeys=remove)
            if add:
                self.write("TagResource", self.eks.tag_resource, resourceArn=live["arn"], tags=add)
        self.planned_updates = bodies
        if self.requests and not self.module.check_mode:
            if self.p["wait"]:
                self.wait_for("cluster_active")
            live = self.describe() or live
        return live

    # ---- state: absent ----
    def delete(self, live: dict) -> None:
        groups = self.call("ListNodegroups", self.eks.list_nodegroups, clusterName=self.p["name"]).get("nodegroups")
        if groups:
            self.fail(f"{self.ident} still has nodegroup(s) {', '.join(groups)}: delete them first "
                      "(k8sgpu.nvidia.eks_nodegroup state: absent; playbooks/eks.yml's teardown does it in that order)")
        if live.get("status") != "DELETING":
            self.write("DeleteCluster", self.eks.delete_cluster, name=self.p["name"])
        if self.p["wait"] and not self.module.check_mode:
            self.wait_for("cluster_deleted")

    def run(self):
        p = self.p
        if p["state"] == "present":
            self.validate()  # before any request
        live = self.describe()
        before = plan.compared(live)
        if p["state"] == "absent":
            if live is not None:
                self.delete(live)
            self.module.exit_json(changed=bool(self.requests), requests=self.requests, updates=self.updates,
                                  diff={"before": plain(before), "after": {}})
        self.planned_updates = []
        for warning in plan.exposure_warnings(live, p):
            self.module.warn(warning)
        after_cluster = self.create() if live is None else self.update(live)
        if self.module.check_mode:
            create = next((r["params"] for r in self.requests if r["operation"] == "CreateCluster"), None)
            tags = None
            if live is not None and p["tags"] is not None:
                tags = dict(live.get("tags") or {})
                for r in self.requests:
                    if r["operation"] == "UntagResource":
                        tags = {k: v for k, v in tags.items() if k not in r["params"]["tagKeys"]}
                    elif r["operation"] == "TagResource":
                        tags.update(r["params"]["tags"])
            after = plan.planned(live, create, self.planned_updates, tags)
        else:
            after = plan.compared(after_cluster)
        result = {"requests": self.requests, "updates": self.updates}
        if after_cluster or live:
            result["cluster"] = plain(after_cluster or live)
        self.module.exit_json(changed=bool(self.requests), diff={"before": plain(before), "after": plain(after)},
                              **result)


def main():
    module = aws_module(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "version": {"type": "str"},
            "role_arn": {"type": "str"},
            "subnets": {"type": "list", "elements": "str"},
            "security_groups": {"type": "list", "elements": "str"},
            "endpoint_public_access": {"type": "bool"},
            "endpoint_private_access": {"type": "bool"},
            "public_access_cidrs": {"type": "list", "elements": "str"},
            "logging": {"type": "list", "elements": "str"},
            "authentication_mode": {"type": "str"},
            "bootstrap_cluster_creator_admin_permissions": {"type": "bool"},
            "tags": {"type": "dict"},
            "purge_tags": {"type": "bool", "default": True},
            "wait": {"type": "bool", "default": True},
            "wait_timeout": {"type": "int", "default": 1800},
        },
        supports_check_mode=True,
    )
    Cluster(module).run()


if __name__ == "__main__":
    main()
