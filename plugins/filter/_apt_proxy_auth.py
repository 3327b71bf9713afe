# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apt_proxy_auth filter; the logic is in module_utils/_apt_proxy.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _apt_proxy_auth
version_added: 1.0.0
short_description: 'Private to the roles container_toolkit and driver, not API: apt_auth.conf lines for a proxy URL that carries a user and password'
description:
  - Returns C(machine <scheme>://<host>[:<port>]), C(login <user>) and C(password <password>) for a proxy URL
    with C(user:password@) (percent-encoding decoded), for a file under C(/etc/apt/auth.conf.d/) that only root
    reads (apt_auth.conf(5)); M(k8sgpu.nvidia.container_toolkit) writes it with mode C(0600), no diff and no log.
  - Returns an empty list for an empty proxy, V(DIRECT), or a proxy URL without credentials.
  - Fails naming the variable when the user name is empty or the user name or password holds white space.
positional: _input
options:
  _input:
    description: Empty, V(DIRECT), or a proxy URL.
    type: str
    required: true
  proxy_name:
    description: Name of the proxy's variable, for error messages.
    type: str
    default: proxy
"""

EXAMPLES = r"""
lines: "{{ 'http://build:s%40cret@proxy.example:3128' | k8sgpu.nvidia._apt_proxy_auth }}"
# ['machine http://proxy.example:3128', 'login build', 'password s@cret']
"""

RETURN = r"""
_value:
  description: The lines; empty when there are no credentials.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _apt_proxy


def apt_proxy_auth(proxy, proxy_name="proxy"):
    """module_utils/_apt_proxy.py's apt_proxy_auth, its errors as the filter's."""
    try:
        return _apt_proxy.apt_proxy_auth(proxy, proxy_name)
    except _apt_proxy.AptProxyError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_apt_proxy_auth": apt_proxy_auth}
