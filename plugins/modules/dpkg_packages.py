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
    details: Reads as usual and reports the packages it would hold (RV(newly_held)), without holding them.
  diff_mode:
    support: full
    details: The selections of the packages to hold, before and after (for example C(<package> install) to C(<package> hold)).
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
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._dpkg import (
    DpkgError,
    parse_status,
    plan,
    query_args,
    selections_text,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            versions=dict(type="dict", default={}),
            hold=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    names = list(dict.fromkeys([*params["names"], *params["hold"]]))
    bad = [n for n in names if not n or any(c.isspace() or c in "|:" for c in n)]
    if bad:
        module.fail_json(msg=f"not package names: {', '.join(repr(n) for n in bad)} (no spaces, '|' or architecture)")
    versions = {str(k): str(v) for k, v in params["versions"].items() if v not in (None, "")}
    if not names:
        module.exit_json(changed=False, packages={}, ready=[], missing=[], wrong_version=[], held=[], newly_held=[],
                         hold_skipped=[])

    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    rc, out, err = module.run_command(query_args(dpkg_query, names), environ_update={"LC_ALL": "C"})
    # 1: some package is unknown to dpkg (said on stderr), which only means it is not installed.
    if rc not in (0, 1):
        module.fail_json(msg=f"dpkg-query failed (rc {rc}): {err.strip() or out.strip()}", rc=rc)
    try:
        packages = parse_status(out, names)
    except DpkgError as exc:
        module.fail_json(msg=str(exc))
    p = plan(packages, versions, params["hold"])

    result = dict(changed=bool(p["to_hold"]), packages=packages, ready=p["ready"], missing=p["missing"],
                  wrong_version=p["wrong_version"], newly_held=p["to_hold"], hold_skipped=p["hold_skipped"])
    if p["to_hold"]:
        if module._diff:
            result["diff"] = dict(
                before="".join(f"{n} {packages[n]['selection']}\n" for n in p["to_hold"]),
                after=selections_text(p["to_hold"], "hold"),
                before_header="dpkg selections", after_header="dpkg selections")
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
    module.exit_json(**result)


if __name__ == "__main__":
    main()
