# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the collection's AWS modules share.

The connection options are amazon.aws's own (``aws_argument_spec()`` of its module_utils.modules: access_key,
secret_key, session_token, profile, region, endpoint_url, validate_certs, aws_ca_bundle, aws_config,
debug_botocore_endpoint_logs, with their aliases and environment fallbacks), so that every option amazon.aws's
action group takes - ``group/k8sgpu.nvidia.aws`` extends it - is accepted here too, and they map to boto3 as
amazon.aws maps them (``get_aws_connection_info``: aws_ca_bundle becomes botocore's ``verify`` path, aws_config a
``botocore.config.Config``). Options left unset fall back to boto3's own chain (shared config and credentials files,
instance or pod roles).

The session and clients are built here, not with amazon.aws's AnsibleAWSModule: one session for a run's clients
and botocore's service model (the modules check enum values and regions against it before any request), botocore's
"standard" retry mode (throttling and transient errors retried with backoff) under the task's aws_config, and the
endpoint check below. AnsibleAWSModule's client() makes a session per client, and on ansible-core 2.19 its
exit_json passes the module's warnings to AnsibleModule.exit_json, which ansible-core deprecates: every task where
the module warns gets a deprecation warning too (amazon.aws 10.1.2).

Where the credentials go: a request is signed (SigV4, an Authorization header replayable for minutes) and carries
the session token, so a plain ``http://`` endpoint - whether from endpoint_url, ``AWS_URL``, ``AWS_ENDPOINT_URL``
or a profile's ``endpoint_url`` - is taken only on a loopback host (127.0.0.0/8, ::1, localhost: moto or another
local test server) unless ``allow_http_endpoint_url`` is set. This is checked when the session is made (the option)
and on each client (the endpoint botocore resolved), before any request, and again on every request about to be
sent (``before-send``), as the GCP modules do for their api_endpoint (_gcp_common.py).
"""
from __future__ import annotations

import ipaddress
import math
import time
import traceback
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import boto3
    import botocore
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
    HAS_BOTO3 = True
    BOTO3_IMPORT_ERROR = None
except ImportError:
    HAS_BOTO3 = False
    BOTO3_IMPORT_ERROR = traceback.format_exc()
    BotoCoreError = ClientError = EndpointConnectionError = Exception  # for except clauses; never raised without boto3

# The oldest boto3/botocore whose EKS model has the AL2023 NVIDIA AMI types (see requirements-eks.txt).
MIN_BOTOCORE = (1, 37, 35)

# The collection's own connection option, beside amazon.aws's (documented in plugins/doc_fragments/aws.py).
AWS_EXTRA_ARG_SPEC = {
    "allow_http_endpoint_url": {"type": "bool", "default": False},
}

# Only to fail cleanly, naming the fix, when amazon.aws is not installed: the names, aliases, types and defaults
# of its connection options (without their environment fallbacks), the secrets hidden - so the failure does not
# print them and the documentation matches in either case (ansible-test's validate-modules without amazon.aws).
# tests/unit/plugins/module_utils/test_aws_common.py keeps it in step with amazon.aws's aws_argument_spec().
_WITHOUT_AMAZON_AWS_SPEC = {
    "access_key": {"aliases": ["aws_access_key_id", "aws_access_key"], "no_log": False},
    "secret_key": {"aliases": ["aws_secret_access_key", "aws_secret_key"], "no_log": True},
    "session_token": {"aliases": ["aws_session_token"], "no_log": True},
    "profile": {"aliases": ["aws_profile"]},
    "region": {"aliases": ["aws_region"]},
    "endpoint_url": {"aliases": ["aws_endpoint_url"]},
    "validate_certs": {"type": "bool", "default": True},
    "aws_ca_bundle": {"type": "path"},
    "aws_config": {"type": "dict"},
    "debug_botocore_endpoint_logs": {"type": "bool", "default": False},
}


def _amazon_aws():
    """amazon.aws's aws_argument_spec and get_aws_connection_info, or None when that collection is not installed.

    Imported when a module runs (as _k8s_common.py does with kubernetes.core), so that this file stays importable
    without it."""
    try:
        from ansible_collections.amazon.aws.plugins.module_utils.botocore import get_aws_connection_info
        from ansible_collections.amazon.aws.plugins.module_utils.modules import aws_argument_spec
    except ImportError:  # reported by aws_module(), with the fix
        return None
    return aws_argument_spec, get_aws_connection_info


class AWSModule(AnsibleModule):
    """An AnsibleModule that, with debug_botocore_endpoint_logs, returns the AWS operations the run called as
    ``resource_actions`` (sorted ``<service>:<Operation>``, as amazon.aws's modules do), also when it fails."""

    def __init__(self, *args, **kwargs):
        self.resource_actions: set[str] = set()
        super().__init__(*args, **kwargs)

    def _with_actions(self, kwargs: dict) -> dict:
        if self.params.get("debug_botocore_endpoint_logs") and "resource_actions" not in kwargs:
            kwargs["resource_actions"] = sorted(self.resource_actions)
        return kwargs

    def exit_json(self, **kwargs):
        super().exit_json(**self._with_actions(kwargs))

    def fail_json(self, msg, **kwargs):
        super().fail_json(msg, **self._with_actions(kwargs))


def aws_module(argument_spec: dict, **kwargs) -> AnsibleModule:
    """An AnsibleModule with amazon.aws's connection options and allow_http_endpoint_url added to argument_spec;
    fails naming amazon.aws, or boto3, when it cannot be imported."""
    amazon = _amazon_aws()
    if amazon is None:
        AnsibleModule(argument_spec={**argument_spec, **_WITHOUT_AMAZON_AWS_SPEC, **AWS_EXTRA_ARG_SPEC},
                      **kwargs).fail_json(
            msg="this module needs the amazon.aws collection (>= 9.0.0; its AWS connection options): "
                "ansible-galaxy collection install amazon.aws")
    module = AWSModule(argument_spec={**argument_spec, **amazon[0](), **AWS_EXTRA_ARG_SPEC}, **kwargs)
    if not HAS_BOTO3:
        module.fail_json(msg=missing_required_lib("boto3 and botocore (pip install -r requirements-eks.txt)"),
                         exception=BOTO3_IMPORT_ERROR)
    version = tuple(int(p) for p in botocore.__version__.split(".")[:3] if p.isdigit())
    if version < MIN_BOTOCORE:
        module.warn(f"botocore {botocore.__version__} is older than {'.'.join(map(str, MIN_BOTOCORE))}: its EKS model "
                    "lacks AMI types this module accepts; pip install -r requirements-eks.txt")
    return module


class EndpointError(ValueError):
    """An endpoint the signed requests must not go to; the message says why and what to set."""


def is_loopback(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1."""
    if (host or "").lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(url: str, allow_http: bool = False, source: str = "endpoint_url", fix: str | None = None) -> None:
    """Raise EndpointError when the AWS endpoint url must not receive signed requests: not http(s), user
    information in it, or plain http on a host other than loopback without allow_http. source names where the URL
    came from, for the message; fix replaces the plain-http message's advice (the modules' allow_http_endpoint_url)
    where that option is not the caller's (filter aws_endpoint_check, for playbooks/eks.yml)."""
    parts = urlsplit(url)
    if parts.username is not None:  # first: the messages below quote the URL
        raise EndpointError(f"{source} has user information (user@ or user:password@); give credentials with "
                            "access_key and secret_key, a profile or boto3's chain, never in the URL")
    try:
        parts.port  # noqa: B018  (a malformed port raises here)
    except ValueError:
        raise EndpointError(f"{source} {url!r} has a malformed port") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise EndpointError(f"{source} {url!r} is not an https:// (or http://) URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not allow_http:
        raise EndpointError(
            f"{source} {url} is plain http on {parts.hostname}, not a loopback address: every request's signature "
            "(a replayable SigV4 Authorization header) and the session token would cross the network unencrypted. "
            + (fix or "Use https, or set allow_http_endpoint_url: true for a test server on a network you trust"))


class PlainHttpRefused(BotoCoreError):
    """Raised by the before-send guard: a signed request about to go to a refused endpoint (not sent)."""

    fmt = "{msg}"


def _guard(allow_http: bool):
    """A before-send handler that stops any request check_endpoint refuses, whatever made its URL."""

    def before_send(request, **_kwargs):
        try:
            check_endpoint(request.url.split("?", 1)[0], allow_http, source="request to")
        except EndpointError as e:
            raise PlainHttpRefused(msg=f"{e} (not sent)") from None

    return before_send


def known_regions(session, service: str) -> list[str]:
    """The regions of every partition where the installed botocore has an endpoint for service (no request)."""
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions(service, partition_name=partition))
    return sorted(regions)


def region_error(session, region: str, services) -> str | None:
    """A message naming the region and the fix when botocore knows none of services there, else None."""
    for service in services:
        known = known_regions(session, service)
        if known and region not in known:  # a global service (IAM) lists no regions
            aws = [r for r in known if r.split("-")[0] in ("us", "eu", "ap", "ca", "sa", "me", "af", "il", "mx")]
            return (f"region {region!r} is not a region where botocore {botocore.__version__} knows "
                    f"{service.upper()} ({', '.join(aws)}, and those of the other partitions): check the name "
                    "(aws ec2 describe-regions --query 'Regions[].RegionName'); a region newer than this botocore "
                    "needs pip install -U boto3 botocore; a private or test endpoint is given with endpoint_url")
    return None


class AWS:
    """boto3 clients for one module run, all with the same session, endpoint, TLS and botocore settings."""

    def __init__(self, module: AnsibleModule, services=()):
        """services: the AWS services the module calls; without endpoint_url, a region where botocore knows none
        of them fails here, before any request, naming the region (an unknown region otherwise gives the
        endpoint's raw connection error). A refused endpoint_url (check_endpoint) fails here too."""
        p = module.params
        self.module = module
        if p["endpoint_url"]:
            try:
                check_endpoint(p["endpoint_url"], p["allow_http_endpoint_url"])
            except EndpointError as e:
                module.fail_json(msg=str(e))
        get_aws_connection_info = _amazon_aws()[1]
        try:
            region, self.endpoint_url, conn = get_aws_connection_info(module)
        except (TypeError, ValueError) as e:  # aws_config: botocore.config.Config(**aws_config)
            module.fail_json(msg=f"aws_config: {e} (its keys are botocore.config.Config's arguments: "
                                 "https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html)")
        self.verify = conn["verify"]
        config = Config(retries={"mode": "standard", "max_attempts": 8}, user_agent_extra="k8sgpu.nvidia")
        self.config = config.merge(conn["aws_config"]) if conn.get("aws_config") else config
        try:
            self.session = boto3.session.Session(
                aws_access_key_id=conn["aws_access_key_id"], aws_secret_access_key=conn["aws_secret_access_key"],
                aws_session_token=conn["aws_session_token"], profile_name=conn.get("profile_name"),
                region_name=region)
        except BotoCoreError as e:
            module.fail_json(msg=f"AWS session: {e}")
        if not self.session.region_name:
            module.fail_json(msg="no AWS region: set the region option or AWS_REGION (or a profile with a region)")
        if not self.endpoint_url:
            msg = region_error(self.session, self.session.region_name, services)
            if msg:
                module.fail_json(msg=msg)
        self._clients: dict[str, object] = {}

    def client(self, service: str):
        """The run's client for service. Fails, before any request, when the endpoint botocore resolved for it
        (endpoint_url, or AWS_ENDPOINT_URL[_<SERVICE>] or a profile's endpoint_url) is one check_endpoint refuses;
        every request is checked again just before it is sent."""
        if service not in self._clients:
            allow_http = self.module.params["allow_http_endpoint_url"]
            client = self.session.client(service, endpoint_url=self.endpoint_url, verify=self.verify,
                                         config=self.config)
            try:
                check_endpoint(client.meta.endpoint_url, allow_http,
                               source="endpoint_url" if self.endpoint_url else
                               f"the {service} endpoint (from AWS_ENDPOINT_URL or the profile's endpoint_url)")
            except EndpointError as e:
                self.module.fail_json(msg=str(e))
            client.meta.events.register("before-send", _guard(allow_http))
            actions = getattr(self.module, "resource_actions", None)
            if actions is not None:
                client.meta.events.register(
                    "before-parameter-build", lambda model, **_kw: actions.add(f"{service}:{model.name}"))
            self._clients[service] = client
        return self._clients[service]

    def service_model(self, service: str):
        """botocore's service model (shapes, enums) for service, read from botocore's data: no request."""
        return self.session._session.get_service_model(service)  # pylint: disable=protected-access


def error_code(e: Exception) -> str:
    """The AWS error code of a ClientError ('' for other errors)."""
    return e.response.get("Error", {}).get("Code", "") if isinstance(e, ClientError) else ""


def describe_error(what: str, e: Exception) -> str:
    """'<what>: <code>: <message>' for a botocore error."""
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{what}: {err.get('Code', 'error')}: {err.get('Message', str(e))}"
    if HAS_BOTO3 and isinstance(e, EndpointConnectionError):
        return (f"{what}: {e}: the endpoint cannot be reached - check the region's name and this machine's "
                "network (proxy, DNS), or set endpoint_url to the endpoint you mean")
    return f"{what}: {e}"


def tag_update(live: Mapping, want: Mapping, purge: bool) -> tuple[dict, list[str]]:
    """(tags to set, keys to remove) for TagResource/UntagResource (eks_cluster, eks_nodegroup, eks_pod_identity;
    eks_nodegroup's labels too)."""
    add = {k: v for k, v in want.items() if live.get(k) != v}
    remove = sorted(k for k in live if k not in want) if purge else []
    return dict(sorted(add.items())), remove


def plain(value):
    """value with datetimes as ISO 8601 strings and no ResponseMetadata (for a module's JSON result)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class EksRun:
    """One run of an EKS module (eks_cluster, eks_nodegroup): the EKS client, the write requests it sent (or in
    check mode would send), the updates it followed, one failure path naming the resource (``ident``), and the time
    left of ``wait_timeout`` on a monotonic clock."""

    def __init__(self, module, ident: str):
        self.module = module
        self.p = module.params
        self.aws = AWS(module, services=("eks",))
        self.eks = self.aws.client("eks")
        self.requests: list[dict] = []
        self.updates: list[dict] = []
        self.deadline = time.monotonic() + self.p["wait_timeout"]
        self.ident = ident

    def fail(self, msg: str, **kw):
        self.module.fail_json(msg=msg, requests=self.requests, updates=self.updates, **kw)

    def call(self, what: str, fn, **params):
        try:
            return fn(**params)
        except (ClientError, BotoCoreError) as e:
            self.fail(describe_error(f"{self.ident}: {what}", e))

    def write(self, operation: str, fn, **params):
        """Record a write request; send it unless in check mode."""
        self.requests.append({"operation": operation, "params": plain(params)})
        if self.module.check_mode:
            return None
        return self.call(operation, fn, **params)

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def waiter_config(self) -> dict:
        """A botocore waiter's Delay and MaxAttempts that end within the time left."""
        delay = max(1, min(30, int(self.left()) // 10 or 1))
        return {"Delay": delay, "MaxAttempts": max(1, math.ceil(self.left() / delay))}

    def follow_update(self, update: dict, wait: bool, **describe) -> dict:
        """With wait, poll DescribeUpdate (``describe``: its name/nodegroupName) until the update leaves InProgress;
        fail when it is Failed or Cancelled, naming its errors."""
        while wait and update.get("status") == "InProgress":
            if not self.left():
                self.fail(f"{self.ident}: update {update['id']} ({update.get('type')}) still InProgress after "
                          f"wait_timeout={self.p['wait_timeout']}s")
            time.sleep(min(15, self.left()))
            update = self.call("DescribeUpdate", self.eks.describe_update, updateId=update["id"], **describe)["update"]
        if update.get("status") in ("Failed", "Cancelled"):
            errors = "; ".join(f"{e.get('errorCode')}: {e.get('errorMessage')}" for e in update.get("errors") or [])
            self.fail(f"{self.ident}: update {update['id']} ({update.get('type')}) {update['status']}: "
                      f"{errors or 'no error given'}")
        return update
