# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The backup options of the modules that replace configuration files (plugins/module_utils/_atomic_file.py:
    docker_daemon_config, container_toolkit_config, container_runtime_config)."""

    DOCUMENTATION = r"""
options:
  backup:
    description:
      - Before changing an existing file, copy it to C(<backup_dir>/<path>.<date>T<time>), keeping its owner, group,
        mode and times, and return that path as C(backup_file) (of the file's entry in C(files), for a module that
        writes several files).
    type: bool
    default: true
  backup_dir:
    description:
      - Directory for the backups, which mirror each file's path under it. Directories created for them get mode
        C(0700).
      - It must be an absolute path outside the directory of each file the module writes (a runtime that reads that
        directory, as CRI-O reads C(crio.conf.d), would load the backups); the task fails otherwise.
    type: path
    default: /var/backups/k8sgpu.nvidia
"""
