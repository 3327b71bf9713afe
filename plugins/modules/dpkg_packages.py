#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: dpkg_packages
short_description: Read the dpkg status of a few packages (installed, version, hold) and hold them, in one call
version_added: 1.0.0
description:
  - Reads the dpkg database for the packages in O(names) and O(hold) with one C(dpkg-query -W) and tells which are
    installed at the wanted version (RV(ready)), which are missing, which are at another version and which are held.
    A role compares RV(ready) with the packages it wants and calls the package manager only when something is
    missing, so a converged host costs one round trip.
  - Holds the installed packages of O(hold) that are not held yet, with one C(dpkg --set-selections); packages
    already held cost nothing, packages that are not installed are not held (RV(hold_skipped)).
  - Written because M(ansible.builtin.package_facts) reads every package of the host (slow on a full system, and
    the work runs on every host of every run) and does not return the hold (selection) state, and
    M(ansible.builtin.dpkg_selections) sets one package per call (a loop is one round trip per package) and
    returns neither whether nor at which version a package is installed.
  - >-
    With O(audit), also reads what an interrupted dpkg run left (RV(unfinished), RV(interrupted)); with
    O(remove_unfinished) and O(configure_unfinished) it puts that right before the packages are read - purges
    unfinished packages the caller names (another driver branch a stopped run began to install) with
    C(dpkg --purge --force-remove-reinstreq), then finishes the rest with C(dpkg --configure -a), as apt asks a
    person to do (C(E: dpkg was interrupted, you must manually run 'dpkg --configure -a')).
    M(ansible.builtin.apt) does neither; it fails with apt's message.
  - Used by the C(driver) and C(container_toolkit) roles of this collection.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  platform:
    platforms: debian
  check_mode:
    support: full
    details: >-
      Reads as usual and reports the packages it would hold (RV(newly_held)), remove (RV(removed)) and configure
      (RV(configured)), without changing anything.
  diff_mode:
    support: full
    details: >-
      The selections of the packages to hold, before and after (for example C(<package> install) to
      C(<package> hold)); the dpkg states of the unfinished packages it removes or configures, before and after.
options:
  names:
    description:
      - Packages to read, without architecture qualifier.
    type: list
    elements: str
    required: true
  versions:
    description:
      - Wanted version per package name. A package with no entry (or an empty one) is ready at any installed version.
      - A version matches when it equals the installed one or is a prefix of it that ends at a component boundary
        (followed by C(.), C(-) or C(+)) - V(1.20.1) matches C(1.20.1-1), V(535) and V(535.261.03) match
        C(535.261.03-1~deb12u1), V(1.20.1) matches neither C(1.20.10-1) nor the pre-release C(1.20.1~rc.1-1). The installed version's epoch is ignored
        unless the wanted one has one.
    type: dict
    default: {}
  hold:
    description:
      - Packages to hold (C(dpkg --set-selections) with C(hold)), so that upgrades cannot replace them. Read too.
      - Only installed packages are held; the others are listed in RV(hold_skipped) and left alone, since dpkg would
        record a hold for a package it does not have. Call the module again after installing them.
    type: list
    elements: str
    default: []
  audit:
    version_added: 2.0.0
    description:
      - Also read every package dpkg has not finished installing or configuring (one C(dpkg-query -W) over the
        whole database) and whether a dpkg run was interrupted (entries in C(/var/lib/dpkg/updates)).
      - Implied by O(remove_unfinished) and O(configure_unfinished).
    type: bool
    default: false
  remove_unfinished:
    version_added: 2.0.0
    description:
      - Packages to remove when, and only when, dpkg reports them unfinished (C(half-installed), C(unpacked),
        C(half-configured), C(triggers-awaited), C(triggers-pending)). Installed or absent ones are left alone.
      - Purged with C(dpkg --purge --force-remove-reinstreq) - they never finished installing, so their
        configuration files were never in use. dpkg refuses, and the module fails naming them, when an installed
        package depends on them.
    type: list
    elements: str
    default: []
  configure_unfinished:
    version_added: 2.0.0
    description:
      - After O(remove_unfinished), run C(dpkg --configure -a) when unfinished packages are left or a dpkg run was
        interrupted, with C(--force-confdef --force-confold) as M(ansible.builtin.apt) passes them. This runs the
        maintainer scripts of every unfinished package, the site's own included - what apt would do before
        anything else; callers ask for it only where they are about to run apt.
    type: bool
    default: false
  lock_timeout:
    version_added: 2.0.0
    description:
      - Seconds to wait for dpkg's lock when removing or configuring (another apt or dpkg still running, for example
        the install of a run whose controller was stopped), like M(ansible.builtin.apt)'s O(ansible.builtin.apt#module:lock_timeout).
    type: int
    default: 300
