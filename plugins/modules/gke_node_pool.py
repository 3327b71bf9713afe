#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gke_node_pool
short_description: Create, update or delete a GKE node pool with GPUs (driver install, sharing, MIG, spot, scale from zero)
version_added: 1.0.0
description:
  - Creates, updates or deletes a node pool of a Google Kubernetes Engine cluster through Google's own client,
    google-cloud-container's C(ClusterManagerClient) over REST (v1 API, C(projects.locations.clusters.nodePools)) -
    C(create_node_pool), C(update_node_pool), C(set_node_pool_autoscaling), C(set_node_pool_size),
    C(delete_node_pool) - and waits for each long-running operation (C(get_operation)) until it is C(DONE), failing
    with the operation's C(error) when it has one.
  - Compares the task with the live pool (C(get_node_pool)) and sends only what differs, through the request GKE
    has for it - labels, taints, node locations, and machine type/disk type/disk size each in one
    C(UpdateNodePoolRequest) (carrying the pool's own C(node_version), so nothing is upgraded, and its
    C(image_type)); autoscaling in C(SetNodePoolAutoscalingRequest); the size in C(SetNodePoolSizeRequest). One
    operation at a time, as GKE allows. An option left unset is not compared.
  - The current size is read from the pool's managed instance groups (C(instance_group_urls), Compute API
    C(instanceGroupManagers.get) C(targetSize)), because the node pool resource has no current node count.
  - GKE adds the taint C(nvidia.com/gpu=present:NoSchedule) to every GPU node pool itself; the module never sends
    it and never reports it as a difference.
  - Fields GKE cannot change on an existing pool (O(accelerator) and its sub-options but
    O(accelerator.gpu_driver_version), O(spot), O(preemptible), O(service_account), O(oauth_scopes)) fail the task
    naming the field, the live and the asked value, before any write; with O(recreate=true) the pool is deleted and
    created again instead.
  - A changed O(accelerator.gpu_driver_version) on an existing pool is sent in place, in
    C(UpdateNodePoolRequest.accelerators) (the pool's own accelerator type, count, partition and sharing with the
    new C(gpu_driver_installation_config)), as C(gcloud container node-pools update --accelerator
    type=...,count=...,gpu-driver-version=...) does.
  - Before a pool is created, the accelerator type is checked against the Compute API's C(acceleratorTypes.list)
    of each zone of the pool (O(node_locations), else the zone of a zonal O(location), else the cluster's
    C(locations) from C(get_cluster)); a type not offered in a zone fails naming the zone and the types it offers,
    before any write. O(check_accelerator_type=false) skips it.
  - O(accelerator.gpu_sharing_strategy) without O(accelerator.max_shared_clients_per_gpu) fails before any request
    (GKE requires both).
  - Enum values (O(accelerator.gpu_driver_version), O(accelerator.gpu_sharing_strategy),
    O(autoscaling.location_policy), the taints' C(effect)) are checked against the proto enums of the installed
    google-cloud-container (C(GPUDriverInstallationConfig.GPUDriverVersion), C(GPUSharingConfig.GPUSharingStrategy),
    C(NodePoolAutoscaling.LocationPolicy), C(NodeTaint.Effect)) before any request.
  - Why not M(google.cloud.gcp_container_node_pool) (google.cloud 1.10.2, read from its source) - its options have
    no C(spot), no C(gpuDriverInstallationConfig), no C(gpuSharingConfig) or C(gpuPartitionSize), no
    C(locationPolicy) and no C(totalMinNodeCount)/C(totalMaxNodeCount); and its update sends the whole NodePool
    resource (C(name), C(config), C(initialNodeCount), C(autoscaling), ...) in a C(PUT) to the node pool's URL, where
    the v1 API expects an C(UpdateNodePoolRequest) (fields C(nodeVersion), C(imageType), C(labels), ...), so any
    update is refused for unknown fields, and autoscaling or size never change through it.
  - Tested against a contract server (tests/support/k8sgpu_testlib/gke_contract_server.py) that parses every request into
    google-cloud-container's own proto types, rejecting unknown fields and enum values; that proves the requests are
    well-formed and the module idempotent, not that GKE accepts them.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.gcp
attributes:
  check_mode:
    support: full
    details: Reads the pool and its instance groups and returns the requests it would send (RV(requests)); sends no
      write.
  diff_mode:
    support: full
    details: Before and after of the compared fields (GKE's GPU taint left out).
options:
  cluster:
    description: The cluster's name (C(clusters/<cluster>)).
    type: str
    required: true
  name:
    description: The node pool's name (C(NodePool.name), C(nodePools/<name>)).
    type: str
    required: true
  state:
    description: V(present) creates or updates the pool, V(absent) deletes it (C(delete_node_pool)).
    type: str
    choices: [present, absent]
    default: present
  machine_type:
    description:
      - C(NodeConfig.machine_type), for example C(n1-standard-4) (T4, V100, P4) or C(a2-highgpu-1g) (A100), or
        C(g2-standard-4) (L4). Changed in place (C(UpdateNodePoolRequest.machine_type); GKE recreates the nodes).
    type: str
  disk_size_gb:
    description: C(NodeConfig.disk_size_gb). Changed in place (C(UpdateNodePoolRequest.disk_size_gb)).
    type: int
  disk_type:
    description: C(NodeConfig.disk_type), for example C(pd-balanced). Changed in place (C(UpdateNodePoolRequest.disk_type)).
    type: str
  image_type:
    description:
      - C(NodeConfig.image_type), for example C(COS_CONTAINERD) or C(UBUNTU_CONTAINERD); it decides which driver
        installer the M(k8sgpu.nvidia.gke_driver_installer) role applies. Changed in place
        (C(UpdateNodePoolRequest.image_type)).
    type: str
  service_account:
    description: C(NodeConfig.service_account), the nodes' service account email. Cannot change.
    type: str
  oauth_scopes:
    description: C(NodeConfig.oauth_scopes), compared as a set. Cannot change.
    type: list
    elements: str
  spot:
    description: C(NodeConfig.spot), Spot VMs. Cannot change.
    type: bool
  preemptible:
    description: C(NodeConfig.preemptible), preemptible VMs (older clusters; prefer O(spot)). Cannot change.
    type: bool
  accelerator:
    description:
      - The GPUs of each node, C(NodeConfig.accelerators[0]) (C(AcceleratorConfig)). Only the sub-options given are
        compared. Cannot change, but for O(accelerator.gpu_driver_version).
    type: dict
    suboptions:
      type:
        description: C(accelerator_type), for example C(nvidia-tesla-t4), C(nvidia-l4), C(nvidia-tesla-a100).
        type: str
        required: true
      count:
        description: C(accelerator_count), GPUs per node.
        type: int
        default: 1
      gpu_driver_version:
        description:
          - C(gpu_driver_installation_config.gpu_driver_version) - C(INSTALLATION_DISABLED) (install the driver
            yourself, for example with the M(k8sgpu.nvidia.gke_driver_installer) role), C(DEFAULT) or C(LATEST)
            (GKE installs it). Unset - GKE's default for the cluster version (older versions install nothing).
          - Changed in place on an existing pool (C(UpdateNodePoolRequest.accelerators)); GKE applies it to new
            nodes.
        type: str
      gpu_partition_size:
        description: C(gpu_partition_size), a MIG partition such as C(1g.5gb) (A100, H100).
        type: str
      gpu_sharing_strategy:
        description:
          - C(gpu_sharing_config.gpu_sharing_strategy), C(TIME_SHARING) or C(MPS). Needs
            O(accelerator.max_shared_clients_per_gpu).
        type: str
      max_shared_clients_per_gpu:
        description: C(gpu_sharing_config.max_shared_clients_per_gpu), the containers that share one GPU (1 or more).
        type: int
  labels:
    description:
      - Kubernetes labels of the nodes (C(NodeConfig.labels); C(UpdateNodePoolRequest.labels), which replaces them).
        The exact set. Unset - not compared.
    type: dict
  taints:
    description:
      - Kubernetes taints of the nodes (C(NodeConfig.taints); C(UpdateNodePoolRequest.taints), which replaces them).
        The exact set, GKE's own C(nvidia.com/gpu=present:NoSchedule) left out. Unset - not compared.
    type: list
    elements: dict
    suboptions:
      key:
        description: C(key).
        type: str
        required: true
      value:
        description: C(value).
        type: str
      effect:
        description: GKE's C(NO_SCHEDULE), C(PREFER_NO_SCHEDULE), C(NO_EXECUTE), or Kubernetes' C(NoSchedule), ...
        type: str
        required: true
  node_locations:
    description:
      - Zones of the nodes (C(NodePool.locations); C(UpdateNodePoolRequest.locations)). Compared as a set. Unset -
        the cluster's zones on create, not compared.
    type: list
    elements: str
  node_count:
    description:
      - Nodes per zone. On create C(NodePool.initial_node_count); later compared with each instance group's
        C(targetSize) and set with C(SetNodePoolSizeRequest.node_count). Leave it unset when the autoscaler owns
        the size; a create then starts with O(autoscaling.min_node_count) (0 for scale from zero).
    type: int
  autoscaling:
    description:
      - C(NodePool.autoscaling) (C(NodePoolAutoscaling); C(SetNodePoolAutoscalingRequest)). Per-zone
        (O(autoscaling.min_node_count), O(autoscaling.max_node_count)) and whole-pool
        (O(autoscaling.total_min_node_count), O(autoscaling.total_max_node_count)) limits exclude each other.
    type: dict
    suboptions:
      enabled:
        description: C(enabled); true unless set to false.
        type: bool
      min_node_count:
        description: C(min_node_count), per zone; 0 scales from zero.
        type: int
      max_node_count:
        description: C(max_node_count), per zone.
        type: int
      total_min_node_count:
        description: C(total_min_node_count), for the whole pool.
        type: int
      total_max_node_count:
        description: C(total_max_node_count), for the whole pool.
        type: int
      location_policy:
        description: C(location_policy), C(BALANCED) or C(ANY) (ANY suits spot GPUs).
        type: str
  recreate:
    description: Delete and create the pool when a field that cannot change differs, instead of failing.
    type: bool
    default: false
  check_accelerator_type:
    description:
      - Before creating the pool, check that O(accelerator.type) is offered in each of its zones (Compute API
        C(acceleratorTypes.list), permission C(compute.acceleratorTypes.list)). The Compute API is
        C(https://compute.googleapis.com), or the origin of O(api_endpoint) when that is not a Google API host (an
        emulator).
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for each long-running operation.
    type: int
    default: 1800
"""

EXAMPLES = r"""
- name: A T4 spot pool that scales from zero, driver installed by GKE
  k8sgpu.nvidia.gke_node_pool:
    project: my-project
    location: us-central1
    cluster: train
    name: gpu-t4
    machine_type: n1-standard-4
    spot: true
    accelerator:
      type: nvidia-tesla-t4
      count: 1
      gpu_driver_version: LATEST
    labels:
      role: train-gpu
    autoscaling:
      min_node_count: 0
      max_node_count: 3
      location_policy: ANY

- name: Time-shared L4s, the driver installed by our DaemonSet (gke_driver_installer role)
  k8sgpu.nvidia.gke_node_pool:
    project: my-project
    location: us-central1-a
    cluster: train
    name: gpu-l4-shared
    machine_type: g2-standard-8
    image_type: UBUNTU_CONTAINERD
    accelerator:
      type: nvidia-l4
      gpu_driver_version: INSTALLATION_DISABLED
      gpu_sharing_strategy: TIME_SHARING
      max_shared_clients_per_gpu: 4
    autoscaling:
      total_min_node_count: 0
      total_max_node_count: 4
    access_token: "{{ lookup('ansible.builtin.pipe', 'gcloud auth print-access-token') }}"

- name: Delete the pool (stops its cost)
  k8sgpu.nvidia.gke_node_pool:
    project: my-project
    location: us-central1
    cluster: train
    name: gpu-t4
    state: absent
"""

RETURN = r"""
node_pool:
  description: The pool as C(get_node_pool) returns it after the task (the proto's snake_case field names).
  returned: when the pool exists after the task, or before it in check mode
  type: dict
  sample: {"name": "gpu-t4", "config": {"machine_type": "n1-standard-4"}, "status": "RUNNING"}
requests:
  description: The write requests sent (in check mode - that would be sent), each with C(method) and C(request).
  returned: always
  type: list
  elements: dict
  sample: [{"method": "set_node_pool_autoscaling", "request": {"autoscaling": {"enabled": true, "max_node_count": 3}}}]
operations:
  description: The long-running operations the requests started, as C(get_operation) returned them when done.
  returned: always
  type: list
  elements: dict
node_count:
  description: Nodes per zone now (instance groups' C(targetSize)), by zone.
  returned: when the pool exists and has instance groups
  type: dict
  sample: {"us-central1-a": 0}
node_selector:
  description: Labels GKE gives every node of the pool (C(cloud.google.com/gke-nodepool), C(cloud.google.com/gke-accelerator)), for pods' nodeSelector.
  returned: with O(state=present)
  type: dict
  sample: {"cloud.google.com/gke-nodepool": "gpu-t4", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
tolerations:
  description: Kubernetes tolerations for the pool's taints, GKE's GPU taint included on a GPU pool.
  returned: with O(state=present)
  type: list
  elements: dict
  sample: [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
driver_installed_by_gke:
  description:
    - Whether GKE installs the NVIDIA driver on the pool's nodes - false when the pool has no GPU, when
      C(gpu_driver_version) is C(INSTALLATION_DISABLED), or when it is unset (older GKE versions install nothing;
      the driver-installer DaemonSet is then needed).
  returned: with O(state=present)
  type: bool
has_gpu:
  description: Whether the pool's nodes have GPUs (C(config.accelerators)), live or asked.
  returned: with O(state=present)
  type: bool
image_type:
  description: The pool's image type (C(config.image_type)), live or asked.
  returned: with O(state=present)
  type: str
  sample: COS_CONTAINERD
"""

from urllib.parse import urlparse

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gke_node_pool as gke
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gcp_common import (
    GkeRun,
    api_error,
    authorized_session,
    enum_names,
    gcp_module,
    gexc,
    is_google_api_url,
    to_dict,
    token_may_go,
)

COMPUTE_API = "https://compute.googleapis.com"

try:
    from google.cloud.container_v1 import types
except ImportError:  # gcp_module() fails first, naming the library
    types = None

# Options compared when given (the rest - accelerator sub-options - are compared through accelerator).
GIVEN = ("machine_type", "disk_size_gb", "disk_type", "image_type", "service_account", "oauth_scopes", "spot",
         "preemptible", "accelerator", "labels", "taints", "node_locations", "autoscaling")


class NodePool(GkeRun):
    """One module run."""

    REQUEST_TYPES = {"create_node_pool": "CreateNodePoolRequest", "update_node_pool": "UpdateNodePoolRequest",
                     "set_node_pool_autoscaling": "SetNodePoolAutoscalingRequest",
                     "set_node_pool_size": "SetNodePoolSizeRequest", "delete_node_pool": "DeleteNodePoolRequest"}

    def __init__(self, module):
        p = module.params
        super().__init__(module, f"node pool {p['name']} of GKE cluster {p['cluster']} ({p['project']}/"
                                 f"{p['location']})")
        self.accelerator_checked = False
        self.parent = f"projects/{p['project']}/locations/{p['location']}/clusters/{p['cluster']}"
        self.path = f"{self.parent}/nodePools/{p['name']}"

    # ---- validation (no request) ----
    def validate(self) -> dict:
        p = self.p
        acc = p["accelerator"] or {}
        try:
            gke.check_enum("accelerator.gpu_driver_version", acc.get("gpu_driver_version"),
                           enum_names(types.GPUDriverInstallationConfig.GPUDriverVersion),
                           "GPUDriverInstallationConfig.GPUDriverVersion")
            gke.check_enum("accelerator.gpu_sharing_strategy", acc.get("gpu_sharing_strategy"),
                           enum_names(types.GPUSharingConfig.GPUSharingStrategy), "GPUSharingConfig.GPUSharingStrategy")
            gke.check_enum("autoscaling.location_policy", (p["autoscaling"] or {}).get("location_policy"),
                           enum_names(types.NodePoolAutoscaling.LocationPolicy), "NodePoolAutoscaling.LocationPolicy")
            taints = (None if p["taints"] is None
                      else gke.normalize_taints(p["taints"], enum_names(types.NodeTaint.Effect)))
            wanted = gke.wanted_pool(p, taints)
        except gke.PlanError as e:
            self.fail(f"{self.ident}: {e}")
        for option, value in (("node_count", p["node_count"]), ("disk_size_gb", p["disk_size_gb"]),
                              ("accelerator.count", acc.get("count"))):
            if value is not None and value < 0:
                self.fail(f"{self.ident}: {option} is {value}; give 0 or more")
        try:
            want_pb = types.NodePool(wanted)
        except (TypeError, ValueError, KeyError) as e:
            self.fail(f"{self.ident}: the options do not make a valid NodePool: {e}")
        want = to_dict(want_pb)
        want["_set"] = {o for o in GIVEN if p[o] is not None}
        self.wanted_input = wanted
        return want

    # ---- reading and waiting ----
    def get(self) -> dict | None:
        try:
            return to_dict(self.client.get_node_pool(name=self.path, timeout=self.p["request_timeout"]))
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as e:
            self.fail(api_error(f"{self.ident}: get_node_pool", e))
        except Exception as e:  # pylint: disable=broad-except
            self.fail(api_error(f"{self.ident}: get_node_pool", e))

    def sizes(self, pool: dict) -> dict[str, int]:
        """targetSize of each of the pool's managed instance groups, by zone (Compute API)."""
        out: dict[str, int] = {}
        if not pool.get("instance_group_urls"):
            return out
        # The URLs come from the API's answer: the token goes only to a Google API host or to api_endpoint.
        for url in pool["instance_group_urls"]:
            if not token_may_go(url, self.p["api_endpoint"]):
                self.fail(f"{self.ident}: instance group {url} is not an https URL of a Google API host "
                          "(*.googleapis.com) nor of api_endpoint; the credentials are not sent there")
        session = authorized_session(self.creds)
        for url in pool["instance_group_urls"]:
            try:
                resp = session.get(url, timeout=self.p["request_timeout"])
                body = resp.json() if resp.content else {}
            except Exception as e:  # pylint: disable=broad-except
                self.fail(api_error(f"{self.ident}: reading instance group {url}", e))
            if resp.status_code != 200:
                err = (body.get("error") or {}).get("message", resp.text[:300]) if isinstance(body, dict) else ""
                self.fail(f"{self.ident}: reading instance group {url}: HTTP {resp.status_code}: {err}")
            parts = urlparse(url).path.split("/")
            zone = parts[parts.index("zones") + 1] if "zones" in parts else url
            out[zone] = int(body.get("targetSize", 0))
        return out

    def compute_base(self) -> str:
        """The Compute API's origin: Google's, or api_endpoint's when that is no Google API host (an emulator)."""
        endpoint = self.p["api_endpoint"]
        if endpoint and not is_google_api_url(endpoint):
            parts = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
            return f"{parts.scheme}://{parts.netloc}"
        return COMPUTE_API

    def pool_zones(self) -> list[str] | None:
        """The pool's zones; None in check mode when the cluster does not exist yet (a play that creates it)."""
        if self.p["node_locations"]:
            return list(self.p["node_locations"])
        if self.p["location"].count("-") == 2:  # a zone, such as us-central1-a
            return [self.p["location"]]
        try:
            cluster = self.client.get_cluster(name=self.parent, timeout=self.p["request_timeout"])
        except gexc.NotFound:
            if self.module.check_mode:
                self.module.warn(f"{self.ident}: the cluster does not exist yet; the accelerator type is checked "
                                 "when it does")
                return None
            self.fail(f"{self.ident}: the cluster does not exist: create it first (k8sgpu.nvidia.gke_cluster, or "
                      "k8sgpu_gke_cluster_state: present in playbooks/gke.yml)")
        except Exception as e:  # pylint: disable=broad-except
            self.fail(api_error(f"{self.ident}: get_cluster", e))
        return list(cluster.locations)

    def check_accelerator_type(self) -> None:
        """Fail when the accelerator type is not offered in each of the pool's zones (acceleratorTypes.list)."""
        acc = self.p["accelerator"]
        if not acc or not self.p["check_accelerator_type"] or self.accelerator_checked:
            return
        self.accelerator_checked = True
        base = self.compute_base()
        offered: dict[str, list[str]] = {}
        session = None
        for zone in self.pool_zones() or []:
            url = f"{base}/compute/v1/projects/{self.p['project']}/zones/{zone}/acceleratorTypes"
            if not token_may_go(url, self.p["api_endpoint"]):
                self.fail(f"{self.ident}: {url} is not an https URL of a Google API host nor of api_endpoint; the "
                          "credentials are not sent there (check_accelerator_type: false to skip the check)")
            session = session or authorized_session(self.creds)
            names: list[str] = []
            token = None
            while True:
                try:
                    resp = session.get(url, params={"pageToken": token} if token else None,
                                       timeout=self.p["request_timeout"])
                    body = resp.json() if resp.content else {}
                except Exception as e:  # pylint: disable=broad-except
                    self.fail(api_error(f"{self.ident}: acceleratorTypes.list in {zone}", e))
                if resp.status_code != 200:
                    err = (body.get("error") or {}).get("message", resp.text[:300]) if isinstance(body, dict) else ""
                    self.fail(f"{self.ident}: acceleratorTypes.list in {zone}: HTTP {resp.status_code}: {err} "
                              "(check_accelerator_type: false to skip the check)")
                names += [i.get("name", "") for i in body.get("items") or []]
                token = body.get("nextPageToken")
                if not token:
                    break
            offered[zone] = names
        lacking = gke.zones_lacking(acc["type"], offered)
        if lacking:
            self.fail(gke.accelerator_type_message(self.ident, acc["type"], lacking))

    # ---- state: present ----
    def create(self) -> None:
        body = dict(self.wanted_input)
        try:
            body["initial_node_count"] = gke.initial_node_count(self.p["node_count"], body.get("autoscaling"))
        except gke.PlanError as e:
            self.fail(f"{self.ident}: {e}")
        self.check_accelerator_type()
        self.write("create_node_pool", "create_node_pool", parent=self.parent, node_pool=body)

    def update(self, live: dict, want: dict) -> None:
        if live.get("status") in ("STOPPING",):
            self.fail(f"{self.ident} is being deleted (status STOPPING); run again when it is gone")
        for i, req in enumerate(gke.update_requests(live, want)):
            fields = [k for k in req if k not in ("node_version", "image_type")] or ["image_type"]
            self.write("update_node_pool", f"update_node_pool ({', '.join(fields)})", name=self.path, **req)
            if i == 0:
                live = {**live, "config": {**live.get("config", {}), "image_type": req["image_type"]}}
        given = [k for k, v in (self.p["autoscaling"] or {}).items() if v is not None]
        auto = gke.autoscaling_request(live, want, given)
        if auto is not None:
            self.write("set_node_pool_autoscaling", "set_node_pool_autoscaling", name=self.path, autoscaling=auto)
        if self.p["node_count"] is not None:
            sizes = self.sizes(live)
            if any(n != self.p["node_count"] for n in sizes.values()):
                self.write("set_node_pool_size", "set_node_pool_size", name=self.path, node_count=self.p["node_count"])

    def planned(self, live: dict | None, want: dict) -> dict:
        """The compared fields as they will be after the task (diff mode in check mode)."""
        if live is None:
            after = gke.compared({k: v for k, v in want.items() if k != "_set"})
            create = next(r["request"]["node_pool"] for r in self.requests if r["method"] == "create_node_pool")
            after["node_count"] = create["initial_node_count"]
            return after
        after = gke.compared(live)
        for r in self.requests:
            req = r["request"]
            if r["method"] == "update_node_pool":
                after["image_type"] = req["image_type"]
                if "labels" in req:
                    after["labels"] = req["labels"]["labels"]
                if "taints" in req:
                    after["taints"] = req["taints"]["taints"]
                if "locations" in req:
                    after["locations"] = req["locations"]
                for f in gke.MACHINE_FIELDS:
                    if f in req:
                        after[f] = req[f]
                if "accelerators" in req:
                    after["accelerators"] = req["accelerators"]
            elif r["method"] == "set_node_pool_autoscaling":
                after["autoscaling"] = req["autoscaling"]
            elif r["method"] == "set_node_pool_size":
                after["node_count"] = {z: req["node_count"] for z in after.get("node_count") or {}}
        return after

    def with_sizes(self, pool: dict | None) -> dict | None:
        if pool is not None and pool.get("instance_group_urls"):
            pool = {**pool, "node_count": self.sizes(pool)}
        return pool

    # ---- main ----
    def run(self):
        p = self.p
        if p["state"] == "absent":
            live = self.get()
            if live is not None and live.get("status") != "STOPPING":
                self.write("delete_node_pool", "delete_node_pool", name=self.path)
            elif live is not None and not self.module.check_mode:
                self.fail(f"{self.ident} is already being deleted (status STOPPING); run again when it is gone")
            self.module.exit_json(changed=bool(self.requests), requests=self.requests, operations=self.operations,
                                  diff={"before": gke.compared(live), "after": {}})
        want = self.validate()
        live = self.with_sizes(self.get())
        before = gke.compared(live)
        if live is None:
            self.create()
        else:
            changes = gke.immutable_changes(live, want)
            if changes and not p["recreate"]:
                self.fail(gke.immutable_message(self.ident, changes), node_pool=live)
            if changes:
                self.check_accelerator_type()  # before the delete: an unknown type must not cost the pool
                self.write("delete_node_pool", "delete_node_pool (recreate)", name=self.path)
                self.create()
            else:
                self.update(live, want)
        if self.module.check_mode:
            after_pool = live
            after = self.planned(None if any(r["method"] == "create_node_pool" for r in self.requests) else live, want)
        else:
            after_pool = self.with_sizes(self.get()) if self.requests else live
            after = gke.compared(after_pool)
        result = {"requests": self.requests, "operations": self.operations}
        if after_pool is not None:
            result["node_pool"] = {k: v for k, v in after_pool.items() if k != "node_count"}
            if "node_count" in after_pool:
                result["node_count"] = after_pool["node_count"]
        cfg = (after_pool or {}).get("config") or {}
        accs = cfg.get("accelerators") or (want.get("config") or {}).get("accelerators") or []
        acc_opt = p["accelerator"] or ({"type": accs[0]["accelerator_type"]} if accs else None)
        driver = ((accs[0].get("gpu_driver_installation_config") or {}).get("gpu_driver_version")
                  if accs else None)
        result.update(
            node_selector=gke.node_selector(p["name"], acc_opt),
            tolerations=gke.tolerations(after.get("taints") or [], bool(accs)),
            has_gpu=bool(accs),
            driver_installed_by_gke=bool(accs) and driver in ("DEFAULT", "LATEST"),
            image_type=cfg.get("image_type") or (want.get("config") or {}).get("image_type", ""),
        )
        self.module.exit_json(changed=bool(self.requests), diff={"before": before, "after": after}, **result)


def main():
    module = gcp_module(
        argument_spec={
            "cluster": {"type": "str", "required": True},
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "machine_type": {"type": "str"},
            "disk_size_gb": {"type": "int"},
            "disk_type": {"type": "str"},
            "image_type": {"type": "str"},
            "service_account": {"type": "str"},
            "oauth_scopes": {"type": "list", "elements": "str"},
            "spot": {"type": "bool"},
            "preemptible": {"type": "bool"},
            "accelerator": {"type": "dict", "options": {
                "type": {"type": "str", "required": True},
                "count": {"type": "int", "default": 1},
                "gpu_driver_version": {"type": "str"},
                "gpu_partition_size": {"type": "str"},
                "gpu_sharing_strategy": {"type": "str"},
                "max_shared_clients_per_gpu": {"type": "int"},
            }},
            "labels": {"type": "dict"},
            "taints": {"type": "list", "elements": "dict", "options": {
                "key": {"type": "str", "required": True, "no_log": False},
                "value": {"type": "str"},
                "effect": {"type": "str", "required": True},
            }},
            "node_locations": {"type": "list", "elements": "str"},
            "node_count": {"type": "int"},
            "autoscaling": {"type": "dict", "options": {
                "enabled": {"type": "bool"},
                "min_node_count": {"type": "int"},
                "max_node_count": {"type": "int"},
                "total_min_node_count": {"type": "int"},
                "total_max_node_count": {"type": "int"},
                "location_policy": {"type": "str"},
            }},
            "recreate": {"type": "bool", "default": False},
            "check_accelerator_type": {"type": "bool", "default": True},
            "wait_timeout": {"type": "int", "default": 1800},
        },
        supports_check_mode=True,
    )
    NodePool(module).run()


if __name__ == "__main__":
    main()
