# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The AWS connection options of the collection's AWS modules (plugins/module_utils/_aws_common.py)."""

    DOCUMENTATION = r"""
options:
  access_key:
    description: AWS access key ID. Unset - boto3's chain (C(AWS_ACCESS_KEY_ID), shared files, instance role).
    type: str
    aliases: [aws_access_key_id, aws_access_key]
  secret_key:
    description: AWS secret access key. Unset - boto3's chain. Never printed (C(no_log)).
    type: str
    aliases: [aws_secret_access_key, aws_secret_key]
  session_token:
    description: AWS session token for temporary credentials. Unset - boto3's chain. Never printed (C(no_log)).
    type: str
    aliases: [aws_session_token]
  profile:
    description: Profile of the shared AWS config and credentials files.
    type: str
    aliases: [aws_profile]
  region:
    description:
      - AWS region. Unset - C(AWS_REGION), C(AWS_DEFAULT_REGION) or the profile's.
      - Without O(endpoint_url), a region where the installed botocore has no endpoint for the service fails before
        any request, naming the region and the fix.
    type: str
    aliases: [aws_region]
  endpoint_url:
    description: URL for every AWS request, for a VPC endpoint or a test server such as moto.
    type: str
    aliases: [aws_endpoint_url]
  validate_certs:
    description: Verify the endpoints' TLS certificates.
    type: bool
    default: true
requirements:
  - boto3 >= 1.37.35 and botocore >= 1.37.35 (the first EKS model with C(AL2023_ARM_64_NVIDIA))
"""
