#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_toolkit_config
short_description: Set keys of the NVIDIA Container Runtime's config.toml through nvidia-ctk config
version_added: 1.0.0
description:
  - Sets keys of the NVIDIA Container Toolkit's own configuration, C(/etc/nvidia-container-runtime/config.toml), which
    C(nvidia-container-runtime) and its hook read at every container start, with
    C(nvidia-ctk config --in-place --set <key>=<value>), the command NVIDIA documents and the toolkit package's postinst
    runs. The file is not edited as TOML here; nvidia-ctk knows its keys (an unknown key or a wrong type is refused) and
    its layout (keys at their default values commented out), so the file stays what a package upgrade writes.
  - nvidia-ctk has no check or diff mode and makes no backup, so it runs on a copy in a scratch directory; the result
    is compared with the real file, which is replaced only when it differs, atomically (temporary file and rename;
    owner, group and mode kept), after a backup under O(backup_dir). A second run changes nothing.
  - Used by the M(k8sgpu.nvidia.container_toolkit) role for GPU isolation
    (C(accept-nvidia-visible-devices-envvar-when-unprivileged=false),
    C(accept-nvidia-visible-devices-as-volume-mounts=true)).
  - The module does B(not) restart anything. nvidia-container-runtime reads the file when a container is created, so
    containers created afterwards follow it and running containers keep the devices they were given.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.backup
  - k8sgpu.nvidia.nvidia_ctk
attributes:
  check_mode:
    support: full
    details: Runs nvidia-ctk on a scratch copy only and reports whether the file would change, with the diff.
  diff_mode:
    support: full
    details: The file's text before and after, headed with its path, with secrets redacted as
      M(k8sgpu.nvidia.container_runtime_config) redacts its diff (since 1.1.0).
options:
  path:
    description:
      - The toolkit's configuration file. A missing file counts as the toolkit's defaults and is created (mode C(0644)).
        A symbolic link is kept and the file it points to is updated.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  settings:
    description:
      - The keys to set and their values, as C(nvidia-ctk config --set) names them, for example
        C(accept-nvidia-visible-devices-envvar-when-unprivileged) or C(nvidia-container-runtime.log-level) (a dotted
        key is a key of a table). Booleans, numbers, strings, or lists of strings (written as lists).
    type: dict
    required: true
notes:
  - Fails, changing nothing, when nvidia-ctk is missing, when the file cannot be read, or when nvidia-ctk refuses a key
    or a value; the message names the file and gives nvidia-ctk's last lines.
requirements:
  - nvidia-ctk from the NVIDIA Container Toolkit (package C(nvidia-container-toolkit-base)), 1.14 or later.
seealso:
  - module: k8sgpu.nvidia.container_runtime_config
  - name: NVIDIA Container Toolkit, configuration
    description: The keys of config.toml and the nvidia-ctk config command.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
"""

EXAMPLES = r"""
- name: Give GPUs only to containers the device plugin (or a privileged container) asks for
  k8sgpu.nvidia.container_toolkit_config:
    settings:
      accept-nvidia-visible-devices-envvar-when-unprivileged: false
      accept-nvidia-visible-devices-as-volume-mounts: true
  register: toolkit_config

- name: Debug logging of nvidia-container-runtime to its own file
  k8sgpu.nvidia.container_toolkit_config:
    settings:
      nvidia-container-runtime.debug: /var/log/nvidia-container-runtime.log
      nvidia-container-runtime.log-level: debug
"""

RETURN = r"""
path:
  description: The file (symbolic links resolved).
  returned: always
  type: str
  sample: /etc/nvidia-container-runtime/config.toml
created:
  description: Whether the file did not exist before.
  returned: always
  type: bool
backup_file:
  description: The copy of the previous file, made with O(backup=true) when an existing file was changed.
  returned: when a backup was made
  type: str
  sample: /var/backups/k8sgpu.nvidia/etc/nvidia-container-runtime/config.toml.2026-05-04T10:21:07.316250
command:
  description: The nvidia-ctk command that gives the same result on the real file.
  returned: always
  type: list
  elements: str
  sample: [/usr/bin/nvidia-ctk, --quiet, config, --config-file=/etc/nvidia-container-runtime/config.toml, --in-place,
           --set=accept-nvidia-visible-devices-as-volume-mounts=true,
           --set=accept-nvidia-visible-devices-envvar-when-unprivileged=false]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import (
    DEFAULT_BACKUP_DIR,
    SECRET_FILE_MODE,
    ConfigFileError,
    check_backup_dir,
    write_file,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_ctk import (
    TOOLKIT_CONFIG_PATH,
    NvidiaCtkError,
    plan_config,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._redact import redact_toml, toml_holds_secret


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default=TOOLKIT_CONFIG_PATH),
            settings=dict(type="dict", required=True),
            nvidia_ctk=dict(type="path"),
            backup=dict(type="bool", default=True),
            backup_dir=dict(type="path", default=DEFAULT_BACKUP_DIR),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.realpath(p["path"])
    nvidia_ctk = p["nvidia_ctk"] or module.get_bin_path("nvidia-ctk")
    if not nvidia_ctk or not os.access(nvidia_ctk, os.X_OK):
        module.fail_json(
            msg=f"nvidia-ctk was not found ({p['nvidia_ctk'] or 'PATH'}); install nvidia-container-toolkit-base "
            f"first. {path} was not changed.",
        )
    try:
        check_backup_dir(path, p["backup_dir"])
        change, cmd = plan_config(module.run_command, nvidia_ctk, path, p["settings"])
    except (NvidiaCtkError, ConfigFileError) as exc:
        module.fail_json(msg=str(exc), path=path)

    result = dict(changed=change.changed, path=path, created=change.before is None, command=cmd)
    if module._diff and change.changed:
        result["diff"] = dict(
            before="" if change.before is None else redact_toml(change.before.decode("utf-8", "replace")),
            after=redact_toml(change.after.decode("utf-8", "replace")),
            before_header=path,
            after_header=path,
        )
    if module.check_mode or not change.changed:
        module.exit_json(**result)
    try:
        backup_file = write_file(module, path, change.after, exists=change.before is not None, backup=p["backup"],
                                 backup_dir=p["backup_dir"],
                                 new_mode=SECRET_FILE_MODE if toml_holds_secret(change.after.decode("utf-8", "replace"))
                                 else None)
    except ConfigFileError as exc:
        module.fail_json(msg=str(exc), **result)
    if backup_file:
        result["backup_file"] = backup_file
    module.exit_json(**result)


if __name__ == "__main__":
    main()
