# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the collection's AWS modules share.

Connection options with amazon.aws's names and aliases (access_key/aws_access_key_id, ...), but no dependency on
that collection: boto3 sessions and clients are built here. Options left unset fall back to boto3's own chain
(AWS_* environment variables, shared config and credentials files, instance or pod roles). Requests use
botocore's "standard" retry mode (throttling and transient errors retried with backoff).
"""
from __future__ import annotations

import math
import time
import traceback
from datetime import datetime

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

# The oldest boto3/botocore whose EKS model has the AL2023 NVIDIA AMI types (see requirements.txt).
MIN_BOTOCORE = (1, 37, 35)

AWS_ARG_SPEC = {
    "access_key": {"type": "str", "aliases": ["aws_access_key_id", "aws_access_key"], "no_log": False},
    "secret_key": {"type": "str", "aliases": ["aws_secret_access_key", "aws_secret_key"], "no_log": True},
    "session_token": {"type": "str", "aliases": ["aws_session_token"], "no_log": True},
    "profile": {"type": "str", "aliases": ["aws_profile"]},
    "region": {"type": "str", "aliases": ["aws_region"]},
    "endpoint_url": {"type": "str", "aliases": ["aws_endpoint_url"]},
    "validate_certs": {"type": "bool", "default": True},
}


def aws_module(argument_spec: dict, **kwargs) -> AnsibleModule:
    """An AnsibleModule with the connection options; fails naming boto3 when it cannot be imported."""
    module = AnsibleModule(argument_spec={**argument_spec, **AWS_ARG_SPEC}, **kwargs)
    if not HAS_BOTO3:
        module.fail_json(msg=missing_required_lib("boto3 and botocore (pip install -r requirements.txt)"),
                         exception=BOTO3_IMPORT_ERROR)
    version = tuple(int(p) for p in botocore.__version__.split(".")[:3] if p.isdigit())
    if version < MIN_BOTOCORE:
        module.warn(f"botocore {botocore.__version__} is older than {'.'.join(map(str, MIN_BOTOCORE))}: its EKS model "
                    "lacks AMI types this module accepts; pip install -r requirements.txt")
    return module


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
    """boto3 clients for one module run, all with the same session, endpoint and retry settings."""

    def __init__(self, module: AnsibleModule, services=()):
        """services: the AWS services the module calls; without endpoint_url, a region where botocore knows none
        of them fails here, before any request, naming the region (an unknown region otherwise gives the
        endpoint's raw connection error)."""
        p = module.params
        self.module = module
        try:
            self.session = boto3.session.Session(
                aws_access_key_id=p["access_key"], aws_secret_access_key=p["secret_key"],
                aws_session_token=p["session_token"], profile_name=p["profile"], region_name=p["region"])
        except BotoCoreError as e:
            module.fail_json(msg=f"AWS session: {e}")
        if not self.session.region_name:
            module.fail_json(msg="no AWS region: set the region option or AWS_REGION (or a profile with a region)")
        if not p["endpoint_url"]:
            msg = region_error(self.session, self.session.region_name, services)
            if msg:
                module.fail_json(msg=msg)
        self._clients: dict[str, object] = {}

    def client(self, service: str):
        if service not in self._clients:
            p = self.module.params
            self._clients[service] = self.session.client(
                service, endpoint_url=p["endpoint_url"], verify=p["validate_certs"],
                config=Config(retries={"mode": "standard", "max_attempts": 8},
                              user_agent_extra="k8sgpu.nvidia"))
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
