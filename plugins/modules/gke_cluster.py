#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gke_cluster
short_description: Create, update or delete a GKE Standard cluster with a small always-on CPU node pool
version_added: 1.0.0
description:
  - Creates, updates or deletes a Google Kubernetes Engine Standard cluster through Google's own client,
    google-cloud-container's C(ClusterManagerClient) over REST (v1 API, C(projects.locations.clusters) -
    C(create_cluster), C(update_cluster), C(delete_cluster)), and waits for each long-running operation
    (C(get_operation)) until it is C(DONE), failing with the operation's C(error).
  - The cluster is created with one small CPU node pool (O(cpu_pool)) that stays on, for the system pods and the
    cluster-autoscaler's own needs, as Google's GPU guides and Terraform examples do; GPU pools come afterwards from
    M(k8sgpu.nvidia.gke_node_pool) and scale from zero. The CPU pool is part of the create only; afterwards it is
    an ordinary node pool (manage it with M(k8sgpu.nvidia.gke_node_pool) if it must change).
  - Compares the task with the live cluster (C(get_cluster)) and sends only what differs, one
    C(UpdateClusterRequest) per field (GKE applies exactly one C(ClusterUpdate) field per request) - the release
    channel (C(desired_release_channel)), the logging components (C(desired_logging_config)) and the node zones
    (C(desired_locations)). An option left unset is not compared.
  - Not changed on an existing cluster, failing the task naming the field, the live and the asked value before
    any write - O(network), O(subnetwork). O(cluster_version) is the version on create only (GKE upgrades clusters
    on a release channel itself), never compared.
  - Enum values (O(release_channel), O(logging_components)) are checked against the proto enums of the installed
    google-cloud-container (C(ReleaseChannel.Channel), C(LoggingComponentConfig.Component)) before any request.
  - Why not M(google.cloud.gcp_container_cluster) (google.cloud 1.10.2, read from its source) - it sends the whole
    Cluster resource in a C(PUT) to the cluster's URL to update it, where the v1 API expects an
    C(UpdateClusterRequest) with one C(ClusterUpdate) field, so no update goes through; it compares no release
    channel or logging components on an existing cluster; and it shares nothing with M(k8sgpu.nvidia.gke_node_pool)'s
    credentials and endpoint checks.
  - Tested against a contract server (tests/support/k8sgpu_testlib/gke_contract_server.py) that parses every request into
    google-cloud-container's own proto types; that proves the requests are well-formed and the module idempotent,
    not that GKE accepts them.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.gcp
attributes:
  check_mode:
    support: full
    details: Reads the cluster and returns the requests it would send (RV(requests)); sends no write.
  diff_mode:
    support: full
    details: Before and after of the compared fields.
options:
  name:
    description: The cluster's name.
    type: str
    required: true
  state:
    description: V(present) creates or updates the cluster, V(absent) deletes it with all its node pools.
    type: str
    choices: [present, absent]
    default: present
  cluster_version:
    description:
      - C(initial_cluster_version) on create, for example C(1.33) or C(latest). Unset - the release channel's
        default. Never compared (GKE upgrades the cluster).
    type: str
  release_channel:
    description: C(release_channel.channel) - C(RAPID), C(REGULAR), C(STABLE), C(EXTENDED) or C(UNSPECIFIED) (none).
    type: str
  node_locations:
    description: The zones of the nodes (C(locations)), compared as a set. Unset - GKE's default, not compared.
    type: list
    elements: str
  network:
    description: The VPC network (C(network)). Unset - C(default). Not changed.
    type: str
  subnetwork:
    description: The subnetwork (C(subnetwork)). Not changed.
    type: str
  logging_components:
    description:
      - C(logging_config.component_config.enable_components) - for example C([SYSTEM_COMPONENTS, WORKLOADS]);
        C([]) turns Cloud Logging off. The exact set. Unset - GKE's default, not compared.
    type: list
    elements: str
  cpu_pool:
    description: The always-on CPU node pool created with the cluster (not compared afterwards).
    type: dict
    default: {}
    suboptions:
      name:
        description: The pool's name.
        type: str
        default: cpu
      machine_type:
        description: C(NodeConfig.machine_type).
        type: str
        default: e2-standard-4
      node_count:
        description: Nodes per zone (C(initial_node_count)).
        type: int
        default: 1
      disk_size_gb:
        description: C(NodeConfig.disk_size_gb).
        type: int
        default: 50
      image_type:
        description: C(NodeConfig.image_type).
        type: str
        default: COS_CONTAINERD
      service_account:
        description: C(NodeConfig.service_account). Unset - the Compute Engine default service account.
        type: str
  wait_timeout:
    description: Seconds to wait for each long-running operation (a cluster takes 5 to 15 minutes).
    type: int
    default: 2400
