#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_config
short_description: Merge container runtimes and settings into Docker's daemon.json, keeping every other key
version_added: 1.0.0
description:
  - Adds or updates runtimes (such as C(nvidia)) under the C(runtimes) key of Docker's C(daemon.json), optionally
    makes one the C(default-runtime), and sets other top-level keys, by merging into the existing file. Keys it
    is not asked to change, and runtimes it is not given, are kept as they are, in their order.
  - Written because the usual ways of enabling the NVIDIA runtime overwrite C(daemon.json) with a template, losing
    settings such as C(log-driver), C(data-root), C(insecure-registries) or other runtimes.
  - A runtime entry is compared by what dockerd runs, not by its text. An entry that runs the same program (a name
    that dockerd finds on its C(PATH), C(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), and an
    absolute path to the same file, symbolic links followed, are the same) with the same C(runtimeArgs) is already
    right and is not touched, so a host configured by hand as NVIDIA's guide says is left as it is.
  - Only the keys dockerd reads are written (C(path), C(runtimeArgs), C(runtimeType), C(options)); the C(args) key
    that C(nvidia-ctk runtime configure --runtime=docker) writes is not read by dockerd, and is refused in
    O(runtimes). An existing C(args) key is left as it is, with a warning when it is not empty.
  - A file that is not valid JSON, or whose JSON is not an object, fails the task with the parse error's line and
    column, and is left byte for byte untouched. An empty file (or one of only whitespace) counts as C({}).
  - When the result equals the current content, the file is not written at all (its modification time stays).
    Otherwise it is written to a temporary file in the same directory and renamed over the old one, keeping its
    owner, group and mode. The new content is C(json.dumps) with an indent of 2 and a final newline; existing keys
    keep their position and new keys are appended.
  - This module does B(not) restart Docker, which reads C(daemon.json) only when it starts. Notify a handler that
    restarts it, and restore RV(backup_file) if the restart fails, as the examples show.
  - With O(unit), it also says whether the running daemon has read the file as it is (RV(loaded)); a run stopped
    between the write and the restart leaves Docker on the older content, and the next run finds the file right.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.backup
attributes:
  check_mode:
    support: full
    details: Reads the file and reports whether it would change, with the diff; writes nothing and makes no backup.
  diff_mode:
    support: full
    details: The file's text before and after, headed with its path, with secrets redacted as RV(config) describes.
      When the file holds something to redact, the text before is its content in the module's output format rather
      than the file's own text. A change of a redacted value alone shows as changed with equal lines.
options:
  path:
    description:
      - Path of C(daemon.json).
      - When it is a symbolic link, the link is kept and the file it points to (resolved with all links followed)
        is updated; RV(path) returns that file.
    type: path
    default: /etc/docker/daemon.json
  runtimes:
    description:
      - "Runtimes by name, each the dict Docker wants under C(runtimes), for example
        C({nvidia: {path: nvidia-container-runtime, runtimeArgs: []}})."
      - With O(state=present), each is added, or merged into the entry of the same name when that does not already
        run it (see the description); the keys given replace the entry's, its other keys are kept. Without
        C(runtimeArgs), the arguments of an existing entry are kept, whatever they are; with it, they must be equal.
        An entry of the other kind (C(path) against C(runtimeType)) is replaced, as dockerd takes only one of them.
        Runtimes not named here are kept.
      - With O(state=absent), only the names matter; those runtimes are removed. When that empties C(runtimes),
        the key is removed.
    type: dict
    default: {}
  default_runtime:
    description:
      - With O(state=present), the value of C(default-runtime), for example V(nvidia). It must be a runtime of the
        file or of O(runtimes), V(runc), or a containerd runtime name such as V(io.containerd.runc.v2); anything
        else would keep dockerd from starting, so the task fails instead.
      - With O(state=absent), C(default-runtime) is removed when it equals this value.
      - Omitted or empty, C(default-runtime) is left as it is, except that with O(state=absent) it is also removed
        when it names a runtime that the task removes, as dockerd would not start with it.
    type: str
  settings:
    description:
      - "Other top-level keys to set, whatever O(state) is, for example C({log-driver: json-file})."
      - "Dicts are merged into the existing dicts, at every depth, so C({log-opts: {max-size: 10m}}) keeps the other
        C(log-opts). Any other value, lists included, replaces the existing one. A value of V(null) removes the key."
      - C(runtimes) and C(default-runtime) may be set here only when O(runtimes), respectively O(default_runtime),
        are not given.
    type: dict
    default: {}
  state:
    description:
      - V(present) adds or updates O(runtimes) and sets O(default_runtime).
      - V(absent) removes the runtimes named in O(runtimes), and C(default-runtime) as O(default_runtime) describes.
    type: str
    choices: [present, absent]
    default: present
  create:
    description:
      - Create the file when it does not exist and there is something to write, with mode C(0600) when its content
        holds a secret (anything RV(config) redacts; since 1.1.0) and C(0644) otherwise; missing parent directories
        are created with mode C(0755). An existing file keeps its mode.
      - With V(false), a missing file fails the task when it would have to be created.
    type: bool
    default: true
  unit:
    description:
      - The systemd unit of the Docker daemon that reads the file, for example V(docker.service). Given, RV(loaded)
        says whether the daemon started after the file's last change; omitted, nothing is read.
    type: str
    version_added: 2.0.0
