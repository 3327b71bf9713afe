# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the collection's AWS modules share.

Connection options with amazon.aws's names and aliases (access_key/aws_access_key_id, ...), but no dependency on
that collection: boto3 sessions and clients are built here. Options left unset fall back to boto3's own chain
(AWS_* environment variables, shared config and credentials files, instance or pod roles). Requests use
botocore's "standard" retry mode (throttling and transient errors retried with backoff).
"""
from __future__ import annotations

import traceback

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
