# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter aws_endpoint_check: playbooks/eks.yml's check of k8sgpu_aws_endpoint_url, with the rule the collection's
AWS modules apply to their endpoint_url (check_endpoint of module_utils/_aws_common.py), before the playbook gives
the endpoint to amazon.aws's modules, which have no such check."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: aws_endpoint_check
version_added: 2.0.0
short_description: Refuse an AWS endpoint URL that must not receive signed requests
description:
  - Returns the URL unchanged when it may receive SigV4-signed requests and the session token; otherwise fails
    naming the variable, the URL and the fix.
  - The rule is the collection's AWS modules' one for their C(endpoint_url) (M(k8sgpu.nvidia.eks_cluster),
    M(k8sgpu.nvidia.eks_nodegroup), M(k8sgpu.nvidia.eks_pod_identity)) - an C(https://) URL, or C(http://) only
    on a loopback host (C(127.0.0.0/8), C(::1), C(localhost)), and no user information in it.
  - C(playbooks/eks.yml) checks C(k8sgpu_aws_endpoint_url) with it as its first task, and again where its
    C(module_defaults) give the endpoint to every AWS module, amazon.aws's included (C(iam_role), C(iam_policy),
    C(ec2_launch_template)), which would otherwise send signed requests to any endpoint.
  - An empty string or null is returned as it is (no endpoint - boto3's own).
positional: _input
options:
  _input:
    description: The endpoint URL.
    type: str
    required: true
  variable:
    description: The variable's name, for the message.
    type: str
    default: k8sgpu_aws_endpoint_url
"""

EXAMPLES = r"""
endpoint_url: "{{ k8sgpu_aws_endpoint_url | k8sgpu.nvidia.aws_endpoint_check }}"
"""

RETURN = r"""
_value:
  description: The URL, unchanged.
  type: str
"""

from typing import Any

from ansible.errors import AnsibleFilterError

FIX = ("Use the endpoint's https:// URL, or a loopback address (127.0.0.1, ::1, localhost) for a local test server "
       "such as moto; the playbook has no opt-in for plain http, as amazon.aws's modules have no guard of their own")


def aws_endpoint_check(url: Any, variable: str = "k8sgpu_aws_endpoint_url") -> str | None:
    # Imported here, not at the top: module_utils/_aws_common imports boto3, and Ansible imports every filter file
    # of the collection in each task that uses one of its filters (tests/unit/plugins/test_filter_imports.py).
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _aws_common  # pylint: disable=import-outside-toplevel

    if url is None or url == "":
        return url
    if not isinstance(url, str):
        raise AnsibleFilterError(f"aws_endpoint_check: {variable} must be a URL string (https://...)")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        # urlsplit drops tabs and newlines, so the rule below would not see them
        raise AnsibleFilterError(f"aws_endpoint_check: {variable} {url!r} has whitespace or control characters: "
                                 "give the endpoint's URL alone")
    try:
        _aws_common.check_endpoint(url, source=variable, fix=FIX)
    except _aws_common.EndpointError as exc:
        raise AnsibleFilterError(f"aws_endpoint_check: {exc}") from None
    return url


class FilterModule:
    def filters(self) -> dict:
        return {"aws_endpoint_check": aws_endpoint_check}