"""

EXAMPLES = r"""
- name: A regional cluster on the regular channel with one always-on e2-standard-4 per zone
  k8sgpu.nvidia.gke_cluster:
    project: my-project
    location: us-central1
    name: train
    release_channel: REGULAR
    node_locations: [us-central1-a, us-central1-b]
    logging_components: [SYSTEM_COMPONENTS, WORKLOADS]
    cpu_pool:
      machine_type: e2-standard-4
      node_count: 1

- name: Delete it (and every node pool)
  k8sgpu.nvidia.gke_cluster:
    project: my-project
    location: us-central1
    name: train
    state: absent
"""

RETURN = r"""
cluster:
  description: The cluster as C(get_cluster) returns it after the task (snake_case field names), without its node pools' details.
  returned: when the cluster exists after the task, or before it in check mode
  type: dict
  sample: {"name": "train", "status": "RUNNING", "current_master_version": "1.33.5-gke.1162000"}
requests:
  description: The write requests sent (in check mode - that would be sent), each with C(method) and C(request).
  returned: always
  type: list
  elements: dict
operations:
  description: The long-running operations the requests started, as C(get_operation) returned them when done.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gcp_common import (
    GkeRun,
    api_error,
    enum_names,
    gcp_module,
    gexc,
    to_dict,
)

try:
    from google.cloud.container_v1 import types
except ImportError:  # gcp_module() fails first, naming the library
    types = None


def compared(cluster: dict | None) -> dict:
    """The fields of a cluster the module compares, for diff mode."""
    if not cluster:
        return {}
    comps = ((cluster.get("logging_config") or {}).get("component_config") or {}).get("enable_components")
    return {"locations": sorted(cluster.get("locations") or []), "network": cluster.get("network", ""),
            "subnetwork": cluster.get("subnetwork", ""),
            "release_channel": (cluster.get("release_channel") or {}).get("channel", "UNSPECIFIED"),
            "logging_components": sorted(comps or []),
            "node_pools": sorted(np.get("name", "") for np in cluster.get("node_pools") or []),
            "current_master_version": cluster.get("current_master_version", ""),
            "status": cluster.get("status", "")}


