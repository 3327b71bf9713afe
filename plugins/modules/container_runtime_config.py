#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_runtime_config
short_description: Make the NVIDIA runtime known to containerd or CRI-O, and their default, through nvidia-ctk
version_added: 1.0.0
description:
  - Runs C(nvidia-ctk runtime configure) for containerd (config versions 2 and 3) or CRI-O, which writes the
    C(nvidia) runtime into a drop-in file (by default C(/etc/containerd/conf.d/99-nvidia.toml) or
    C(/etc/crio/crio.conf.d/99-nvidia.toml)) and, for containerd, adds an C(imports) entry for the drop-in
    directory to the main C(config.toml). nvidia-ctk copies the options of the existing runc runtime (such as
    C(SystemdCgroup)) into the nvidia one, and knows the CRI plugin name of each config version.
  - Written because nvidia-ctk cannot be used with check or diff mode (its C(--dry-run) prints the drop-in and
    the main file one after the other with no separator), makes no backup and writes in place. This module runs
    nvidia-ctk on copies of the files in a scratch directory, compares the results with the real files, and
    replaces only those that differ, each atomically (temporary file and rename, owner, group and mode kept)
    after a backup. A second run changes nothing. A file it creates is mode C(0600) when its content holds a secret
    (what the diff redacts; since 1.1.0), else C(0644).
  - When nvidia-ctk rewrites containerd's main file to add C(imports), it writes the file in its own TOML layout;
    comments in that file are lost. The settings are kept. The diff shows exactly what changes.
  - Backups go to O(backup_dir), never beside the files. CRI-O loads every file of C(crio.conf.d) (and of the
    directories under it) in lexical order, the later winning, so a backup there would override the new drop-in.
    Backups that earlier versions of this module left beside the drop-in (C(<drop-in>.<pid>.<date>@<time>~)) are
    moved to O(backup_dir) and reported in RV(backups_moved); that changes what CRI-O loads, so the task reports a
    change.
  - This module does B(not) restart the runtime. Notify a handler that restarts it and restores RV(files[].backup_file)
    (or removes a file RV(files[].created) by the task) if the restart fails, as the examples show.
  - With O(unit), it also says whether the running daemon has read both files as they are (RV(loaded)); a run
    stopped between the write and the restart leaves the runtime on the older content, and the next run finds the
    files right.
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
    details: Runs nvidia-ctk on scratch copies only and reports what would change, with the diff; writes nothing.
  diff_mode:
    support: full
    details:
      - Each changed file's text before and after, headed with its path, with secrets redacted (since 1.1.0) - the
        collection's one redaction, that of M(k8sgpu.nvidia.docker_daemon_config), on TOML - every value of a table
        named like a secret (containerd's C(registry.configs."<host>".auth), whose C(username), C(password),
        C(auth) and C(identitytoken) become C(********)), the value of any key named like a secret (C(token),
        C(password), C(secret), C(auth), ...), the userinfo of URLs (registry mirrors' C(https://user:pw@host)) and
        secret query parameters (C(?sig=), C(X-Amz-Signature=), C(token=)). The files keep the real values.
options:
  runtime:
    description: The container runtime to configure.
    type: str
    choices: [containerd, crio]
    required: true
  config_path:
    description:
      - The runtime's main configuration file. nvidia-ctk reads it (a missing file counts as empty, which for
        containerd means config version 2) and, for containerd, adds the drop-in directory to its C(imports).
      - Default C(/etc/containerd/config.toml) or C(/etc/crio/crio.conf). A symbolic link is kept and the file it
        points to is updated.
    type: path
  drop_in_path:
    description:
      - The NVIDIA drop-in file nvidia-ctk writes the runtime into. Default C(/etc/containerd/conf.d/99-nvidia.toml)
        or C(/etc/crio/crio.conf.d/99-nvidia.toml).
    type: path
  runtime_name:
    description: Name of the NVIDIA runtime in the runtime's configuration.
    type: str
    default: nvidia
  runtime_path:
    description: Path of the NVIDIA runtime executable the entry points to.
    type: path
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description: Make the NVIDIA runtime the default one (containerd C(default_runtime_name), CRI-O C(default_runtime)).
    type: bool
    default: true
  enable_cdi:
    description: Also enable CDI device injection in the runtime (containerd C(enable_cdi)).
    type: bool
    default: false
  unit:
    description:
      - The systemd unit of the runtime's daemon, for example V(containerd.service). Given, RV(loaded) says whether
        the daemon started after the last change of O(config_path) and O(drop_in_path); omitted, nothing is read.
    type: str
    version_added: 2.0.0