notes:
  - Docker must be restarted (or, for some settings, sent C(SIGHUP)) for changes to take effect. The module does
    not do it.
  - The file is compared as JSON, so reformatting alone is not a change; a file that does change is rewritten in
    the output format above, and comments or duplicate keys (which are not JSON) cannot survive.
  - On SELinux hosts the file's context is kept, or set to the default for a new file.
  - Secrets are redacted in what the module returns (RV(config), RV(previous), the diff), so C(-v) and C(--diff)
    never print them; the file keeps the real values. Values of O(settings) that would be redacted are also hidden
    in the task's C(invocation). The redaction is the collection's one (also that of
    M(k8sgpu.nvidia.container_runtime_config)). A new file holding a secret is created C(0600); an existing file is as
    readable as its mode makes it, which the module keeps, so tighten that mode where the host's users must not read
    its credentials.
seealso:
  - name: Docker daemon configuration file
    description: The keys of C(daemon.json).
    link: https://docs.docker.com/reference/cli/dockerd/#daemon-configuration-file
  - name: NVIDIA Container Toolkit, configuring Docker
    description: The C(nvidia) runtime entry.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html#configuring-docker
"""

EXAMPLES = r"""
# An nvidia entry that already runs nvidia-container-runtime (by name, or as /usr/bin/nvidia-container-runtime)
# is kept, with the runtimeArgs it has.
- name: Add the NVIDIA runtime and make it the default, keeping the rest of daemon.json
  k8sgpu.nvidia.docker_daemon_config:
    runtimes:
      nvidia:
        path: nvidia-container-runtime
    default_runtime: nvidia
  notify: Restart docker

- name: Cap container logs, keeping the other log options
  k8sgpu.nvidia.docker_daemon_config:
    settings:
      log-opts:
        max-size: 10m
        max-file: "3"
      legacy-option: null

- name: Remove the NVIDIA runtime, and default-runtime when it is nvidia
  k8sgpu.nvidia.docker_daemon_config:
    runtimes:
      nvidia: {}
    default_runtime: nvidia
    state: absent
  notify: Restart docker

# Restart at once, and put the old file back if Docker does not come up with the new one.
- name: Merge the NVIDIA runtime into daemon.json
  k8sgpu.nvidia.docker_daemon_config:
    runtimes:
      nvidia: {path: nvidia-container-runtime, runtimeArgs: []}
    default_runtime: nvidia
  register: daemon_json

- name: Restart Docker with the new daemon.json
  when: daemon_json.changed
  block:
    - name: Restart Docker
      ansible.builtin.systemd_service:
        name: docker
        state: restarted
  rescue:
    - name: Restore the previous daemon.json
      ansible.builtin.copy:
        src: "{{ daemon_json.backup_file }}"
        dest: "{{ daemon_json.path }}"
        remote_src: true
        mode: preserve
      when: daemon_json.backup_file is defined

    - name: Remove daemon.json, which did not exist before
      ansible.builtin.file:
        path: "{{ daemon_json.path }}"
        state: absent
      when: daemon_json.previous == {} and daemon_json.backup_file is not defined

    - name: Restart Docker with the previous daemon.json
      ansible.builtin.systemd_service:
        name: docker
        state: restarted

    - name: Fail the host
      ansible.builtin.fail:
        msg: Docker did not start with the new daemon.json; the previous one was restored.
"""

RETURN = r"""
path:
  description: The file read and written, with symbolic links resolved.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
