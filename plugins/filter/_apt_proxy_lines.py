# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter apt_proxy_lines of the driver and container_toolkit roles; the logic is in module_utils/_apt_proxy.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _apt_proxy_lines
version_added: 1.0.0
short_description: >-
  Private to the roles container_toolkit and driver, not API: apt.conf lines that send one repository's host, or
  every host, through a proxy
description:
  - Returns the lines C(Acquire::http::Proxy::<host> "<proxy>";) and C(Acquire::https::Proxy::<host> "<proxy>";)
    for the host of an C(http://) or C(https://) repository URL, so that only that host goes through the proxy
    (or, with V(DIRECT), through none). A C(user:password@) in the proxy URL is left out of these lines (they go to a
    world-readable file); P(k8sgpu.nvidia._apt_proxy_auth#filter) gives the credentials for C(/etc/apt/auth.conf.d/).
  - With an empty URL (every host, as the driver role sets apt's proxy) returns the one line
    C(Acquire::http::Proxy "<proxy>";).
  - The proxy in these lines is rebuilt from its parsed scheme, host and port, never copied; a proxy URL holding
    anything else (a quote, C(;), a brace, a backslash, white space, a control character, a path other than C(/),
    a query or a fragment) fails naming the variable, with the value not shown (issue 34).
  - Returns an empty list when the proxy is empty (apt's own settings apply) and for a C(file://) repository, which
    apt reads from the host's disk without a proxy.
  - Fails naming the variables for a repository URL of another scheme, or a proxy that is not an C(http://),
    C(https://) or C(socks5h://) URL, V(DIRECT) or empty.
positional: _input, proxy
options:
  _input:
    description: The repository URL; empty for every host.
    type: str
    required: true
  proxy:
    description: Empty, V(DIRECT), or a proxy URL.
    type: str
    required: true
  url_name:
    description: Name of the URL's variable, for error messages.
    type: str
    default: url
  proxy_name:
    description: Name of the proxy's variable, for error messages.
    type: str
    default: proxy
"""

EXAMPLES = r"""
lines: "{{ 'https://nvidia.github.io/libnvidia-container' | k8sgpu.nvidia._apt_proxy_lines('http://proxy:3128') }}"
# ['Acquire::http::Proxy::nvidia.github.io "http://proxy:3128";',
#  'Acquire::https::Proxy::nvidia.github.io "http://proxy:3128";']
none: "{{ 'file:///srv/mirror/libnvidia-container' | k8sgpu.nvidia._apt_proxy_lines('http://proxy:3128') }}"
# []
every_host: "{{ '' | k8sgpu.nvidia._apt_proxy_lines('http://user:pw@proxy:3128', proxy_name='driver_apt_proxy') }}"
# ['Acquire::http::Proxy "http://proxy:3128";']
"""

RETURN = r"""
_value:
  description: The apt.conf lines; empty when no proxy file is to be written.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _apt_proxy


def apt_proxy_lines(url, proxy, url_name="url", proxy_name="proxy"):
    """module_utils/_apt_proxy.py's apt_proxy_lines, its errors as the filter's."""
    try:
        return _apt_proxy.apt_proxy_lines(url, proxy, url_name, proxy_name)
    except _apt_proxy.AptProxyError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_apt_proxy_lines": apt_proxy_lines}