notes:
  - Run it after the package manager installed packages to read their new versions and hold them; run it before to
    decide whether the package manager is needed at all.
seealso:
  - module: ansible.builtin.dpkg_selections
  - module: ansible.builtin.package_facts
"""

EXAMPLES = r"""
- name: Read the toolkit packages
  k8sgpu.nvidia.dpkg_packages:
    names: [nvidia-container-toolkit, nvidia-container-toolkit-base]
    versions:
      nvidia-container-toolkit: "1.20.1"
      nvidia-container-toolkit-base: "1.20.1"
  register: toolkit_dpkg

- name: Before apt - remove what a stopped run began of another branch, finish the rest
  k8sgpu.nvidia.dpkg_packages:
    names: []
    remove_unfinished: [nvidia-tesla-470-driver, nvidia-tesla-470-kernel-dkms]
    configure_unfinished: true

- name: Install them only when one is missing or at another version
  ansible.builtin.apt:
    name: [nvidia-container-toolkit=1.20.1-*, nvidia-container-toolkit-base=1.20.1-*]
    allow_change_held_packages: true
  when: toolkit_dpkg.ready | length < 2

- name: Hold them (only those not held yet; no change on a converged host)
  k8sgpu.nvidia.dpkg_packages:
    names: [nvidia-container-toolkit, nvidia-container-toolkit-base]
    hold: [nvidia-container-toolkit, nvidia-container-toolkit-base]
"""

RETURN = r"""
packages:
  description: Every package of O(names) and O(hold), by name.
  returned: always
  type: dict
  sample:
    nvidia-container-toolkit: {installed: true, version: 1.20.1-1, status: installed, selection: hold}
    nvidia-docker2: {installed: false, version: null, status: unknown, selection: unknown}
  contains:
    installed:
      description: Whether dpkg's status is C(installed) (not C(config-files), C(half-installed), ...).
      type: bool
    version:
      description: The installed version; null when not installed.
      type: str
    status:
      description: dpkg's C(db:Status-Status), for example V(installed) or V(config-files); V(unknown) when dpkg does not know the package.
      type: str
    selection:
      description: The selection (C(db:Status-Want)) after the task - V(install), V(hold), V(deinstall), V(purge) or V(unknown).
      type: str
ready:
  description: Packages installed at their wanted version (any version when O(versions) has none for them).
  returned: always
  type: list
  elements: str
  sample: [nvidia-container-toolkit, nvidia-container-toolkit-base]
missing:
  description: Packages that are not installed.
  returned: always
  type: list
  elements: str
  sample: [nvidia-docker2]
wrong_version:
  description: Packages installed at a version O(versions) does not match.
  returned: always
  type: list
  elements: str
  sample: []