notes:
  - Fails, changing nothing, when nvidia-ctk is missing, when a file cannot be read, or when nvidia-ctk rejects the
    configuration (for example a main file that is not TOML); the message names the file and gives nvidia-ctk's
    last lines.
requirements:
  - nvidia-ctk from the NVIDIA Container Toolkit (package C(nvidia-container-toolkit-base)).
seealso:
  - module: k8sgpu.nvidia.docker_daemon_config
  - name: NVIDIA Container Toolkit, configuring containerd and CRI-O
    description: What C(nvidia-ctk runtime configure) writes.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html#configuring-containerd-for-kubernetes
"""

EXAMPLES = r"""
- name: Make nvidia containerd's default runtime
  k8sgpu.nvidia.container_runtime_config:
    runtime: containerd
  register: containerd_nvidia

- name: Restart containerd, or put the previous files back
  when: containerd_nvidia.changed
  block:
    - name: Restart containerd
      ansible.builtin.systemd_service:
        name: containerd
        state: restarted
  rescue:
    - name: Restore the files that had a previous version
      ansible.builtin.copy:
        src: "{{ item.backup_file }}"
        dest: "{{ item.path }}"
        remote_src: true
        mode: preserve
      loop: "{{ containerd_nvidia.files | selectattr('backup_file', 'defined') }}"

    - name: Remove the files the task created
      ansible.builtin.file:
        path: "{{ item.path }}"
        state: absent
      loop: "{{ containerd_nvidia.files | selectattr('created') }}"

    - name: Restart containerd with the previous configuration
      ansible.builtin.systemd_service:
        name: containerd
        state: restarted

- name: Add the nvidia runtime to CRI-O without making it the default
  k8sgpu.nvidia.container_runtime_config:
    runtime: crio
    set_as_default: false
"""

RETURN = r"""
files:
  description: The files nvidia-ctk writes, changed or not.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file (symbolic links resolved).
      type: str
      sample: /etc/containerd/conf.d/99-nvidia.toml
    changed:
      description: Whether the file differs (was, or in check mode would be, written).
      type: bool
    created:
      description: Whether the file did not exist before.
      type: bool
    backup_file:
      description: The copy of the previous file, made with O(backup=true) when an existing file was changed.
      type: str
      returned: when a backup was made
      sample: /var/backups/k8sgpu.nvidia/etc/containerd/config.toml.2026-05-04T10:21:07.316250
  sample:
    - {path: /etc/containerd/config.toml, changed: true, created: false,
       backup_file: "/var/backups/k8sgpu.nvidia/etc/containerd/config.toml.2026-05-04T10:21:07.316250"}
    - {path: /etc/containerd/conf.d/99-nvidia.toml, changed: true, created: true}
backups_moved:
  description:
    - Backups of the drop-in that earlier versions left beside it, moved (in check mode, to be moved) to O(backup_dir).
  returned: always
  type: list
  elements: dict
  contains:
    src:
      description: Where the backup was.
      type: str
      sample: /etc/crio/crio.conf.d/99-nvidia.toml.2417.2026-05-04@10:21:07~
    dest:
      description: Where it is now.
      type: str
      sample: /var/backups/k8sgpu.nvidia/etc/crio/crio.conf.d/99-nvidia.toml.2417.2026-05-04@10:21:07~
command:
  description: The nvidia-ctk command that gives the same result on the real files.
  returned: always
  type: list
  elements: str
  sample: [/usr/bin/nvidia-ctk, --quiet, runtime, configure, --runtime=containerd, --config=/etc/containerd/config.toml,
           --drop-in-config=/etc/containerd/conf.d/99-nvidia.toml, --nvidia-runtime-name=nvidia,
           --nvidia-runtime-path=/usr/bin/nvidia-container-runtime, --set-as-default]
