# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apt_proxy_redact filter (its code is apt_proxy_lines.py's, beside the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: apt_proxy_redact
version_added: 1.0.0
short_description: A proxy URL with its password replaced by ***
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
shown: "{{ 'http://build:secret@proxy:3128' | k8sgpu.nvidia.apt_proxy_redact }}"
# http://build:***@proxy:3128
"""

RETURN = r"""
_value:
  description: The URL without its password.
  type: str
"""

from ansible_collections.k8sgpu.nvidia.plugins.filter.apt_proxy_lines import apt_proxy_redact


class FilterModule:
    def filters(self) -> dict:
        return {"apt_proxy_redact": apt_proxy_redact}
