# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter openpgp_fingerprints of the driver and container_toolkit roles; the logic is in module_utils/_openpgp.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: openpgp_fingerprints
version_added: 1.0.0
short_description: Fingerprints of the primary keys of ASCII-armoured OpenPGP public key blocks
description:
  - Computes each primary public key's fingerprint as RFC 9580 defines it (SHA-1 for v4 keys, SHA-256 for v5 and
    v6), upper-case hex without spaces, as C(gpg --with-colons) prints it. Used to pin a repository's signing key
    (C(container_toolkit_repo_key_fingerprint)) on the controller, without gpg on the hosts.
  - Reads every armoured block of the text (since 1.1.0; the first one only before).
  - Fails on text that is not an armoured public key block. To pin a key, use P(k8sgpu.nvidia._openpgp_key#filter),
    which also refuses a second key, a second block and data around the block.
positional: _input
options:
  _input:
    description: The key's ASCII-armoured text.
    type: str
    required: true
"""

EXAMPLES = r"""
fingerprints: "{{ lookup('ansible.builtin.file', 'gpgkey') | k8sgpu.nvidia.openpgp_fingerprints }}"
"""

RETURN = r"""
_value:
  description: The fingerprints, in the order of the keys.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _openpgp


def openpgp_fingerprints(text):
    """module_utils/_openpgp.py's openpgp_fingerprints, its errors as the filter's."""
    try:
        return _openpgp.openpgp_fingerprints(text)
    except _openpgp.OpenPGPError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"openpgp_fingerprints": openpgp_fingerprints}
