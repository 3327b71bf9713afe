# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The AWS connection options of the collection's AWS modules (plugins/module_utils/_aws_common.py): amazon.aws's
    (its aws_argument_spec) and allow_http_endpoint_url. Written here rather than taken from amazon.aws's
    fragments, so the modules' documentation renders where amazon.aws is not installed (Galaxy's importer)."""

    DOCUMENTATION = r"""
options:
  access_key:
    description:
      - AWS access key ID. Env C(AWS_ACCESS_KEY_ID) or C(AWS_ACCESS_KEY). Unset - boto3's chain (shared files,
        instance or pod role).
      - Refused together with O(profile) (as amazon.aws's modules refuse it).
    type: str
    aliases: [aws_access_key_id, aws_access_key]
  secret_key:
    description: AWS secret access key. Env C(AWS_SECRET_ACCESS_KEY) or C(AWS_SECRET_KEY). Never printed (C(no_log)).
    type: str
    aliases: [aws_secret_access_key, aws_secret_key]
  session_token:
    description: AWS session token for temporary credentials. Env C(AWS_SESSION_TOKEN). Never printed (C(no_log)).
    type: str
    aliases: [aws_session_token]
  profile:
    description: Profile of the shared AWS config and credentials files. Env C(AWS_PROFILE) or C(AWS_DEFAULT_PROFILE).
    type: str
    aliases: [aws_profile]
  region:
    description:
      - AWS region. Env C(AWS_REGION) or C(AWS_DEFAULT_REGION); unset - the profile's.
      - Without O(endpoint_url), a region where the installed botocore has no endpoint for the service fails before
        any request, naming the region and the fix.
    type: str
    aliases: [aws_region]
  endpoint_url:
    description:
      - URL for every AWS request, for a VPC endpoint or a test server such as moto. Env C(AWS_URL); unset -
        boto3's (C(AWS_ENDPOINT_URL), C(AWS_ENDPOINT_URL_<SERVICE>), a profile's C(endpoint_url), else AWS's
        public endpoint).
      - Every request is signed (SigV4 - an C(Authorization) header that can be replayed for some minutes) and
        carries the O(session_token). A plain C(http://) endpoint, from this option or from boto3's settings, is
        refused before any request unless its host is a loopback address (C(localhost), C(127.0.0.0/8), C(::1)) or
        O(allow_http_endpoint_url=true); so is a URL with user information (C(user:password@)).
    type: str
    aliases: [aws_endpoint_url]
  allow_http_endpoint_url:
    description:
      - Send requests to a plain C(http://) endpoint (O(endpoint_url), C(AWS_ENDPOINT_URL)) on a host other than
        loopback. B(Unsafe) - the request signatures and the session token cross the network unencrypted, readable
        and replayable by anyone on the path; for a test server on a network you trust only.
    type: bool
    default: false
    version_added: 1.1.0
  validate_certs:
    description: Verify the endpoints' TLS certificates. Prefer O(aws_ca_bundle) to turning this off.
    type: bool
    default: true
  aws_ca_bundle:
    description:
      - Path of a PEM bundle of the CAs that the endpoints' TLS certificates are verified against (botocore's
        C(verify)), for an endpoint with a private CA. Env C(AWS_CA_BUNDLE). Unset - botocore's (the
        C(AWS_CA_BUNDLE) variable, the profile's C(ca_bundle), else certifi's bundle).
      - Ignored with O(validate_certs=false).
    type: path
    version_added: 1.1.0
  aws_config:
    description:
      - Settings of botocore's client configuration (the arguments of C(botocore.config.Config), for example
        C(connect_timeout), C(read_timeout), C(retries), C(proxies), C(user_agent_appid)). They override the
        modules' own - C(retries) in mode C(standard) with 8 attempts, and the C(k8sgpu.nvidia) user agent suffix.
      - An unknown key fails the task before any request.
    type: dict
    version_added: 1.1.0
  debug_botocore_endpoint_logs:
    description:
      - Return the AWS operations the task called, as C(resource_actions) (a sorted list of
        C(<service>:<Operation>), for example C(eks:DescribeCluster)), also when it fails - for writing a least
        privilege IAM policy. Env C(ANSIBLE_DEBUG_BOTOCORE_LOGS).
    type: bool
    default: false
    version_added: 1.1.0
notes:
  - The connection options are amazon.aws's (C(aws_argument_spec) and C(get_aws_connection_info) of its
    module_utils), so every option of C(group/amazon.aws.aws), which C(group/k8sgpu.nvidia.aws) extends, is taken
    here too, with the same meaning. The boto3 session and clients are the collection's own rather than
    amazon.aws's C(AnsibleAWSModule) - one session for all of a task's clients and botocore's service model (read
    to check values before any request), botocore's C(standard) retry mode, and the plain-http endpoint check; and
    on ansible-core 2.19 C(AnsibleAWSModule) (amazon.aws 10.1.2) adds a deprecation warning (C(Passing warnings to
    exit_json)) to every task where the module warns.
requirements:
  - boto3 >= 1.37.35 and botocore >= 1.37.35 (the first EKS model with C(AL2023_ARM_64_NVIDIA))
  - the amazon.aws collection >= 9.0.0 (its connection options)
"""
