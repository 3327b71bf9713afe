# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """Options of the modules that run nvidia-ctk (container_toolkit_config, container_runtime_config)."""

    DOCUMENTATION = r"""
options:
  nvidia_ctk:
    description: Path of C(nvidia-ctk). Default C(nvidia-ctk) found on the PATH.
    type: path
"""