class Cluster(GkeRun):
    """One module run."""

    REQUEST_TYPES = {"create_cluster": "CreateClusterRequest", "update_cluster": "UpdateClusterRequest",
                     "delete_cluster": "DeleteClusterRequest"}
    # Cluster operations take minutes: poll at most every 30 s.
    MAX_POLL_DELAY = 30.0

    def __init__(self, module):
        p = module.params
        super().__init__(module, f"GKE cluster {p['name']} ({p['project']}/{p['location']})")
        self.parent = f"projects/{p['project']}/locations/{p['location']}"
        self.path = f"{self.parent}/clusters/{p['name']}"

    def validate(self) -> None:
        p = self.p
        channels = list(enum_names(types.ReleaseChannel.Channel))
        if p["release_channel"] is not None and p["release_channel"] not in channels:
            self.fail(f"{self.ident}: release_channel={p['release_channel']!r} is not a value of ReleaseChannel.Channel "
                      f"(google-cloud-container): use one of {', '.join(channels)}")
        comps = [c for c in enum_names(types.LoggingComponentConfig.Component) if not c.endswith("_UNSPECIFIED")]
        bad = [c for c in p["logging_components"] or [] if c not in comps]
        if bad:
            self.fail(f"{self.ident}: logging_components {', '.join(bad)} not values of LoggingComponentConfig.Component "
                      f"(google-cloud-container): use {', '.join(comps)}")
        if "WORKLOADS" in (p["logging_components"] or []) and "SYSTEM_COMPONENTS" not in p["logging_components"]:
            self.fail(f"{self.ident}: logging_components WORKLOADS needs SYSTEM_COMPONENTS as well (GKE refuses "
                      "workload logs without system logs)")
        pool = p["cpu_pool"]
        if pool["node_count"] < 1:
            self.fail(f"{self.ident}: cpu_pool.node_count is {pool['node_count']}; the always-on pool needs 1 or more")

    def get(self) -> dict | None:
        try:
            return to_dict(self.client.get_cluster(name=self.path, timeout=self.p["request_timeout"]))
        except gexc.NotFound:
            return None
        except Exception as e:  # pylint: disable=broad-except
            self.fail(api_error(f"{self.ident}: get_cluster", e))

    def create_body(self) -> dict:
        p, pool = self.p, self.p["cpu_pool"]
        config = {"machine_type": pool["machine_type"], "disk_size_gb": pool["disk_size_gb"],
                  "image_type": pool["image_type"]}
        if pool.get("service_account"):
            config["service_account"] = pool["service_account"]
        body: dict = {"name": p["name"], "node_pools": [{"name": pool["name"], "initial_node_count": pool["node_count"],
                                                         "config": config}]}
        for option, field in (("node_locations", "locations"), ("network", "network"), ("subnetwork", "subnetwork"),
                              ("cluster_version", "initial_cluster_version")):
            if p[option]:
                body[field] = p[option]
        if p["release_channel"] is not None:
            body["release_channel"] = {"channel": p["release_channel"]}
        if p["logging_components"] is not None:
            body["logging_config"] = {"component_config": {"enable_components": list(p["logging_components"])}}
        return body

    def updates(self, live: dict) -> list[dict]:
        p, now = self.p, compared(live)
        changes = [(o, now[o], p[o]) for o in ("network", "subnetwork")
                   if p[o] is not None and now[o].rsplit("/", 1)[-1] != p[o].rsplit("/", 1)[-1]]
        if changes:
            self.fail(f"{self.ident}: this module does not change {', '.join(c[0] for c in changes)} of an existing "
                      f"cluster ({'; '.join(f'{o}: live {a!r}, asked {b!r}' for o, a, b in changes)}); GKE cannot "
                      "move a cluster to another network: keep the live values or create a new cluster",
                      cluster=compared(live))
        out = []
        if p["release_channel"] is not None and now["release_channel"] != p["release_channel"]:
            out.append({"desired_release_channel": {"channel": p["release_channel"]}})
        if p["logging_components"] is not None and now["logging_components"] != sorted(p["logging_components"]):
            out.append({"desired_logging_config": {"component_config": {
                "enable_components": list(p["logging_components"])}}})
        if p["node_locations"] is not None and now["locations"] != sorted(p["node_locations"]):
            out.append({"desired_locations": list(p["node_locations"])})
        return out

    def run(self):
        p = self.p
        if p["state"] == "present":
            self.validate()
        live = self.get()
        before = compared(live)
        if p["state"] == "absent":
            if live is not None and live.get("status") != "STOPPING":
                self.write("delete_cluster", "delete_cluster", name=self.path)
            elif live is not None and not self.module.check_mode:
                self.fail(f"{self.ident} is already being deleted (status STOPPING); run again when it is gone")
            self.module.exit_json(changed=bool(self.requests), requests=self.requests, operations=self.operations,
                                  diff={"before": before, "after": {}})
        if live is None:
            body = self.create_body()
            self.write("create_cluster", "create_cluster", parent=self.parent, cluster=body)
            planned = {**compared({**body, "status": "RUNNING", "node_pools": body["node_pools"],
                                   "release_channel": body.get("release_channel") or {},
                                   "logging_config": body.get("logging_config") or {}}),
                       "current_master_version": p["cluster_version"] or ""}
        else:
            if live.get("status") in ("STOPPING",):
                self.fail(f"{self.ident} is being deleted (status STOPPING); run again when it is gone")
            planned = dict(before)
            for update in self.updates(live):
                field = next(iter(update))
                self.write("update_cluster", f"update_cluster ({field})", name=self.path, update=update)
                if field == "desired_release_channel":
                    planned["release_channel"] = update[field]["channel"]
                elif field == "desired_logging_config":
                    planned["logging_components"] = sorted(update[field]["component_config"]["enable_components"])
                else:
                    planned["locations"] = sorted(update[field])
        if self.module.check_mode:
            after_cluster, after = live, planned
        else:
            after_cluster = self.get() if self.requests else live
            after = compared(after_cluster)
        result = {"requests": self.requests, "operations": self.operations}
        if after_cluster is not None:
            result["cluster"] = {k: v for k, v in after_cluster.items() if k not in ("node_pools", "master_auth")}
        self.module.exit_json(changed=bool(self.requests), diff={"before": before, "after": after}, **result)


def main():
    module = gcp_module(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "cluster_version": {"type": "str"},
            "release_channel": {"type": "str"},
            "node_locations": {"type": "list", "elements": "str"},
            "network": {"type": "str"},
            "subnetwork": {"type": "str"},
            "logging_components": {"type": "list", "elements": "str"},
            "cpu_pool": {"type": "dict", "default": {}, "options": {
                "name": {"type": "str", "default": "cpu"},
                "machine_type": {"type": "str", "default": "e2-standard-4"},
                "node_count": {"type": "int", "default": 1},
                "disk_size_gb": {"type": "int", "default": 50},
                "image_type": {"type": "str", "default": "COS_CONTAINERD"},
                "service_account": {"type": "str"},
            }},
            "wait_timeout": {"type": "int", "default": 2400},
        },
        supports_check_mode=True,
    )
    Cluster(module).run()


if __name__ == "__main__":
    main()
