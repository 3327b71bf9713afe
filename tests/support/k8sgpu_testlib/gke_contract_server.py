"""A contract server for the GKE v1 REST API's node-pool methods, for the gke_node_pool tests.

There is no GKE emulator. This server answers the paths google-cloud-container's ClusterManagerClient (REST
transport) calls for clusters - create, get, update (PUT), delete - and node pools - create, get, list, update
(PUT), :setAutoscaling, :setSize, delete - and operations.get, and the Compute API's instanceGroupManagers.get for
the pools' instance groups and acceleratorTypes.list. Every request
body is parsed into google-cloud-container's own proto type for that method (google.cloud.container_v1.types,
with json_format.Parse and ignore_unknown_fields=False), and every enum value is checked against the proto's
enum, so an unknown field or value is a 400 INVALID_ARGUMENT as Google's front end answers it.

What it models of GKE (documented behaviours): pools live in memory per cluster; every write returns a
long-running Operation that is PENDING until an operations.get, which completes it (DONE) and only then applies
the change; one operation at a time per cluster (a second write meanwhile is a 400 FAILED_PRECONDITION); the
taint nvidia.com/gpu=present:NoSchedule added to every pool with GPUs (also after a taint update, which replaces
the others); the autoscaler's default location policy (ANY for Spot VMs, else BALANCED); per-zone
(min/max_node_count) and whole-pool (total_*) autoscaling limits mutually exclusive;
UpdateNodePoolRequest's required node_version and image_type; node locations within the cluster's region;
a GPU sharing strategy only with max_shared_clients_per_gpu; a change of the GPU driver installation through
UpdateNodePoolRequest.accelerators (the only accelerator change it accepts in place); the Compute API's
acceleratorTypes.list per zone (``accelerator_types``), and node pools whose accelerator type a zone does not
offer refused as GKE refuses them; clusters created with their node pools (CREATE_CLUSTER, then RUNNING), at most
one ClusterUpdate field per UpdateClusterRequest (desired_release_channel, desired_logging_config,
desired_locations modelled), the logging components' rule (WORKLOADS needs SYSTEM_COMPONENTS), and deleted with
their pools (DELETE_CLUSTER);
a bearer token on every request (401 without): one the server issued (its /token endpoint
answers JWT-bearer grants of registered service-account keys) or a JWT self-signed by such a key. An UpdateNodePoolRequest field the server does not model is
refused with a 400 that says so. Tests can make the next operation fail (``fail_next``).

A contract test: it proves the module's requests are well-formed for the API's types and that the module is
idempotent against a server that keeps state; it does not prove that GKE accepts them (quotas, machine and GPU
availability, version rules, the real semantics of each field).
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from google.cloud.container_v1 import types
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

GPU_TAINT = types.NodeTaint(key="nvidia.com/gpu", value="present", effect=types.NodeTaint.Effect.NO_SCHEDULE)
DEFAULT_SCOPES = ["https://www.googleapis.com/auth/devstorage.read_only",
                  "https://www.googleapis.com/auth/logging.write",
                  "https://www.googleapis.com/auth/monitoring"]
# UpdateNodePoolRequest fields this server applies; any other field set is refused (not modelled).
UPDATE_FIELDS = {"name", "node_version", "image_type", "labels", "taints", "locations", "machine_type", "disk_type",
                 "disk_size_gb", "accelerators"}
# ClusterUpdate fields this server applies (one per request, as GKE requires); any other is refused (not modelled).
CLUSTER_UPDATE_FIELDS = {"desired_release_channel", "desired_logging_config", "desired_locations"}
# Accelerator types per zone for the Compute API's acceleratorTypes.list, as a region typically offers them
# (https://cloud.google.com/compute/docs/gpus/gpu-regions-zones, 2026); a test changes State.accelerator_types.
DEFAULT_ACCELERATOR_TYPES = ["nvidia-tesla-t4", "nvidia-l4", "nvidia-tesla-a100", "nvidia-h100-80gb",
                             "nvidia-tesla-v100", "nvidia-tesla-p4"]

_POOL = r"/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/clusters/(?P<c>[^/]+)/nodePools"
_CLUSTER = r"/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/clusters"
ROUTES = [
    ("GET", re.compile(_CLUSTER + r"/(?P<c>[^/:]+)$"), "get_cluster"),
    ("POST", re.compile(_CLUSTER + r"$"), "create_cluster"),
    ("PUT", re.compile(_CLUSTER + r"/(?P<c>[^/:]+)$"), "update_cluster"),
    ("DELETE", re.compile(_CLUSTER + r"/(?P<c>[^/:]+)$"), "delete_cluster"),
    ("GET", re.compile(_POOL + r"/(?P<n>[^/:]+)$"), "get_pool"),
    ("GET", re.compile(_POOL + r"$"), "list_pools"),
    ("POST", re.compile(_POOL + r"$"), "create_pool"),
    ("PUT", re.compile(_POOL + r"/(?P<n>[^/:]+)$"), "update_pool"),
    ("POST", re.compile(_POOL + r"/(?P<n>[^/:]+):setAutoscaling$"), "set_autoscaling"),
    ("POST", re.compile(_POOL + r"/(?P<n>[^/:]+):setSize$"), "set_size"),
    ("DELETE", re.compile(_POOL + r"/(?P<n>[^/:]+)$"), "delete_pool"),
    ("GET", re.compile(r"/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/operations/(?P<o>[^/:]+)$"), "get_operation"),
    ("GET", re.compile(r"/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)/instanceGroupManagers/(?P<g>[^/]+)$"),
     "get_mig"),
    ("GET", re.compile(r"/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)/acceleratorTypes$"),
     "list_accelerator_types"),
    ("POST", re.compile(r"/token$"), "token"),
]


class ApiError(Exception):
    def __init__(self, code: int, status: str, message: str):
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


def bad(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


def repeated(field) -> bool:
    """Whether a field is repeated (protobuf 6+ has is_repeated; older ones only label)."""
    flag = getattr(field, "is_repeated", None)
    return flag if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def check_enums(msg, path: str = "") -> None:
    """Refuse enum numbers the proto does not define (json_format accepts any number for open enums)."""
    for field, value in msg.ListFields():
        where = f"{path}.{field.json_name}" if path else field.json_name
        if field.type == FieldDescriptor.TYPE_ENUM:
            for v in (value if repeated(field) else [value]):
                if field.enum_type.values_by_number.get(v) is None:
                    raise bad(f"Invalid value at '{where}' (type.googleapis.com/{field.enum_type.full_name}), {v}")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue
            for sub in (value if repeated(field) else [value]):
                check_enums(sub, where)


def parse(body: bytes, proto_type):
    """The body as proto_type (proto-plus), strictly: unknown fields and enum values refused."""
    pb = proto_type.pb()()
    try:
        json_format.Parse(body.decode() or "{}", pb, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        raise bad(f"Invalid JSON payload received. {e}") from e
    check_enums(pb)
    return proto_type.wrap(pb)


def check_autoscaling(a: types.NodePoolAutoscaling) -> None:
    if not a.enabled:
        return
    per_zone = a.min_node_count or a.max_node_count
    total = a.total_min_node_count or a.total_max_node_count
    if per_zone and total:
        raise bad("Autoscaling: total_min_node_count/total_max_node_count cannot be set together with "
                  "min_node_count/max_node_count.")
    if a.min_node_count > a.max_node_count or a.total_min_node_count > a.total_max_node_count:
        raise bad("Autoscaling: the minimum node count must not exceed the maximum node count.")
    if not a.max_node_count and not a.total_max_node_count:
        raise bad("Autoscaling: max_node_count or total_max_node_count must be set when autoscaling is enabled.")


def check_accelerators(accs, cluster: dict, zones) -> None:
    """What GKE checks of NodeConfig.accelerators (AcceleratorConfig).

    - accelerator_type and a count of 1 or more.
    - GPUSharingConfig (https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/NodeConfig#gpusharingconfig):
      a gpu_sharing_strategy (TIME_SHARING, MPS) needs max_shared_clients_per_gpu; GKE's how-to pages give both
      together (https://cloud.google.com/kubernetes-engine/docs/how-to/timesharing-gpus, gcloud's
      --accelerator=...,gpu-sharing-strategy=time-sharing,max-shared-clients-per-gpu=N, and the MPS page).
    - The type must be offered in each zone of the pool (acceleratorTypes.list of the zone,
      https://cloud.google.com/compute/docs/reference/rest/v1/acceleratorTypes/list); GKE refuses the pool otherwise.
    """
    for a in accs:
        if a.accelerator_count <= 0 or not a.accelerator_type:
            raise bad("accelerators need accelerator_type and an accelerator_count of 1 or more.")
        sharing = a.gpu_sharing_config
        if sharing.gpu_sharing_strategy and sharing.max_shared_clients_per_gpu <= 0:
            raise bad("AcceleratorConfig.gpu_sharing_config: max_shared_clients_per_gpu must be set (1 or more) "
                      "with a gpu_sharing_strategy.")
        for z in zones:
            if a.accelerator_type not in cluster["accelerator_types"].get(z, []):
                raise bad(f"Accelerator type \"{a.accelerator_type}\" does not exist in zone {z}.")


def default_location_policy(a: types.NodePoolAutoscaling, spot: bool) -> None:
    """GKE's documented default: ANY for Spot VMs, BALANCED otherwise, when autoscaling is on."""
    if a.enabled and not a.location_policy:
        a.location_policy = (types.NodePoolAutoscaling.LocationPolicy.ANY if spot
                             else types.NodePoolAutoscaling.LocationPolicy.BALANCED)


def check_zones(zones, region: str) -> None:
    """Node locations must be zones of the cluster's region."""
    for z in zones:
        if not z.startswith(region + "-"):
            raise bad(f"Location {z!r} is not a zone of the cluster's region {region}.")


def cluster_path(p: str, l: str, c: str) -> str:  # noqa: E741
    return f"projects/{p}/locations/{l}/clusters/{c}"


def pool_path(p: str, l: str, c: str, n: str) -> str:  # noqa: E741
    return f"{cluster_path(p, l, c)}/nodePools/{n}"


def has_gpu(pool: types.NodePool) -> bool:
    return any(a.accelerator_count > 0 for a in pool.config.accelerators)


def add_gpu_taint(pool: types.NodePool) -> None:
    if has_gpu(pool) and not any(t == GPU_TAINT for t in pool.config.taints):
        pool.config.taints.append(GPU_TAINT)


class State:
    """Clusters, their pools, operations and instance groups; the tests read and change it directly."""

    def __init__(self):
        self.lock = threading.RLock()
        self.clusters: dict[tuple[str, str, str], dict] = {}
        self.ops: dict[tuple[str, str, str], dict] = {}
        self.migs: dict[str, int] = {}  # instance group URL path -> targetSize
        self.log: list[dict] = []
        self.fail_next: list[dict] = []
        self.tokens = {"contract-token"}
        self.service_accounts: dict[str, str] = {}  # client_email -> public key PEM
        self.base = ""
        # Origin of the instance group URLs the pools carry; unset - base. A test sets another origin to check
        # that the module sends no token to a URL an API answer names off Google and off api_endpoint.
        self.mig_base = ""
        self.accelerator_types: dict[str, list[str]] = {}  # zone -> offered types (unset zones: the default)

    def add_cluster(self, project: str, location: str, name: str, zones: list[str] | None = None,
                    version: str = "1.33.5-gke.1162000") -> None:
        with self.lock:
            zones = zones or ([location] if location.count("-") == 2 else [f"{location}-a", f"{location}-b"])
            region = location if location.count("-") == 1 else location.rsplit("-", 1)[0]
            for z in (*zones, f"{region}-c"):
                self.accelerator_types.setdefault(z, list(DEFAULT_ACCELERATOR_TYPES))
            self.clusters[(project, location, name)] = {
                "zones": zones, "region": region, "version": version, "pools": {},
                "accelerator_types": self.accelerator_types, "config": types.Cluster(), "status": "RUNNING"}

    def pool(self, project: str, location: str, cluster: str, name: str) -> types.NodePool | None:
        with self.lock:
            c = self.clusters.get((project, location, cluster))
            return None if c is None else c["pools"].get(name)

    def writes(self) -> list[dict]:
        """The write requests received (not GETs), in order."""
        return [r for r in self.log if r["method"] != "GET" and not r["path"].endswith("/token")]


class Handler(BaseHTTPRequestHandler):
    server_version = "gke-contract/1"
    state: State = None  # set by serve()

    def log_message(self, format, *args):  # noqa: A002  # pylint: disable=redefined-builtin
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        st = self.state
        with st.lock:
            st.log.append({"method": method, "path": url.path, "body": body.decode(errors="replace")})
        for m, rx, name in ROUTES:
            match = rx.match(url.path)
            if m == method and match:
                break
        else:
            self._send(404, {"error": {"code": 404, "status": "NOT_FOUND",
                                       "message": f"{method} {url.path}: no such method in the contract server"}})
            return
        try:
            if name != "token":
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer ") or not self.valid_token(auth[7:]):
                    raise ApiError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. "
                                                           "Expected OAuth 2 access token.")
            with st.lock:
                code, out = getattr(self, name)(body=body, query=parse_qs(url.query), **match.groupdict())
        except ApiError as e:
            self._send(e.code, {"error": {"code": e.code, "status": e.status, "message": e.message}})
            return
        except Exception as e:  # pylint: disable=broad-except  # a server bug: answer, do not hang the client
            self._send(500, {"error": {"code": 500, "status": "INTERNAL", "message": f"{type(e).__name__}: {e}"}})
            raise
        self._send(code, out)

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_PUT(self):  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    # ---- helpers ----
    def valid_token(self, token: str) -> bool:
        """A token the server issued, or a JWT self-signed by a registered service account's key (what
        google-auth sends for a service-account key when the client allows self-signed JWTs)."""
        from google.auth import jwt  # pylint: disable=import-outside-toplevel

        if token in self.state.tokens:
            return True
        try:
            key = self.state.service_accounts[jwt.decode(token, verify=False)["iss"]]
            jwt.decode(token, certs=key)
        except (KeyError, ValueError):
            return False
        return True

    def cluster(self, p: str, l: str, c: str) -> dict:  # noqa: E741
        cl = self.state.clusters.get((p, l, c))
        if cl is None:
            raise ApiError(404, "NOT_FOUND", f"Not found: {cluster_path(p, l, c)}.")
        return cl

    def existing(self, p, l, c, n) -> types.NodePool:  # noqa: E741
        pool = self.cluster(p, l, c)["pools"].get(n)
        if pool is None:
            raise ApiError(404, "NOT_FOUND", f"Not found: {pool_path(p, l, c, n)}.")
        return pool

    def check_name(self, req, p, l, c, n=None) -> None:  # noqa: E741
        path = cluster_path(p, l, c) + (f"/nodePools/{n}" if n else "")
        for field in ("name", "parent"):
            value = getattr(req, field, "")
            if value and value != path:
                raise bad(f"{field} {value!r} does not match the URL's {path!r}")
        for field in ("project_id", "zone", "cluster_id", "node_pool_id"):
            if getattr(req, field, ""):
                raise bad(f"{field} is deprecated with the locations API: use name/parent")

    def operation(self, p, l, c, op_type, target: str, finish) -> tuple[int, dict]:  # noqa: E741
        st = self.state
        busy = [o for o in st.ops.values() if o["cluster"] == (p, l, c)
                and o["pb"].status != types.Operation.Status.DONE]
        if busy:
            raise ApiError(400, "FAILED_PRECONDITION",
                           f"Cluster is running incompatible operation {busy[0]['pb'].name}.")
        name = f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        op = types.Operation(name=name, zone=l, location=l, operation_type=op_type,
                             status=types.Operation.Status.PENDING, target_link=f"{st.base}/v1/{target}",
                             self_link=f"{st.base}/v1/projects/{p}/locations/{l}/operations/{name}",
                             start_time=time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()))
        st.ops[(p, l, name)] = {"pb": op, "finish": finish, "cluster": (p, l, c),
                                "fail": st.fail_next.pop(0) if st.fail_next else None}
        return 200, json.loads(types.Operation.to_json(op))

    def mig_urls(self, p, c, n, zones) -> list[str]:
        urls = []
        for z in zones:
            path = f"/compute/v1/projects/{p}/zones/{z}/instanceGroupManagers/gke-{c}-{n}-{uuid.uuid4().hex[:8]}-grp"
            urls.append((self.state.mig_base or self.state.base) + path)
        return urls

    def set_migs(self, pool: types.NodePool, size: int | None) -> None:
        """The target size of each of the pool's instance groups; None removes them."""
        for url in pool.instance_group_urls:
            if size is None:
                self.state.migs.pop(urlparse(url).path, None)
            else:
                self.state.migs[urlparse(url).path] = size

    # ---- clusters ----
    def cluster_pb(self, p, l, c) -> types.Cluster:  # noqa: E741
        cl = self.cluster(p, l, c)
        out = types.Cluster(cl["config"])
        out.name, out.location, out.locations = c, l, cl["zones"]
        out.current_master_version = out.current_node_version = cl["version"]
        out.status = types.Cluster.Status[cl["status"]]
        out.self_link = f"{self.state.base}/v1/{cluster_path(p, l, c)}"
        out.endpoint = "203.0.113.10"
        out.node_pools = list(cl["pools"].values())
        return out

    def get_cluster(self, p, l, c, **_kw):  # noqa: E741
        return 200, json.loads(types.Cluster.to_json(self.cluster_pb(p, l, c)))

    @staticmethod
    def check_logging(cfg: types.LoggingConfig) -> None:
        """LoggingComponentConfig (https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters#loggingcomponentconfig):
        WORKLOADS logs need SYSTEM_COMPONENTS (https://cloud.google.com/kubernetes-engine/docs/how-to/config-logging:
        "SYSTEM is required when WORKLOAD is enabled"), as gcloud's --logging=WORKLOAD alone is refused."""
        comps = set(cfg.component_config.enable_components)
        if types.LoggingComponentConfig.Component.WORKLOADS in comps and \
                types.LoggingComponentConfig.Component.SYSTEM_COMPONENTS not in comps:
            raise bad("logging_config: WORKLOADS requires SYSTEM_COMPONENTS to be enabled.")

    def create_cluster(self, p, l, body, **_kw):  # noqa: E741
        """projects.locations.clusters.create (https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters/create):
        the cluster with its node pools, a CREATE_CLUSTER operation; PROVISIONING until the operation is DONE."""
        req = parse(body, types.CreateClusterRequest)
        if req.parent and req.parent != f"projects/{p}/locations/{l}":
            raise bad(f"parent {req.parent!r} does not match the URL's 'projects/{p}/locations/{l}'")
        for field in ("project_id", "zone"):
            if getattr(req, field):
                raise bad(f"{field} is deprecated with the locations API: use parent")
        cluster = types.Cluster(req.cluster)
        c = cluster.name
        if not c:
            raise bad("cluster.name is required.")
        if (p, l, c) in self.state.clusters:
            raise ApiError(409, "ALREADY_EXISTS", f"Already exists: {cluster_path(p, l, c)}.")
        if not cluster.node_pools and not cluster.initial_node_count and not cluster.autopilot.enabled:
            raise bad("Cluster.node_pools or Cluster.initial_node_count must be set.")
        self.check_logging(cluster.logging_config)
        region = l if l.count("-") == 1 else l.rsplit("-", 1)[0]
        check_zones(cluster.locations, region)
        version = cluster.initial_cluster_version or "1.33.5-gke.1162000"
        if version == "latest":
            version = "1.34.1-gke.1000000"
        self.state.add_cluster(p, l, c, list(cluster.locations) or None, version)
        cl = self.state.clusters[(p, l, c)]
        cl["status"] = "PROVISIONING"
        pools = list(cluster.node_pools)
        config = types.Cluster(cluster)
        config.node_pools = []
        config.locations = []
        config.initial_cluster_version = ""
        # GKE's defaults for a new Standard cluster: the default VPC network, the Regular release channel
        # (https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels: "If you don't specify a
        # release channel, ... enrolled in the Regular channel"), system and workload logs
        # (https://cloud.google.com/kubernetes-engine/docs/concepts/about-logs).
        config.network = config.network or "default"
        if not config.release_channel.channel:
            config.release_channel.channel = types.ReleaseChannel.Channel.REGULAR
        if "logging_config" not in cluster:
            config.logging_config.component_config.enable_components = [
                types.LoggingComponentConfig.Component.SYSTEM_COMPONENTS,
                types.LoggingComponentConfig.Component.WORKLOADS]
        cl["config"] = config
        try:
            self.add_cluster_pools(p, l, c, cl, pools, version)
        except ApiError:
            self.state.clusters.pop((p, l, c), None)
            raise

        def finish(failed):
            cl["status"] = "ERROR" if failed else "RUNNING"
        return self.operation(p, l, c, types.Operation.Type.CREATE_CLUSTER, cluster_path(p, l, c),
                              finish)

    def add_cluster_pools(self, p, l, c, cl, pools, version) -> None:  # noqa: E741  # pylint: disable=too-many-arguments
        for np in pools:
            if not np.name:
                raise bad("node_pools[].name is required.")
            check_autoscaling(np.autoscaling)
            check_accelerators(np.config.accelerators, cl, np.locations or cl["zones"])
            self.add_pool(p, l, c, cl, np, version, types.NodePool.Status.RUNNING)

    def add_pool(self, p, l, c, cl, pool, version, status) -> None:  # noqa: E741  # pylint: disable=too-many-arguments
        """A new pool with GKE's defaults for what the request left unset, its links and instance groups."""
        cfg = pool.config
        cfg.machine_type = cfg.machine_type or "e2-medium"
        cfg.disk_size_gb = cfg.disk_size_gb or 100
        cfg.disk_type = cfg.disk_type or "pd-balanced"
        cfg.image_type = cfg.image_type or "COS_CONTAINERD"
        cfg.service_account = cfg.service_account or "default"
        if not cfg.oauth_scopes:
            cfg.oauth_scopes.extend(DEFAULT_SCOPES)
        add_gpu_taint(pool)
        default_location_policy(pool.autoscaling, cfg.spot)
        if not pool.locations:
            pool.locations.extend(cl["zones"])
        pool.version = version
        pool.status = status
        pool.self_link = f"{self.state.base}/v1/{pool_path(p, l, c, pool.name)}"
        pool.instance_group_urls.extend(self.mig_urls(p, c, pool.name, pool.locations))
        cl["pools"][pool.name] = pool
        self.set_migs(pool, pool.initial_node_count)

    def update_cluster(self, p, l, c, body, **_kw):  # noqa: E741
        """projects.locations.clusters.update: "Exactly one update can be applied to a cluster with each request,
        so at most one field can be provided" (ClusterUpdate,
        https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/ClusterUpdate)."""
        req = parse(body, types.UpdateClusterRequest)
        if req.name and req.name != cluster_path(p, l, c):
            raise bad(f"name {req.name!r} does not match the URL")
        cl = self.cluster(p, l, c)
        fields = [f.name for f, _v in types.ClusterUpdate.pb(req.update).ListFields()]
        if len(fields) != 1:
            raise bad(f"ClusterUpdate: exactly one update can be applied with each request, got {len(fields)} "
                      f"({', '.join(fields) or 'none'}).")
        if fields[0] not in CLUSTER_UPDATE_FIELDS:
            raise bad(f"ClusterUpdate field {fields[0]} is not modelled by the contract server.")
        upd = req.update
        if fields[0] == "desired_logging_config":
            self.check_logging(upd.desired_logging_config)
        if fields[0] == "desired_locations":
            check_zones(upd.desired_locations, cl["region"])
        if cl["status"] != "RUNNING":
            raise ApiError(400, "FAILED_PRECONDITION", f"Cluster {c} is {cl['status']}.")

        def finish(failed):
            if failed:
                return
            if fields[0] == "desired_release_channel":
                cl["config"].release_channel = upd.desired_release_channel
            elif fields[0] == "desired_logging_config":
                cl["config"].logging_config = upd.desired_logging_config
            else:
                cl["zones"] = list(upd.desired_locations)
        return self.operation(p, l, c, types.Operation.Type.UPDATE_CLUSTER, cluster_path(p, l, c),
                              finish)

    def delete_cluster(self, p, l, c, **_kw):  # noqa: E741
        """projects.locations.clusters.delete: the cluster and its node pools (DELETE_CLUSTER)."""
        cl = self.cluster(p, l, c)
        cl["status"] = "STOPPING"

        def finish(failed):
            if failed:
                cl["status"] = "ERROR"
                return
            for pool in cl["pools"].values():
                self.set_migs(pool, None)
            self.state.clusters.pop((p, l, c), None)
        return self.operation(p, l, c, types.Operation.Type.DELETE_CLUSTER, cluster_path(p, l, c),
                              finish)

    # ---- node pools ----
    def get_pool(self, p, l, c, n, **_kw):  # noqa: E741
        return 200, json.loads(types.NodePool.to_json(self.existing(p, l, c, n)))

    def list_pools(self, p, l, c, **_kw):  # noqa: E741
        pools = [json.loads(types.NodePool.to_json(x)) for x in self.cluster(p, l, c)["pools"].values()]
        return 200, {"nodePools": pools}

    def create_pool(self, p, l, c, body, **_kw):  # noqa: E741
        req = parse(body, types.CreateNodePoolRequest)
        self.check_name(req, p, l, c)
        cl = self.cluster(p, l, c)
        pool = types.NodePool(req.node_pool)
        if not pool.name:
            raise bad("node_pool.name is required.")
        if pool.name in cl["pools"]:
            raise ApiError(409, "ALREADY_EXISTS",
                           f"Already exists: {pool_path(p, l, c, pool.name)}.")
        if pool.initial_node_count < 0:
            raise bad("node_pool.initial_node_count must be 0 or more.")
        check_autoscaling(pool.autoscaling)
        check_zones(pool.locations, cl["region"])
        check_accelerators(pool.config.accelerators, cl, pool.locations or cl["zones"])
        self.add_pool(p, l, c, cl, pool, cl["version"], types.NodePool.Status.PROVISIONING)

        def finish(failed):
            pool.status = types.NodePool.Status.ERROR if failed else types.NodePool.Status.RUNNING
            if failed:
                pool.status_message = failed["message"]
        return self.operation(p, l, c, types.Operation.Type.CREATE_NODE_POOL,
                              pool_path(p, l, c, pool.name), finish)

    def ready(self, pool: types.NodePool) -> None:
        if pool.status != types.NodePool.Status.RUNNING:
            raise ApiError(400, "FAILED_PRECONDITION",
                           f"Node pool {pool.name} is {pool.status.name}; it must be RUNNING to be changed.")

    def update_pool(self, p, l, c, n, body, **_kw):  # noqa: E741
        req = parse(body, types.UpdateNodePoolRequest)
        self.check_name(req, p, l, c, n)
        pool = self.existing(p, l, c, n)
        if not req.node_version or not req.image_type:
            raise bad("UpdateNodePoolRequest: node_version and image_type are required.")
        extra = sorted(f.name for f, _v in types.UpdateNodePoolRequest.pb(req).ListFields()
                       if f.name not in UPDATE_FIELDS)
        if extra:
            raise bad(f"UpdateNodePoolRequest field(s) {', '.join(extra)} are not modelled by the contract server.")
        cl = self.cluster(p, l, c)
        check_zones(req.locations, cl["region"])
        if req.disk_size_gb and req.disk_size_gb < 10:
            raise bad("disk_size_gb: the smallest allowed disk size is 10GB.")
        if req.accelerators:
            self.check_accelerator_update(pool, req.accelerators, cl)
        self.ready(pool)
        pb = types.UpdateNodePoolRequest.pb(req)

        def finish(failed):
            pool.status = types.NodePool.Status.RUNNING
            if failed:
                return
            if req.node_version != "-":
                pool.version = req.node_version if req.node_version != "latest" else cl["version"]
            pool.config.image_type = req.image_type
            if pb.HasField("labels"):
                pool.config.labels = dict(req.labels.labels)
            if pb.HasField("taints"):
                pool.config.taints = list(req.taints.taints)
                add_gpu_taint(pool)
            if req.locations:
                pool.locations = list(req.locations)
            for f in ("machine_type", "disk_type", "disk_size_gb"):
                if getattr(req, f):
                    setattr(pool.config, f, getattr(req, f))
            if req.accelerators:
                pool.config.accelerators = list(req.accelerators)
                add_gpu_taint(pool)
        pool.status = types.NodePool.Status.RECONCILING
        return self.operation(p, l, c, types.Operation.Type.UPGRADE_NODES,
                              pool_path(p, l, c, n), finish)

    @staticmethod
    def check_accelerator_update(pool: types.NodePool, accs, cl: dict) -> None:
        """UpdateNodePoolRequest.accelerators ("A list of hardware accelerators to be attached to each node",
        https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters.nodePools/update).

        Modelled as GKE documents its use: changing the GPU driver installation of an existing pool with
        `gcloud container node-pools update POOL --accelerator type=TYPE,count=N,gpu-driver-version=VERSION`
        (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus#install-drivers, the accelerator given whole).
        Anything else that differs from the pool's accelerators (type, count, partition size, sharing) is refused
        here: the server models no other accelerator change in place.
        """
        check_accelerators(accs, cl, [])
        old = [types.AcceleratorConfig(a) for a in pool.config.accelerators]
        new = [types.AcceleratorConfig(a) for a in accs]
        for a in (*old, *new):
            a.gpu_driver_installation_config = types.GPUDriverInstallationConfig()
        if old != new:
            raise bad("UpdateNodePoolRequest.accelerators: only gpu_driver_installation_config can change on an "
                      "existing node pool in this server; give the pool's accelerator type, count, partition size "
                      "and sharing unchanged.")

    def set_autoscaling(self, p, l, c, n, body, **_kw):  # noqa: E741
        req = parse(body, types.SetNodePoolAutoscalingRequest)
        self.check_name(req, p, l, c, n)
        pool = self.existing(p, l, c, n)
        check_autoscaling(req.autoscaling)
        self.ready(pool)

        def finish(failed):
            if not failed:
                pool.autoscaling = req.autoscaling
                default_location_policy(pool.autoscaling, pool.config.spot)
        return self.operation(p, l, c, types.Operation.Type.SET_NODE_POOL_MANAGEMENT,
                              pool_path(p, l, c, n), finish)

    def set_size(self, p, l, c, n, body, **_kw):  # noqa: E741
        req = parse(body, types.SetNodePoolSizeRequest)
        self.check_name(req, p, l, c, n)
        pool = self.existing(p, l, c, n)
        if req.node_count < 0:
            raise bad("node_count must be 0 or more.")
        self.ready(pool)

        def finish(failed):
            if not failed:
                self.set_migs(pool, req.node_count)
        return self.operation(p, l, c, types.Operation.Type.SET_NODE_POOL_SIZE,
                              pool_path(p, l, c, n), finish)

    def delete_pool(self, p, l, c, n, body, **_kw):  # noqa: E741
        cl = self.cluster(p, l, c)
        pool = self.existing(p, l, c, n)
        pool.status = types.NodePool.Status.STOPPING

        def finish(failed):
            if failed:
                pool.status = types.NodePool.Status.ERROR
                return
            cl["pools"].pop(n, None)
            self.set_migs(pool, None)
        return self.operation(p, l, c, types.Operation.Type.DELETE_NODE_POOL,
                              pool_path(p, l, c, n), finish)

    # ---- operations ----
    def get_operation(self, p, l, o, **_kw):  # noqa: E741
        entry = self.state.ops.get((p, l, o))
        if entry is None:
            raise ApiError(404, "NOT_FOUND", f"Not found: projects/{p}/locations/{l}/operations/{o}.")
        op = entry["pb"]
        if op.status != types.Operation.Status.DONE:
            failed = entry["fail"]
            entry["finish"](failed)
            op.status = types.Operation.Status.DONE
            op.end_time = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            op.progress = types.OperationProgress(status=types.Operation.Status.DONE)
            if failed:
                op.error = {"code": failed.get("code", 9), "message": failed["message"]}
                op.status_message = failed["message"]
        return 200, json.loads(types.Operation.to_json(op))

    # ---- Compute and OAuth ----
    def get_mig(self, p, z, g, **_kw):
        path = f"/compute/v1/projects/{p}/zones/{z}/instanceGroupManagers/{g}"
        if path not in self.state.migs:
            raise ApiError(404, "NOT_FOUND", f"The resource 'projects/{p}/zones/{z}/instanceGroupManagers/{g}' "
                                             "was not found")
        return 200, {"kind": "compute#instanceGroupManager", "name": g, "zone": z,
                     "targetSize": self.state.migs[path]}

    def list_accelerator_types(self, p, z, query, **_kw):
        """acceleratorTypes.list of a zone (Compute API v1), one page: every item has name, zone and
        maximumCardsPerInstance as the API gives them; an unknown zone is the API's 404."""
        offered = self.state.accelerator_types.get(z)
        if offered is None:
            raise ApiError(404, "NOT_FOUND", f"The resource 'projects/{p}/zones/{z}' was not found")
        base = f"{self.state.base}/compute/v1/projects/{p}/zones/{z}"
        return 200, {"kind": "compute#acceleratorTypeList", "selfLink": f"{base}/acceleratorTypes",
                     "items": [{"kind": "compute#acceleratorType", "name": t, "zone": base,
                                "selfLink": f"{base}/acceleratorTypes/{t}", "maximumCardsPerInstance": 8}
                               for t in offered]}

    def token(self, body, **_kw):
        """OAuth2 token endpoint for service-account keys whose token_uri points here (JWT bearer grant)."""
        from google.auth import jwt  # pylint: disable=import-outside-toplevel

        form = parse_qs(body.decode())
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            raise ApiError(400, "INVALID_ARGUMENT", "unsupported_grant_type")
        assertion = form.get("assertion", [""])[0]
        try:
            claims = jwt.decode(assertion, verify=False)
            key = self.state.service_accounts[claims["iss"]]
            # google-auth signs the grant for Google's token endpoint whatever token_uri says, as Google expects
            jwt.decode(assertion, certs=key, audience="https://oauth2.googleapis.com/token")
        except (KeyError, ValueError) as e:
            raise ApiError(400, "INVALID_ARGUMENT", f"invalid_grant: {e}") from e
        token = f"sa-{uuid.uuid4().hex}"
        self.state.tokens.add(token)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600}


def serve(host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, State]:
    """Start the server in a daemon thread; returns it and its state (state.base is its URL)."""
    state = State()
    handler = type("BoundHandler", (Handler,), {"state": state})
    httpd = ThreadingHTTPServer((host, port), handler)
    state.base = f"http://{host}:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, name="gke-contract", daemon=True).start()
    return httpd, state


@contextmanager
def running(host: str = "127.0.0.1"):
    """The server for the length of a with block (pytest fixtures); yields its state."""
    httpd, state = serve(host)
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


if __name__ == "__main__":  # a standalone server, e.g. for trying the playbook by hand
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cluster", action="append", default=[], help="project/location/name (repeatable)")
    ap.add_argument("--port-file", help="write the port here once listening")
    args = ap.parse_args()
    server, st = serve(port=args.port)
    for spec in args.cluster:
        st.add_cluster(*spec.split("/"))
    if args.port_file:
        with open(args.port_file, "w", encoding="utf-8") as fh:
            fh.write(str(server.server_address[1]))
    print(f"listening on {st.base}", flush=True)
    threading.Event().wait()
