# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The `attributes` the collection's modules share; used with ansible.builtin.action_common_attributes, which
    describes check_mode, diff_mode and platform. A module's own `attributes` entries win over these."""

    # Most modules: any POSIX host.
    DOCUMENTATION = r"""
options: {}
attributes:
  platform:
    platforms: posix
"""

    # k8sgpu.nvidia.attributes.read_only: modules that only read and report.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    details: The module changes nothing.
"""
