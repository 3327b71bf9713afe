# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apt_source_auth filter; the logic is in module_utils/_url.py (shared with apt_source_uri and the role-input
rules)."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _apt_source_auth
version_added: 2.0.0
short_description: >-
  Private to the roles container_toolkit and driver, not API: apt_auth.conf lines for a repository URL that
  carries a user and password
description:
  - For an C(https://user:password@host[:port]/path) repository URL, the C(machine), C(login) and C(password) lines
    of apt_auth.conf(5) (user and password percent-decoded; the machine is the URL without its credentials, which apt
    matches by scheme, host, port and path prefix); an empty list for a URL without credentials.
  - The driver and container_toolkit roles write these lines to a file under C(/etc/apt/auth.conf.d/) with mode
    C(0600), no diff and no log, exactly as a proxy's credentials (P(k8sgpu.nvidia._apt_proxy_auth#filter)); the
    source file gets the URL without them (P(k8sgpu.nvidia._apt_source_uri#filter)).
  - Credentials are refused over C(http://) (anyone on the way would read them) and where the user or password
    decodes to whitespace or a control character (auth.conf cannot hold them). A refusal names the variable, never the
    value.
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
auth_lines: "{{ driver_mirror_url | k8sgpu.nvidia._apt_source_auth(name='driver_mirror_url') }}"
# 'https://ci:s3%40cret@mirror.example/debian' gives
# ['machine https://mirror.example/debian', 'login ci', 'password s3@cret']
# 'https://mirror.example/debian' gives []
"""

RETURN = r"""
_value:
  description: The machine, login and password lines, or an empty list.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _url


def apt_source_auth(value, name="the repository URL"):
    """module_utils/_url.py's apt_auth_lines(); a refusal names the variable, not the value."""
    try:
        return _url.apt_auth_lines(value)
    except _url.URLError as exc:
        raise AnsibleFilterError("%s is refused (value not shown): %s" % (name, exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_apt_source_auth": apt_source_auth}