held:
  description: Packages held after the task (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: [nvidia-container-toolkit, nvidia-container-toolkit-base]
newly_held:
  description: Packages of O(hold) this task held (in check mode, would hold).
  returned: always
  type: list
  elements: str
  sample: []
hold_skipped:
  description: Packages of O(hold) not held because they are not installed.
  returned: always
  type: list
  elements: str
  sample: []
unfinished:
  version_added: 2.0.0
  description:
    - Packages dpkg has not finished installing or configuring after the task (in check mode, before it), from
      C(dpkg-query -W -f='${Package}|${Version}|${db:Status-Status}'), by name.
  returned: when O(audit), O(remove_unfinished) or O(configure_unfinished) is set
  type: dict
  sample:
    nvidia-tesla-470-kernel-dkms: {version: 470.256.02-1~deb12u1, status: unpacked}
  contains:
    version:
      description: The version dpkg began to install.
      type: str
    status:
      description: dpkg's state, for example V(unpacked) or V(half-configured).
      type: str
interrupted:
  version_added: 2.0.0
  description: Whether dpkg's journal (C(/var/lib/dpkg/updates)) holds a run that did not end, after the task.
  returned: when O(audit), O(remove_unfinished) or O(configure_unfinished) is set
  type: bool
  sample: false
removed:
  version_added: 2.0.0
  description: Unfinished packages of O(remove_unfinished) the task removed (in check mode, would remove).
  returned: when O(audit), O(remove_unfinished) or O(configure_unfinished) is set
  type: list
  elements: str
  sample: [nvidia-tesla-470-kernel-dkms]
configured:
  version_added: 2.0.0
  description: >-
    Packages C(dpkg --configure -a) finished (in check mode, would finish); empty when it did not run. It may also
    have finished an interrupted run with no package left unfinished.
  returned: when O(audit), O(remove_unfinished) or O(configure_unfinished) is set
  type: list
  elements: str
  sample: [dkms, nvidia-open-kernel-dkms]
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._dpkg import (
    UPDATES_DIR,
    DpkgError,
    audit_args,
    journal_entries,
    parse_status,
    parse_unfinished,
    plan,
    query_args,
    repair_plan,
    selections_text,
)

_ENV = {"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}


def read_unfinished(module: AnsibleModule, dpkg_query: str) -> tuple[dict, bool]:
    rc, out, err = module.run_command(audit_args(dpkg_query), environ_update=_ENV)
    if rc != 0:
        module.fail_json(msg=f"dpkg-query -W (reading every package's state) failed (rc {rc}): {err.strip() or out.strip()}")
    try:
        unfinished = parse_unfinished(out)
    except DpkgError as exc:
        module.fail_json(msg=str(exc))
    try:
        journal = journal_entries(os.listdir(UPDATES_DIR))
    except FileNotFoundError:
        journal = []
    except OSError as exc:
        module.fail_json(msg=f"cannot read dpkg's journal {UPDATES_DIR}: {exc}")
    return unfinished, bool(journal)


def run_dpkg(module: AnsibleModule, args: list[str], what: str, timeout: int) -> None:
    """dpkg with its lock waited for (up to ``timeout`` seconds), failing with dpkg's last words and the fix."""
    started = time.monotonic()
    while True:
        rc, out, err = module.run_command(args, environ_update=_ENV)
        if rc == 0:
            return
        text = (err.strip() or out.strip())
        locked = "lock" in text.lower() and "another process" in text.lower()
        if locked and time.monotonic() - started < timeout:
            time.sleep(2)
            continue
        tail = " | ".join(text.splitlines()[-8:])
        if locked:
            module.fail_json(msg=f"{what} failed: dpkg's lock is still held by another process after {timeout} s "
                                 f"(lock_timeout): {tail} - another apt or dpkg is running (for example the install of "
                                 "a run that was stopped); wait for it to end, or raise the lock timeout, and run again",
                             rc=rc)
        shown = " ".join(args[:1] + [a for a in args[1:] if not a.startswith("--force-conf")])
        module.fail_json(msg=f"{what} failed (rc {rc}): {tail} - run `{shown}` on the host to see the whole output, "
                             "and fix what it names before running again", rc=rc)


def exit_with(module: AnsibleModule, result: dict) -> None:
    # One diff as a dict, as most modules give it; two (unfinished packages and holds) as a list.
    if isinstance(result.get("diff"), list) and len(result["diff"]) == 1:
        result["diff"] = result["diff"][0]
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            versions=dict(type="dict", default={}),
            hold=dict(type="list", elements="str", default=[]),
            audit=dict(type="bool", default=False),
            remove_unfinished=dict(type="list", elements="str", default=[]),
            configure_unfinished=dict(type="bool", default=False),
            lock_timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    params = module.params
    names = list(dict.fromkeys([*params["names"], *params["hold"]]))
    bad = [n for n in [*names, *params["remove_unfinished"]] if not n or any(c.isspace() or c in "|:" for c in n)]
    if bad:
        module.fail_json(msg=f"not package names: {', '.join(repr(n) for n in bad)} (no spaces, '|' or architecture)")
    versions = {str(k): str(v) for k, v in params["versions"].items() if v not in (None, "")}
    result: dict = dict(changed=False)
    dpkg_query = module.get_bin_path("dpkg-query", required=True)

    # What an interrupted run left, put right before the packages are read.
    if params["audit"] or params["remove_unfinished"] or params["configure_unfinished"]:
        unfinished, interrupted = read_unfinished(module, dpkg_query)
        r = repair_plan(unfinished, interrupted, params["remove_unfinished"], params["configure_unfinished"])
        configured = r["configure_names"] if r["configure"] else []
        result.update(removed=r["remove"], configured=configured)
        if r["remove"] or r["configure"]:
            result["changed"] = True
            if module._diff:
                touched = [*r["remove"], *configured]
                result["diff"] = [dict(
                    before="".join(f"{n} {unfinished[n]['status']}\n" for n in touched)
                    + ("dpkg journal: interrupted run\n" if interrupted and r["configure"] else ""),
                    after="".join(f"{n} not-installed\n" for n in r["remove"]) + "".join(f"{n} installed\n" for n in configured),
                    before_header="dpkg states", after_header="dpkg states")]
            if not module.check_mode:
                dpkg = module.get_bin_path("dpkg", required=True)
                if r["remove"]:
                    run_dpkg(module, [dpkg, "--purge", "--force-remove-reinstreq", "--", *r["remove"]],
                             f"purging the unfinished packages {', '.join(r['remove'])}", params["lock_timeout"])
                if r["configure"]:
                    run_dpkg(module, [dpkg, "--configure", "-a", "--force-confdef", "--force-confold"],
                             "finishing the interrupted dpkg run (dpkg --configure -a"
                             + (f" for {', '.join(configured)}" if configured else "") + ")", params["lock_timeout"])
                unfinished, interrupted = read_unfinished(module, dpkg_query)
        result.update(unfinished=unfinished, interrupted=interrupted)

    if not names:
        exit_with(module, dict(result, packages={}, ready=[], missing=[], wrong_version=[], held=[], newly_held=[],
                               hold_skipped=[]))

    rc, out, err = module.run_command(query_args(dpkg_query, names), environ_update={"LC_ALL": "C"})
    # 1: some package is unknown to dpkg (said on stderr), which only means it is not installed.
    if rc not in (0, 1):
        module.fail_json(msg=f"dpkg-query failed (rc {rc}): {err.strip() or out.strip()}", rc=rc)
    try:
        packages = parse_status(out, names)
    except DpkgError as exc:
        module.fail_json(msg=str(exc))
    p = plan(packages, versions, params["hold"])

    result.update(packages=packages, ready=p["ready"], missing=p["missing"],
                  wrong_version=p["wrong_version"], newly_held=p["to_hold"], hold_skipped=p["hold_skipped"])
    result["changed"] = result["changed"] or bool(p["to_hold"])
    if p["to_hold"]:
        if module._diff:
            hold_diff = dict(
                before="".join(f"{n} {packages[n]['selection']}\n" for n in p["to_hold"]),
                after=selections_text(p["to_hold"], "hold"),
                before_header="dpkg selections", after_header="dpkg selections")
            result["diff"] = [*result.get("diff", []), hold_diff]
        if not module.check_mode:
            dpkg = module.get_bin_path("dpkg", required=True)
            rc, out, err = module.run_command([dpkg, "--set-selections"], data=selections_text(p["to_hold"], "hold"),
                                              environ_update={"LC_ALL": "C"})
            if rc != 0:
                module.fail_json(msg=f"dpkg --set-selections could not hold {', '.join(p['to_hold'])} (rc {rc}): "
                                     f"{err.strip() or out.strip()} - is another package manager running?", **result)
        for name in p["to_hold"]:
            packages[name]["selection"] = "hold"
    result["held"] = [n for n, info in packages.items() if info["selection"] == "hold"]
    exit_with(module, result)


if __name__ == "__main__":
    main()
