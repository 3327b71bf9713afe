# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apt_source_uri filter; the logic is in module_utils/_url.py (shared with the role-input rules)."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _apt_source_uri
version_added: 2.0.0
short_description: 'Private to the roles container_toolkit and driver, not API: the URIs value of a deb822 apt source, rebuilt from a checked URL'
description:
  - Parses a repository URL (http, https or file), refuses whitespace, newlines and control characters anywhere in
    it (checked on the raw text, before parsing), a query or fragment, and user information except over C(https://),
    and returns the URL written again from its parsed parts without its user information, so nothing but a URL, and
    never a password, reaches the C(URIs:) line of a source file (mode 0644).
  - The user and password of an C(https://user:password@host/path) URL go to apt through
    P(k8sgpu.nvidia._apt_source_auth#filter) instead, in a file under C(/etc/apt/auth.conf.d/) that only root reads.
  - The driver and container_toolkit roles render their deb822 sources with it; their inputs are also checked by
    M(k8sgpu.nvidia.role_inputs) before any change, so this is the second line of defence, and the one for the
    mirror the driver role reads from the host's own sources.
positional: _input
options:
  _input:
    description: The repository URL.
    type: str
    required: true
  name:
    description: The variable the URL came from, for the error message.
    type: str
    default: the repository URL
"""

EXAMPLES = r"""
uris: "{{ driver_mirror_url | k8sgpu.nvidia._apt_source_uri(name='driver_mirror_url') }}"
# 'http://deb.example/debian\nTrusted: yes' fails: driver_mirror_url is refused (value not shown): it holds whitespace, ...
# 'https://ci:s3cret@mirror.example/debian' gives https://mirror.example/debian (the credentials: apt_source_auth)
"""

RETURN = r"""
_value:
  description: The URL from its parsed parts (scheme in lower case, host, port and path as given), without user
    information.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _url


def apt_source_uri(value, name="the repository URL"):
    """module_utils/_url.py's rebuild() for http, https and file URLs (credentials dropped, accepted over https only);
    a refusal names the variable, not the value."""
    try:
        return _url.rebuild(value, schemes=("http", "https", "file"), userinfo="https")
    except _url.URLError as exc:
        raise AnsibleFilterError("%s is refused (value not shown): %s; give http(s)://host[:port]/path or "
                                 "file:///path and nothing else" % (name, exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_apt_source_uri": apt_source_uri}