loaded:
  description:
    - Whether O(unit)'s daemon runs with O(config_path) and O(drop_in_path) as they were before the task, read on the
      host before anything is written - the daemon's main process start (systemd's
      C(ExecMainStartTimestampMonotonic), from C(systemctl show)) against each file's modification time, both on the
      host's clock. A modification time later than now does not count.
  returned: when O(unit) is given
  type: dict
  version_added: 2.0.0
  contains:
    unit:
      description: O(unit).
      type: str
      sample: containerd.service
    state:
      description: systemd's C(ActiveState) of the unit (V(active), V(inactive), V(failed), ...), V(not-found), or
        V(unknown) when C(systemctl show) failed (no systemd).
      type: str
      sample: active
    started:
      description: When the daemon's main process started, UTC, ISO 8601 (seconds); empty when it does not run.
      type: str
      sample: "2026-12-07T15:20:07+00:00"
    newer:
      description: The files modified after the daemon started (the daemon runs an older content).
      type: list
      elements: str
      sample: [/etc/containerd/conf.d/99-nvidia.toml]
    stale:
      description: Whether the daemon runs and RV(loaded.newer) is not empty; restart it to load the files.
      type: bool
      sample: true
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import (
    DEFAULT_BACKUP_DIR,
    SECRET_FILE_MODE,
    ConfigFileError,
    check_backup_dir,
    move_legacy_backups,
    write_file,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_ctk import DEFAULT_PATHS, NvidiaCtkError, plan
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._redact import redact_toml, toml_holds_secret
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._runtime_loaded import loaded_result


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            runtime=dict(type="str", required=True, choices=["containerd", "crio"]),
            config_path=dict(type="path"),
            drop_in_path=dict(type="path"),
            runtime_name=dict(type="str", default="nvidia"),
            runtime_path=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
            set_as_default=dict(type="bool", default=True),
            enable_cdi=dict(type="bool", default=False),
            nvidia_ctk=dict(type="path"),
            backup=dict(type="bool", default=True),
            backup_dir=dict(type="path", default=DEFAULT_BACKUP_DIR),
            unit=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    runtime = p["runtime"]
    config_path = os.path.realpath(p["config_path"] or DEFAULT_PATHS[runtime][0])
    drop_in_path = os.path.realpath(p["drop_in_path"] or DEFAULT_PATHS[runtime][1])
    nvidia_ctk = p["nvidia_ctk"] or module.get_bin_path("nvidia-ctk")
    if not nvidia_ctk or not os.access(nvidia_ctk, os.X_OK):
        module.fail_json(
            msg=f"nvidia-ctk was not found ({p['nvidia_ctk'] or 'PATH'}); install nvidia-container-toolkit-base "
            f"first. Nothing was changed.",
        )

    try:
        changes, cmd = plan(
            module.run_command, nvidia_ctk, runtime, config_path, drop_in_path,
            runtime_name=p["runtime_name"], runtime_path=p["runtime_path"],
            set_as_default=p["set_as_default"], enable_cdi=p["enable_cdi"],
        )
    except NvidiaCtkError as exc:
        module.fail_json(msg=str(exc), config_path=config_path, drop_in_path=drop_in_path)

    backup_dir = p["backup_dir"]
    try:
        for path in (drop_in_path, config_path):
            check_backup_dir(path, backup_dir)
        # Only the drop-in's directory is read as a whole (CRI-O: every file; containerd: the imports glob).
        moved = move_legacy_backups(drop_in_path, backup_dir, check_mode=module.check_mode)
    except ConfigFileError as exc:
        module.fail_json(msg=f"{exc} Nothing was changed.", config_path=config_path, drop_in_path=drop_in_path)

    files = [dict(path=c.path, changed=c.changed, created=c.before is None) for c in changes]
    result = dict(
        changed=bool(moved) or any(c.changed for c in changes), files=files, command=cmd, backups_moved=moved
    )
    if p["unit"]:
        result["loaded"] = loaded_result(module, p["unit"], (config_path, drop_in_path))
    if module._diff:
        result["diff"] = [
            dict(
                before="" if c.before is None else redact_toml(c.before.decode("utf-8", "replace")),
                after=redact_toml(c.after.decode("utf-8", "replace")),
                before_header=c.path,
                after_header=c.path,
            )
            for c in changes if c.changed
        ]
    if module.check_mode:
        module.exit_json(**result)
    written = []
    for change, entry in zip(changes, files):
        if not change.changed:
            continue
        try:
            backup_file = write_file(
                module, change.path, change.after, exists=change.before is not None, backup=p["backup"],
                backup_dir=backup_dir,
                new_mode=SECRET_FILE_MODE if toml_holds_secret(change.after.decode("utf-8", "replace")) else None,
            )
        except ConfigFileError as exc:
            module.fail_json(msg=f"{exc} Files written before it: {written or 'none'}.", **result)
        written.append(change.path)
        if backup_file:
            entry["backup_file"] = backup_file
    module.exit_json(**result)


if __name__ == "__main__":
    main()
