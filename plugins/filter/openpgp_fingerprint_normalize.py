# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The openpgp_fingerprint_normalize filter; the logic is in module_utils/_openpgp.py (shared with the filters it works with)."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: openpgp_fingerprint_normalize
version_added: 1.0.0
short_description: A fingerprint as written by people, in the form openpgp_fingerprints returns
description:
  - Removes white space and a leading C(0x), and upper-cases the hex digits.
positional: _input
options:
  _input:
    description: A fingerprint, for example C(C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0).
    type: str
    required: true
"""

EXAMPLES = r"""
pinned: "{{ 'c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0' | k8sgpu.nvidia.openpgp_fingerprint_normalize }}"
"""

RETURN = r"""
_value:
  description: The fingerprint, upper-case hex without spaces.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _openpgp


def openpgp_fingerprint_normalize(fingerprint):
    """module_utils/_openpgp.py's openpgp_fingerprint_normalize, its errors as the filter's."""
    try:
        return _openpgp.openpgp_fingerprint_normalize(fingerprint)
    except _openpgp.OpenPGPError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"openpgp_fingerprint_normalize": openpgp_fingerprint_normalize}
