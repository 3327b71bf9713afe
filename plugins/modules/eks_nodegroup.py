#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: eks_nodegroup
short_description: Create, update or delete an EKS managed nodegroup for GPUs, with cluster-autoscaler node-template tags
version_added: 1.0.0
description:
  - Creates, updates or deletes an Amazon EKS managed nodegroup (C(CreateNodegroup), C(UpdateNodegroupConfig),
    C(UpdateNodegroupVersion), C(TagResource), C(UntagResource), C(DeleteNodegroup)) and waits with boto3's waiters
    (C(nodegroup_active), C(nodegroup_deleted)) and C(DescribeUpdate).
  - Compares the task with the live nodegroup (C(DescribeNodegroup)) and sends only what differs. Labels and taints
    go in one C(UpdateNodegroupConfig) request with only the keys to add or change and the keys to remove
    (C(addOrUpdateLabels)/C(removeLabels), C(addOrUpdateTaints)/C(removeTaints)), together with C(scalingConfig) and
    C(updateConfig) when they differ. An option left unset is not compared.
  - Fields EKS cannot change in place (O(ami_type), O(capacity_type), O(instance_types), O(subnets), O(node_role),
    O(disk_size), the launch template of O(launch_template) other than its version) fail the task, naming the field,
    the live value and the asked one; nothing is sent.
  - Enum values (O(ami_type), O(capacity_type), the taints' C(effect)) are checked against botocore's EKS service
    model (shapes C(AMITypes), C(CapacityTypes), C(TaintEffect)) before any request, so a value EKS does not know
    fails before anything is created.
  - Before C(CreateNodegroup), O(instance_types) are looked up with EC2 C(DescribeInstanceTypes); a type EC2 does
    not know in the region fails naming it, and nothing is created.
  - Without O(endpoint_url), a region where the installed botocore has no EKS endpoint fails before any request,
    naming the region and the fix (the name, a newer botocore, or O(endpoint_url)).
  - Then, with O(autoscaler_tags), it writes the cluster-autoscaler's node-template tags on the nodegroup's Auto
    Scaling groups (C(DescribeNodegroup) C(resources.autoScalingGroups)), which scaling from zero needs because
    nodegroup labels and tags never reach the group - C(k8s.io/cluster-autoscaler/node-template/label/<key>) per
    label, C(k8s.io/cluster-autoscaler/node-template/taint/<key>) = C(<value>:<Effect>) per taint (Kubernetes'
    effect names), C(k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu) = GPUs per node. All with
    C(PropagateAtLaunch=false) (C(CreateOrUpdateTags), C(DeleteTags)).
  - Which node-template tags it owns - the tag C(k8sgpu.nvidia/managed-template-tags) on each group lists the keys
    it wrote (after C(k8s.io/cluster-autoscaler/node-template/), comma-separated; continued in
    C(k8sgpu.nvidia/managed-template-tags-2) and so on past 256 characters). A listed tag that no longer applies (a
    label removed, a taint removed, no GPUs) is deleted; node-template tags someone else wrote are left alone, or
    taken over when the module wants the same key.
  - Why not M(community.aws.eks_nodegroup) (community.aws 10.0.0, read from its source) - its O(ami_type) choices
    are C(AL2_x86_64), C(AL2_x86_64_GPU), C(AL2_ARM_64), C(CUSTOM), C(BOTTLEROCKET_ARM_64) and
    C(BOTTLEROCKET_x86_64) only, so every AL2023 type and both Bottlerocket NVIDIA types are refused;
    C(validate_taints) sets C(params["taints"] = []) and then indexes that list with C("addOrUpdateTaints"), a
    C(TypeError) on any taint difference (it is called only when DescribeNodegroup's answer has a C(taints) key;
    otherwise taints are not compared at all); C(compare_labels) adds only keys that are not on the nodegroup yet, so a changed
    label value is ignored (additions and removals are sent); C(compare_params) checks C(amiTypes), a field that
    does not exist (the API's is C(amiType)), so an AMI type change is silently ignored; in check mode it reports
    no change for labels, taints and tags that would change; it writes no cluster-autoscaler tags.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.aws
attributes:
  check_mode:
    support: full
    details: Reads the nodegroup, the Auto Scaling groups and the instance types, and returns the requests it would
      send (RV(requests)); sends none.
  diff_mode:
    support: full
    details: Before and after of the compared nodegroup fields and of each Auto Scaling group's node-template tags.
options:
  cluster_name:
    description: The EKS cluster (C(clusterName)).
    type: str
    required: true
  name:
    description: The nodegroup (C(nodegroupName)).
    type: str
    required: true
    aliases: [nodegroup_name]
  state:
    description: V(present) creates or updates the nodegroup, V(absent) deletes it (C(DeleteNodegroup)).
    type: str
    choices: [present, absent]
    default: present
  node_role:
    description:
      - ARN of the nodes' IAM role (CreateNodegroup C(nodeRole)). Needed to create; cannot change.
    type: str
  subnets:
    description: Subnet IDs (CreateNodegroup C(subnets)). Needed to create; cannot change.
    type: list
    elements: str
  ami_type:
    description:
      - AMI type (CreateNodegroup C(amiType)), for GPUs C(AL2023_x86_64_NVIDIA), C(AL2023_ARM_64_NVIDIA),
        C(BOTTLEROCKET_x86_64_NVIDIA) or C(BOTTLEROCKET_ARM_64_NVIDIA); any value of the C(AMITypes) enum of the
        installed botocore's EKS model is accepted. Cannot change. Unset - EKS's default on create, not compared.
    type: str
  capacity_type:
    description:
      - C(ON_DEMAND), C(SPOT) or another value of botocore's C(CapacityTypes) (CreateNodegroup C(capacityType)).
        Cannot change. Unset - EKS's default (C(ON_DEMAND)), not compared.
    type: str
  instance_types:
    description:
      - Instance types (CreateNodegroup C(instanceTypes)), for example C(g4dn.xlarge). Compared as a set. Cannot change.
    type: list
    elements: str
  disk_size:
    description: Root volume size in GiB (CreateNodegroup C(diskSize)). Cannot change.
    type: int
  release_version:
    description:
      - AMI release version (CreateNodegroup C(releaseVersion); on an existing nodegroup UpdateNodegroupVersion
        C(releaseVersion), sent after the configuration update). Unset - the latest on create, not compared.
    type: str
  launch_template:
    description:
      - The EC2 launch template of the nodes (CreateNodegroup C(launchTemplate)), for example one whose user data
        isolates GPUs (the C(k8sgpu.nvidia.eks_gpu_user_data) filter, as C(playbooks/eks.yml) does). EKS refuses
        some fields in it that the nodegroup sets - an C(ImageId) with O(ami_type), C(InstanceType) with
        O(instance_types) - and O(disk_size) with any launch template (refused here before any request; give the
        root volume in the template's block device mappings).
      - The template cannot be added, removed or replaced by another in place (the task fails naming the live one);
        a different O(launch_template.version) is sent with C(UpdateNodegroupVersion) C(launchTemplate) (with
        O(release_version) when that changes too). Unset - not compared.
    type: dict
    version_added: 1.1.0
    suboptions:
      id:
        description: The template's ID (C(lt-...)). Give O(launch_template.id) or O(launch_template.name).
        type: str
      name:
        description: The template's name.
        type: str
      version:
        description:
          - The version number (M(amazon.aws.ec2_launch_template) returns it as C(latest_version)). Unset - the
            template's default version on create, not compared.
        type: str
  force_update_version:
    description: UpdateNodegroupVersion C(force) - update even when pods cannot be drained (disruption budgets).
    type: bool
    default: false
  scaling:
    description:
      - Nodegroup sizes (CreateNodegroup and UpdateNodegroupConfig C(scalingConfig)). 0 is allowed for O(scaling.min_size)
        and O(scaling.desired_size), so that the nodegroup scales from zero. Only the sizes given are compared.
    type: dict
    suboptions:
      min_size:
        description: C(minSize).
        type: int
      max_size:
        description: C(maxSize), 1 or more.
        type: int
      desired_size:
        description:
          - C(desiredSize). Leave it unset when the cluster-autoscaler owns the size - on create it is then
            O(scaling.min_size), later it is not compared (and kept inside the new bounds when those change).
        type: int
  labels:
    description:
      - Kubernetes labels of the nodes (CreateNodegroup C(labels); UpdateNodegroupConfig C(labels.addOrUpdateLabels)
        and C(labels.removeLabels)). The exact set - live labels not given are removed. Unset - not compared.
    type: dict
  taints:
    description:
      - Kubernetes taints of the nodes (CreateNodegroup C(taints); UpdateNodegroupConfig C(taints.addOrUpdateTaints)
        and C(taints.removeTaints)). The exact set, one per key and effect; live taints not given are removed.
        Unset - not compared.
    type: list
    elements: dict
    suboptions:
      key:
        description: C(key).
        type: str
        required: true
      value:
        description: C(value), may be empty.
        type: str
      effect:
        description:
          - C(effect) - EKS's C(NO_SCHEDULE), C(NO_EXECUTE), C(PREFER_NO_SCHEDULE), or Kubernetes' C(NoSchedule),
            C(NoExecute), C(PreferNoSchedule), which are sent as EKS's.
        type: str
        required: true
  tags:
    description: Tags of the nodegroup resource (CreateNodegroup C(tags); TagResource, UntagResource). They do not reach
      the Auto Scaling groups or the instances.
    type: dict
  purge_tags:
    description: Remove nodegroup tags not in O(tags) (only when O(tags) is given).
    type: bool
    default: true
  update_config:
    description: How many nodes a version update replaces at once (CreateNodegroup and UpdateNodegroupConfig C(updateConfig)).
    type: dict
    suboptions:
      max_unavailable:
        description: C(maxUnavailable), a number of nodes.
        type: int
      max_unavailable_percentage:
        description: C(maxUnavailablePercentage), 1 to 100.
        type: int
  accelerator:
    description:
      - Value of the C(k8s.amazonaws.com/accelerator) label, for example C(nvidia-tesla-t4). Added to the nodegroup's
        labels (with O(labels) unset, only this key is managed) and so to the node-template tags. The
        cluster-autoscaler's AWS provider knows GPU nodes by this label and waits for their GPUs to be allocatable
        instead of starting a second node while the device plugin starts.
      - Unset, with O(autoscaler_tags) and no such key in O(labels) - derived from the instance types' NVIDIA GPUs
        (EC2 DescribeInstanceTypes C(GpuInfo.Gpus[].Name), read for O(gpu_count) as well) - C(T4) gives
        C(nvidia-tesla-t4), C(V100) C(nvidia-tesla-v100), C(A100) C(nvidia-tesla-a100), C(A10G) C(nvidia-a10g),
        C(L4) C(nvidia-l4), C(L40S) C(nvidia-l40s), C(H100) C(nvidia-h100), another name C(nvidia-<name>) in lower
        case; none for instance types without NVIDIA GPUs or with different GPUs (with a warning).
    type: str
  autoscaler_tags:
    description:
      - Write the cluster-autoscaler's node-template tags on the nodegroup's Auto Scaling groups. An C(ACTIVE)
        nodegroup whose listed group does not exist fails the task; one still being created without O(wait) gets
        a warning (run again).
    type: bool
    default: true
  gpu_count:
    description:
      - GPUs per node for the C(resources/nvidia.com/gpu) node-template tag. Unset - read from EC2
        DescribeInstanceTypes C(GpuInfo) of the nodegroup's instance types (the smallest count when they differ,
        with a warning). 0 - no GPU tag.
    type: int
  wait:
    description: Wait until the nodegroup is C(ACTIVE) (or deleted), and until each update has finished.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait in all, for O(wait).
    type: int
    default: 1800
notes:
  - IAM permissions - C(eks:DescribeNodegroup), C(eks:CreateNodegroup), C(eks:UpdateNodegroupConfig),
    C(eks:UpdateNodegroupVersion), C(eks:DescribeUpdate), C(eks:TagResource), C(eks:UntagResource),
    C(eks:DeleteNodegroup), C(iam:PassRole) on O(node_role); with O(launch_template),
    C(ec2:DescribeLaunchTemplateVersions), C(ec2:RunInstances) and C(ec2:CreateTags) on the template; for the tags C(autoscaling:DescribeAutoScalingGroups),
    C(autoscaling:CreateOrUpdateTags), C(autoscaling:DeleteTags), and C(ec2:DescribeInstanceTypes) unless
    O(gpu_count) is set and the nodegroup exists (it is always read before a create that gives O(instance_types)).
  - Remote access and node repair are not managed. A launch template is referred to (O(launch_template)), not
    made - M(amazon.aws.ec2_launch_template) makes it.
  - Tested against moto's HTTP server, not against EKS; see the collection's README for what that proves.
"""

EXAMPLES = r"""
- name: GPU nodegroup that scales from zero, on AL2023 with NVIDIA drivers
  k8sgpu.nvidia.eks_nodegroup:
    cluster_name: train
    name: gpu-t4
    region: eu-west-1
    node_role: arn:aws:iam::123456789012:role/eks-nodes
    subnets: [subnet-0a1b2c3d, subnet-4e5f6a7b]
    ami_type: AL2023_x86_64_NVIDIA
    capacity_type: SPOT
    instance_types: [g4dn.xlarge]
    scaling:
      min_size: 0
      max_size: 4
    labels:
      role: train-gpu
    taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule
    accelerator: nvidia-tesla-t4
    tags:
      team: ml

- name: A launch template whose user data isolates GPUs (only pods the device plugin allocated GPUs to get them)
  amazon.aws.ec2_launch_template:
    name: train-gpu-t4
    region: eu-west-1
    user_data: "{{ 'AL2023_x86_64_NVIDIA' | k8sgpu.nvidia.eks_gpu_user_data | b64encode }}"
  register: gpu_template

- name: The nodegroup's nodes start from it
  k8sgpu.nvidia.eks_nodegroup:
    cluster_name: train
    name: gpu-t4
    region: eu-west-1
    node_role: arn:aws:iam::123456789012:role/eks-nodes
    subnets: [subnet-0a1b2c3d, subnet-4e5f6a7b]
    ami_type: AL2023_x86_64_NVIDIA
    instance_types: [g4dn.xlarge]
    launch_template:
      id: "{{ gpu_template.template.launch_template_id }}"
      version: "{{ gpu_template.latest_version }}"
    scaling:
      min_size: 0
      max_size: 4

- name: Delete it
  k8sgpu.nvidia.eks_nodegroup:
    cluster_name: train
    name: gpu-t4
    region: eu-west-1
    state: absent
"""

RETURN = r"""
nodegroup:
  description: The nodegroup as DescribeNodegroup returns it (the API's camelCase field names), after the changes.
  returned: when it exists (in check mode, the live one)
  type: dict
  sample: {"nodegroupName": "gpu-t4", "status": "ACTIVE", "amiType": "AL2023_x86_64_NVIDIA",
           "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": 0}, "labels": {"role": "train-gpu"}}
requests:
  description: The write requests sent (in check mode, that would be sent), in order, each with its parameters.
  returned: always
  type: list
  elements: dict
  sample: [{"operation": "UpdateNodegroupConfig",
            "params": {"labels": {"addOrUpdateLabels": {"role": "train-gpu"}}}}]
updates:
  description: The EKS updates started (DescribeUpdate's C(update)), with their final status.
  returned: always
  type: list
  elements: dict
  sample: [{"id": "5e6d...", "type": "ConfigUpdate", "status": "Successful", "errors": []}]
autoscaling_groups:
  description:
    - Per Auto Scaling group, the node-template tags (and marker tags) after the task - C(tags), those written -
      C(set), and the keys deleted - C(deleted).
  returned: with O(autoscaler_tags) and O(state=present)
  type: dict
  sample: {"eks-gpu-t4-1ac6...": {"set": {"k8s.io/cluster-autoscaler/node-template/label/role": "train-gpu"},
           "deleted": [], "tags": {"k8s.io/cluster-autoscaler/node-template/label/role": "train-gpu"}}}
template_tags:
  description: The node-template tags wanted on every Auto Scaling group of the nodegroup.
  returned: with O(autoscaler_tags) and O(state=present)
  type: dict
  sample: {"k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu": "1"}
gpu_count:
  description: GPUs per node used for the node-template tag (O(gpu_count), or from DescribeInstanceTypes).
  returned: with O(autoscaler_tags) and O(state=present)
  type: int
  sample: 1
resource_actions:
  description:
    - The AWS operations the task called, C(<service>:<Operation>), sorted and each once - for a least privilege IAM
      policy.
  returned: with O(debug_botocore_endpoint_logs=true), also when the task fails
  type: list
  elements: str
  sample: ["ec2:DescribeInstanceTypes", "eks:CreateNodegroup", "eks:DescribeNodegroup"]
  version_added: 1.1.0
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_nodegroup as eks
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

COMPARED = ("amiType", "capacityType", "instanceTypes", "subnets", "nodeRole", "diskSize", "releaseVersion",
            "launchTemplate", "scalingConfig", "updateConfig", "labels", "taints", "tags")


def compared(ng: dict | None) -> dict:
    """The fields of a nodegroup that the module compares, for diff mode."""
    if not ng:
        return {}
    out = {k: ng[k] for k in COMPARED if k in ng}
    if "taints" in out:
        out["taints"] = eks.live_taints(ng)
    return out


class Nodegroup(EksRun):
    """One module run."""

    def __init__(self, module):
        super().__init__(module, f"nodegroup {module.params['name']} of EKS cluster {module.params['cluster_name']}")
        self.type_info: dict[str, dict] = {}
        self.creating = False
        self.key = {"clusterName": self.p["cluster_name"], "nodegroupName": self.p["name"]}

    # ---- validation (no request) ----
    def validate(self) -> dict:
        model = self.aws.service_model("eks")
        enums = {s: model.shape_for(s).enum for s in ("AMITypes", "CapacityTypes", "TaintEffect")}
        want: dict = {}
        try:
            eks.check_enum("ami_type", self.p["ami_type"], enums["AMITypes"], "AMITypes")
            eks.check_enum("capacity_type", self.p["capacity_type"], enums["CapacityTypes"], "CapacityTypes")
            want["taints"] = (None if self.p["taints"] is None
                              else eks.normalize_taints(self.p["taints"], enums["TaintEffect"]))
            want["labels"] = eks.desired_labels(self.p["labels"], self.p["accelerator"])
            want["scaling"] = eks.scaling_config(self.p["scaling"])
            want["update_config"] = eks.update_config(self.p["update_config"])
            want["launch_template"] = eks.launch_template(self.p["launch_template"], self.p["disk_size"])
        except eks.PlanError as e:
            self.fail(f"{self.ident}: {e}")
        if self.p["gpu_count"] is not None and self.p["gpu_count"] < 0:
            self.fail(f"{self.ident}: gpu_count is {self.p['gpu_count']}; give 0 or more")
        return want

    # ---- reading and waiting ----
    def describe(self) -> dict | None:
        try:
            return self.eks.describe_nodegroup(**self.key)["nodegroup"]
        except (ClientError, BotoCoreError) as e:
            if error_code(e) == "ResourceNotFoundException":
                return None
            self.fail(describe_error(f"{self.ident}: DescribeNodegroup", e))

    def wait_for(self, waiter_name: str):
        try:
            self.eks.get_waiter(waiter_name).wait(**self.key, WaiterConfig=self.waiter_config())
        except WaiterError as e:
            ng = (e.last_response or {}).get("nodegroup", {})
            issues = (ng.get("health") or {}).get("issues") or []
            self.fail(f"{self.ident}: {waiter_name} did not succeed within wait_timeout={self.p['wait_timeout']}s: "
                      f"{e}; status {ng.get('status', 'unknown')}"
                      + (f"; health issues: {plain(issues)}" if issues else ""))

    def started(self, response: dict | None):
        """Record (and with wait, follow) the update a request started."""
        if response is None:
            return
        update = response.get("update") or {}
        self.updates.append(plain(self.follow_update(update, self.p["wait"], name=self.p["cluster_name"],
                                                     nodegroupName=self.p["name"])))

    # ---- state: present ----
    def create(self, want: dict) -> dict | None:
        missing = [o for o in ("node_role", "subnets") if not self.p[o]]
        if missing:
            self.fail(f"{self.ident} does not exist; to create it, give {' and '.join(missing)}")
        req = {**self.key, "nodeRole": self.p["node_role"], "subnets": self.p["subnets"]}
        optional = {"amiType": self.p["ami_type"], "capacityType": self.p["capacity_type"],
                    "instanceTypes": self.p["instance_types"], "diskSize": self.p["disk_size"],
                    "releaseVersion": self.p["release_version"], "labels": want["labels"],
                    "taints": want["taints"], "tags": self.p["tags"], "updateConfig": want["update_config"] or None,
                    "launchTemplate": want["launch_template"]}
        req.update({k: v for k, v in optional.items() if v is not None})
        scaling = dict(want["scaling"])
        if "desiredSize" not in scaling and "minSize" in scaling:
            scaling["desiredSize"] = scaling["minSize"]  # from zero when min_size is 0
        if scaling:
            req["scalingConfig"] = scaling
        self.write("CreateNodegroup", self.eks.create_nodegroup, **req)
        if self.module.check_mode:
            return None
        if self.p["wait"]:
            self.wait_for("nodegroup_active")
        return self.describe()

    def update(self, ng: dict, want: dict) -> dict:
        if ng.get("status") in ("CREATING", "UPDATING") and self.p["wait"] and not self.module.check_mode:
            self.wait_for("nodegroup_active")
            ng = self.describe() or ng
        if ng.get("status") == "DELETING":
            self.fail(f"{self.ident} is being deleted; run again when it is gone")
        changes = eks.immutable_changes(ng, {o: self.p[o] for o in eks.IMMUTABLE})
        lt_changes, lt_version = eks.launch_template_plan(ng, want["launch_template"])
        changes += lt_changes
        if changes:
            self.fail(eks.immutable_message(self.p["cluster_name"], self.p["name"], changes),
                      nodegroup=plain(ng))

        config = {}
        labels = want["labels"]
        if labels is not None and self.p["labels"] is None:  # accelerator alone: manage that key only
            labels = {**(ng.get("labels") or {}), **labels}
        if labels is not None:
            upd = eks.label_update(ng.get("labels") or {}, labels)
            if upd:
                config["labels"] = upd
        if want["taints"] is not None:
            upd = eks.taint_update(eks.live_taints(ng), want["taints"])
            if upd:
                config["taints"] = upd
        if want["scaling"]:
            upd = eks.scaling_update(ng.get("scalingConfig"), want["scaling"])
            if upd:
                config["scalingConfig"] = upd
        upd = eks.update_config_update(ng.get("updateConfig"), want["update_config"])
        if upd:
            config["updateConfig"] = upd
        if config:
            self.started(self.write("UpdateNodegroupConfig", self.eks.update_nodegroup_config, **self.key, **config))

        if self.p["tags"] is not None:
            add, remove = tag_update(ng.get("tags") or {}, self.p["tags"], self.p["purge_tags"])
            if remove:
                self.write("UntagResource", self.eks.untag_resource, resourceArn=ng["nodegroupArn"], tagKeys=remove)
            if add:
                self.write("TagResource", self.eks.tag_resource, resourceArn=ng["nodegroupArn"], tags=add)

        version = {}
        if self.p["release_version"] and self.p["release_version"] != ng.get("releaseVersion"):
            version["releaseVersion"] = self.p["release_version"]
        if lt_version:
            version["launchTemplate"] = lt_version
        if version:
            self.started(self.write("UpdateNodegroupVersion", self.eks.update_nodegroup_version, **self.key,
                                    **version, force=self.p["force_update_version"]))
        if self.requests and not self.module.check_mode:
            if self.p["wait"]:
                self.wait_for("nodegroup_active")
            ng = self.describe() or ng
        return ng

    def planned(self, ng: dict | None, want: dict) -> dict:
        """The compared fields as they will be after the task (for diff mode in check mode)."""
        after = compared(ng)
        if ng is None:
            req = next((r["params"] for r in self.requests if r["operation"] == "CreateNodegroup"), {})
            return compared({k: v for k, v in req.items() if k not in self.key})
        for r in self.requests:
            prm = r["params"]
            if r["operation"] == "UpdateNodegroupConfig":
                if "labels" in prm:
                    lab = {k: v for k, v in after.get("labels", {}).items()
                           if k not in prm["labels"].get("removeLabels", [])}
                    lab.update(prm["labels"].get("addOrUpdateLabels", {}))
                    after["labels"] = lab
                if "taints" in prm:
                    after["taints"] = want["taints"]
                for f in ("scalingConfig", "updateConfig"):
                    if f in prm:
                        after[f] = prm[f]
            elif r["operation"] == "TagResource":
                after["tags"] = {**after.get("tags", {}), **prm["tags"]}
            elif r["operation"] == "UntagResource":
                after["tags"] = {k: v for k, v in after.get("tags", {}).items() if k not in prm["tagKeys"]}
            elif r["operation"] == "UpdateNodegroupVersion":
                if "releaseVersion" in prm:
                    after["releaseVersion"] = prm["releaseVersion"]
                if "launchTemplate" in prm:
                    after["launchTemplate"] = {**after.get("launchTemplate", {}), **prm["launchTemplate"]}
        return after

    # ---- cluster-autoscaler node-template tags ----
    def instance_gpus(self, instance_types: list[str]) -> dict[str, dict]:
        """NVIDIA GPUs of each instance type (EC2 DescribeInstanceTypes GpuInfo): {type: {count, names}}, read once.

        An instance type EC2 does not know fails the task naming it (before CreateNodegroup, where it is called
        first)."""
        missing = [t for t in instance_types if t not in self.type_info]
        if not missing:
            return self.type_info
        ec2 = self.aws.client("ec2")
        try:
            for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=missing):
                for it in page["InstanceTypes"]:
                    gpus = [g for g in (it.get("GpuInfo") or {}).get("Gpus") or []
                            if g.get("Manufacturer", "NVIDIA") == "NVIDIA"]
                    self.type_info[it["InstanceType"]] = {"count": sum(g.get("Count", 0) for g in gpus),
                                                          "names": [g["Name"] for g in gpus if g.get("Name")]}
        except (ClientError, BotoCoreError) as e:
            if error_code(e) == "InvalidInstanceType":
                self.fail(describe_error(f"{self.ident}: instance_types {', '.join(instance_types)}: EC2 "
                                         f"DescribeInstanceTypes in {self.aws.session.region_name}", e)
                          + "; give instance types that exist in the region (aws ec2 describe-instance-type-offerings)"
                          + ("; nothing was created" if self.creating else ""))
            self.fail(describe_error(f"{self.ident}: EC2 DescribeInstanceTypes {', '.join(missing)}", e))
        unknown = [t for t in missing if t not in self.type_info]
        if unknown:
            self.fail(f"{self.ident}: instance_types {', '.join(unknown)}: EC2 DescribeInstanceTypes in "
                      f"{self.aws.session.region_name} does not return them; give instance types that exist there")
        return self.type_info

    def derived_accelerator(self, instance_types: list[str]) -> str | None:
        """The k8s.amazonaws.com/accelerator value from the instance types' GPUs (None without NVIDIA GPUs)."""
        info = self.instance_gpus(instance_types)
        value, warning = eks.accelerator_for(instance_types, {t: info[t]["names"] for t in instance_types})
        if warning:
            self.module.warn(warning)
        return value

    def gpu_count(self, instance_types: list[str]) -> int:
        if self.p["gpu_count"] is not None:
            return self.p["gpu_count"]
        if not instance_types:
            return 0
        info = {t: v["count"] for t, v in self.instance_gpus(instance_types).items()}
        count, warning = eks.gpu_count_for(instance_types, info)
        if warning:
            self.module.warn(warning)
        return count

    def sync_asg_tags(self, ng: dict | None, after: dict) -> tuple[dict, dict, int, dict, dict]:
        """(per-group result, wanted template tags, gpu count, diff before, diff after)."""
        taints = after.get("taints") or []
        dup = eks.duplicate_taint_keys(taints)
        if dup:
            self.module.warn(f"taints {', '.join(dup)} have more than one effect; a node-template tag holds one "
                             "(the last) per key")
        count = self.gpu_count(after.get("instanceTypes") or [])
        want = eks.template_tags(after.get("labels") or {}, taints, count)
        groups = [g["name"] for g in ((ng or {}).get("resources") or {}).get("autoScalingGroups") or []]
        if not groups:
            if ng is not None and not self.module.check_mode:
                self.module.warn(f"{self.ident} has no Auto Scaling group yet (status {ng.get('status')}); "
                                 "the node-template tags are not written: run the task again when it is ACTIVE")
            return {}, want, count, {}, {"(its Auto Scaling groups, once created)": want}
        asg = self.aws.client("autoscaling")
        found: dict[str, dict] = {}
        try:
            for page in asg.get_paginator("describe_auto_scaling_groups").paginate(AutoScalingGroupNames=groups):
                for g in page["AutoScalingGroups"]:
                    found[g["AutoScalingGroupName"]] = {t["Key"]: t["Value"] for t in g.get("Tags") or []}
        except (ClientError, BotoCoreError) as e:
            self.fail(describe_error(f"{self.ident}: DescribeAutoScalingGroups {', '.join(groups)}", e))
        missing = [g for g in groups if g not in found]
        if missing:
            msg = (f"{self.ident} lists Auto Scaling group(s) {', '.join(missing)} that DescribeAutoScalingGroups "
                   f"does not return")
            if ng.get("status") == "ACTIVE":
                self.fail(msg + "; the node-template tags cannot be written (autoscaler_tags: false to skip them)")
            self.module.warn(msg + f" (nodegroup status {ng.get('status')}); run again when it is ACTIVE")
        result, before_d, after_d = {}, {}, {}

        def ours(tags):
            return {k: v for k, v in tags.items() if k.startswith(eks.TEMPLATE_PREFIX) or k in eks.marker_keys(tags)}

        for name in groups:
            if name not in found:
                continue
            live = found[name]
            put, delete, tags_after = eks.asg_tag_plan(live, want)
            if delete:
                self.write("DeleteTags", asg.delete_tags, Tags=[
                    {"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": k} for k in delete])
            if put:
                self.write("CreateOrUpdateTags", asg.create_or_update_tags, Tags=[
                    {"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": k, "Value": v,
                     "PropagateAtLaunch": False} for k, v in put.items()])
            result[name] = {"set": put, "deleted": delete, "tags": ours(tags_after)}
            before_d[name] = ours(live)
            after_d[name] = ours(tags_after)
        return result, want, count, before_d, after_d

    # ---- main ----
    def run(self):
        p = self.p
        if p["state"] == "absent":
            ng = self.describe()
            if ng is not None:
                if ng.get("status") != "DELETING":
                    self.write("DeleteNodegroup", self.eks.delete_nodegroup, **self.key)
                if p["wait"] and not self.module.check_mode:
                    self.wait_for("nodegroup_deleted")
            self.module.exit_json(changed=bool(self.requests), requests=self.requests, updates=self.updates,
                                  diff={"before": compared(ng), "after": {}} if ng else {"before": {}, "after": {}})
        want = self.validate()
        ng = self.describe()
        before = compared(ng)
        instance_types = p["instance_types"] or (ng or {}).get("instanceTypes") or []
        if ng is None and p["instance_types"]:
            self.creating = True
            self.instance_gpus(p["instance_types"])  # an unknown type fails here, before CreateNodegroup
        if (p["accelerator"] is None and p["autoscaler_tags"] and instance_types
                and eks.ACCELERATOR_LABEL not in (p["labels"] or {})):
            accelerator = self.derived_accelerator(instance_types)
            if accelerator:
                want["labels"] = eks.desired_labels(p["labels"], accelerator)
        if ng is None:
            ng_after = self.create(want)
        else:
            ng_after = self.update(ng, want)
        after = compared(ng_after) if ng_after is not None and not self.module.check_mode else self.planned(ng, want)
        result = {"requests": self.requests, "updates": self.updates}
        diff_before, diff_after = dict(before), dict(after)
        if p["autoscaler_tags"]:
            groups, template, count, asg_before, asg_after = self.sync_asg_tags(ng_after or ng, after)
            result.update(autoscaling_groups=groups, template_tags=template, gpu_count=count)
            diff_before["autoscaling_group_tags"] = asg_before
            diff_after["autoscaling_group_tags"] = asg_after
        if ng_after or ng:
            result["nodegroup"] = plain(ng_after or ng)
        self.module.exit_json(changed=bool(self.requests), diff={"before": plain(diff_before),
                                                                 "after": plain(diff_after)}, **result)


def main():
    module = aws_module(
        argument_spec={
            "cluster_name": {"type": "str", "required": True},
            "name": {"type": "str", "required": True, "aliases": ["nodegroup_name"]},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "node_role": {"type": "str"},
            "subnets": {"type": "list", "elements": "str"},
            "ami_type": {"type": "str"},
            "capacity_type": {"type": "str"},
            "instance_types": {"type": "list", "elements": "str"},
            "disk_size": {"type": "int"},
            "release_version": {"type": "str"},
            "force_update_version": {"type": "bool", "default": False},
            "launch_template": {"type": "dict", "options": {
                "id": {"type": "str"},
                "name": {"type": "str"},
                "version": {"type": "str"},
            }, "mutually_exclusive": [["id", "name"]], "required_one_of": [["id", "name"]]},
            "scaling": {"type": "dict", "options": {
                "min_size": {"type": "int"},
                "max_size": {"type": "int"},
                "desired_size": {"type": "int"},
            }},
            "labels": {"type": "dict"},
            "taints": {"type": "list", "elements": "dict", "options": {
                "key": {"type": "str", "required": True, "no_log": False},
                "value": {"type": "str"},
                "effect": {"type": "str", "required": True},
            }},
            "tags": {"type": "dict"},
            "purge_tags": {"type": "bool", "default": True},
            "update_config": {"type": "dict", "options": {
                "max_unavailable": {"type": "int"},
                "max_unavailable_percentage": {"type": "int"},
            }, "mutually_exclusive": [["max_unavailable", "max_unavailable_percentage"]]},
            "accelerator": {"type": "str"},
            "autoscaler_tags": {"type": "bool", "default": True},
            "gpu_count": {"type": "int"},
            "wait": {"type": "bool", "default": True},
            "wait_timeout": {"type": "int", "default": 1800},
        },
        supports_check_mode=True,
    )
    Nodegroup(module).run()


if __name__ == "__main__":
    main()
