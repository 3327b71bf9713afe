# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The openpgp_key filter; the logic is in module_utils/_openpgp.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _openpgp_key
version_added: 1.1.0
short_description: >-
  Private to the roles container_toolkit and driver, not API: the one public key of an armoured OpenPGP block,
  checked against a pinned fingerprint
description:
  - Checks that the text is exactly one ASCII-armoured public key block (white space around it only; its CRC-24
    checksum, when it has one, matches) holding exactly one primary public key, followed only by that key's user ids,
    user attributes, signatures and subkeys, and that the key's fingerprint (RFC 9580; SHA-1 for v4, SHA-256 for v6)
    equals O(fingerprint).
  - Returns that key armoured again from its own packets (armour headers and gpg's trust packets dropped), so the
    keyring a role writes is the key that was checked and nothing else.
  - Fails, naming O(what), on a second primary key in the block, a second block, data before or after the block,
    packets that are not part of a public key, a damaged block, or another fingerprint. Used by the
    container_toolkit role before it writes anything (issue 34).
  - Subkey binding signatures are not verified here; apt's gpgv does, and ignores a subkey without a valid binding
    by the primary key.
positional: _input, fingerprint
options:
  _input:
    description: The key's ASCII-armoured text.
    type: str
    required: true
  fingerprint:
    description: The pinned fingerprint (40 or 64 hex digits; spaces, C(0x) and case do not matter). Empty checks
      the key's form only.
    type: str
    default: ""
  what:
    description: What the key is, for error messages (for example the host and the key's URL).
    type: str
    default: the key
"""

EXAMPLES = r"""
keyring: >-
  {{ lookup('ansible.builtin.file', 'gpgkey')
     | k8sgpu.nvidia._openpgp_key('C95B321B61E88C1809C4F759DDCAE044F796ECB0', what='the NVIDIA repository key') }}
"""

RETURN = r"""
_value:
  description: The key, ASCII-armoured, built from its own packets only.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _openpgp


def openpgp_key(text, fingerprint="", what="the key"):
    """module_utils/_openpgp.py's openpgp_key, its errors as the filter's."""
    try:
        return _openpgp.openpgp_key(text, fingerprint, what)
    except _openpgp.OpenPGPError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_openpgp_key": openpgp_key}