config:
  description:
    - The content of the file after the task (or that it would have, in check mode), with secrets redacted.
    - Redacted are, at any depth, the values of keys whose name suggests a secret (containing C(token), C(secret),
      C(password), C(passwd), C(pwd), C(passphrase), C(credential), C(api-key), C(private-key), C(access-key) or
      C(cookie), or being or ending in C(auth), C(auths), C(pass), C(sig) or C(signature) after C(-), C(_) or C(.),
      such as C(log-opts.splunk-token) or C(registry-auth)) - each string or number replaced by C(********), in lists
      and objects leaf by leaf - and in every string value, the userinfo of a URL (C(http://user:pass@proxy:3128)
      becomes C(http://********@proxy:3128), the host, port and path kept, so a diff still shows which proxy or
      mirror changed), the values of its query parameters named like secrets (C(?access_token=********),
      C(?sig=********), C(X-Amz-Signature=********), C(X-Amz-Credential=********)), and the value of a
      C(name=value) string whose name is a secret's (a C(labels) entry C(api_key=********)).
    - Under keys naming URLs (C(proxies.http-proxy), C(proxies.https-proxy), C(registry-mirrors), any key containing
      C(proxy), C(mirror), C(registr), C(url), C(address), C(endpoint) or C(host)) a URL without a scheme
      (C(user:pass@proxy:3128)) is redacted the same way.
  returned: always
  type: dict
  sample:
    log-driver: json-file
    runtimes:
      nvidia:
        path: nvidia-container-runtime
        runtimeArgs: []
    default-runtime: nvidia
previous:
  description: The content of the file before the task, redacted as RV(config); C({}) when it did not exist or was empty.
  returned: always
  type: dict
  sample:
    log-driver: json-file
backup_file:
  description: The copy of the previous file, made with O(backup=true) when an existing file was changed.
  returned: changed and a backup was made
  type: str
  sample: /var/backups/k8sgpu.nvidia/etc/docker/daemon.json.2026-05-04T10:21:07.316250
created:
  description: Whether the file did not exist before the task (it was, or in check mode would be, created when the task changed).
  returned: always
  type: bool
  sample: false
runtimes_added:
  description: Runtimes that were not there and were added.
  returned: always
  type: list
  elements: str
  sample: [nvidia]
runtimes_updated:
  description: Runtimes that were there but did not run the wanted program with the wanted arguments, and were updated.
  returned: always
  type: list
  elements: str
  sample: []
runtimes_removed:
  description: Runtimes removed, with O(state=absent).
  returned: always
  type: list
  elements: str
  sample: []
loaded:
  description:
    - Whether O(unit)'s daemon runs with the file as it was before the task, read on the host before anything is
      written - the daemon's main process start (systemd's C(ExecMainStartTimestampMonotonic), from
      C(systemctl show)) against the file's modification time, both on the host's clock. A modification time later
      than now does not count.
  returned: when O(unit) is given
  type: dict
  version_added: 2.0.0
  contains:
    unit:
      description: O(unit).
      type: str
      sample: docker.service
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
      description: The file, when it was modified after the daemon started (the daemon runs an older content).
      type: list
      elements: str
      sample: [/etc/docker/daemon.json]
    stale:
      description: Whether the daemon runs and RV(loaded.newer) is not empty; restart it to load the file.
      type: bool
      sample: true
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import DEFAULT_BACKUP_DIR
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._runtime_loaded import loaded_result
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._daemon_json import (
    DaemonJsonError,
    dump_config,
    holds_secret,
    plan_config,
    read_config,
    redact_config,
    secret_strings,
    write_config,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            runtimes=dict(type="dict", default={}),
            default_runtime=dict(type="str"),
            settings=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            backup=dict(type="bool", default=True),
            backup_dir=dict(type="path", default=DEFAULT_BACKUP_DIR),
            create=dict(type="bool", default=True),
            unit=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # Secrets given in settings (a proxy URL with user:pass@, a token) are hidden in the invocation as well.
    module.no_log_values.update(secret_strings(params["settings"]))
    path = os.path.realpath(params["path"])

    try:
        data, current = read_config(path)
        plan = plan_config(
            current,
            runtimes=params["runtimes"],
            default_runtime=params["default_runtime"],
            settings=params["settings"],
            state=params["state"],
        )
    except DaemonJsonError as exc:
        module.fail_json(msg=str(exc), path=path)
    for warning in plan.warnings:
        module.warn(f"{path}: {warning}")

    result = dict(
        changed=plan.changed,
        path=path,
        created=data is None,
        config=redact_config(plan.config),
        previous=redact_config(plan.previous),
        runtimes_added=plan.runtimes_added,
        runtimes_updated=plan.runtimes_updated,
        runtimes_removed=plan.runtimes_removed,
    )
    if params["unit"]:
        result["loaded"] = loaded_result(module, params["unit"], [path] if data is not None else [])
    if not plan.changed:
        module.exit_json(**result)
    if data is None and not params["create"]:
        module.fail_json(msg=f"{path} does not exist, and create=false.", **result)

    text = dump_config(plan.config)
    if module._diff:
        # The file's own text when it holds nothing to redact; otherwise its content, redacted, in the output format.
        before = "" if data is None else data.decode("utf-8-sig")
        if result["previous"] != plan.previous:
            before = dump_config(result["previous"])
        result["diff"] = dict(
            before=before,
            after=dump_config(result["config"]),
            before_header=path,
            after_header=path,
        )
    if not module.check_mode:
        try:
            backup_file = write_config(
                module, path, text, exists=data is not None, backup=params["backup"], backup_dir=params["backup_dir"],
                secret=holds_secret(plan.config),
            )
        except DaemonJsonError as exc:
            module.fail_json(msg=str(exc), **result)
        if backup_file:
            result["backup_file"] = backup_file
    module.exit_json(**result)


if __name__ == "__main__":
    main()
