# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apt_proxy_redact filter; the logic is in module_utils/_apt_proxy.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _apt_proxy_redact
version_added: 1.0.0
short_description: 'Private to the roles container_toolkit and driver, not API: A proxy URL with its password replaced by ***'
description:
  - For messages that name the proxy; a URL without credentials is returned as it is.
positional: _input
options:
  _input:
    description: A proxy URL (or any string).
    type: str
    required: true
"""

EXAMPLES = r"""
shown: "{{ 'http://build:secret@proxy:3128' | k8sgpu.nvidia._apt_proxy_redact }}"
# http://build:***@proxy:3128
"""

RETURN = r"""
_value:
  description: The URL without its password.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _apt_proxy


def apt_proxy_redact(proxy):
    """module_utils/_apt_proxy.py's apt_proxy_redact, its errors as the filter's."""
    try:
        return _apt_proxy.apt_proxy_redact(proxy)
    except _apt_proxy.AptProxyError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_apt_proxy_redact": apt_proxy_redact}
