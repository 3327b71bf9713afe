#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_kernels
short_description: The NVIDIA kernel module of every installed kernel, its build, and the kernel the host will boot
version_added: 2.0.0
description:
  - Reads every installed kernel (the images C(<root>/boot/vmlinuz-<release>), C(<root>/lib/modules/<release>) with the
    kernel's own modules or its headers) and, for each, whether the NVIDIA kernel module of the driver branch is built
    (DKMS's records under C(<root>/var/lib/dkms)) and installed (a C(nvidia*.ko*) file under
    C(<root>/lib/modules/<release>/)), and whether its headers are there.
  - With O(build), builds what is missing for every kernel that has headers (C(dkms autoinstall -k <release>)) and
    reads again; in check mode it only reports what it would build (RV(would_build)). A second run builds nothing.
  - Decides whether a reboot may be done (RV(reboot)); the kernel the host will boot is GRUB's C(next_entry), else
    its saved entry where C(GRUB_DEFAULT=saved), else an entry named in C(GRUB_DEFAULT), else the newest installed
    image (GRUB's first entry). That kernel must have a built module of the branch, else RV(reboot.allowed) is false
    and RV(reboot.reason) names the host, the kernel and the fix. An entry that names no installed kernel leaves
    every installed image to check; a host with no image under C(/boot) (a container) has every installed kernel
    checked.
  - Written because the reading is a walk of three trees and a version sort that Jinja cannot do readably, and the
    decision must be the same for the driver role's reboot, M(k8sgpu.nvidia.k8s_node_maintenance)'s callers
    (C(node_maintenance)'s reboot) and C(gpu_health)'s reboot recovery.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: linux
options:
  root:
    description: The filesystem root the trees are read under; for tests and image builds, V(/) on hosts.
    type: path
    default: /
  branch:
    description:
      - The driver branch whose module each kernel must have (V(535)), or a version of it (V(535.261.03-1)). Empty
        means the branch of the running kernel's DKMS module, else the newest DKMS has.
    type: str
    default: ""
  build:
    description: Build the missing module with C(dkms autoinstall -k <release>) for every kernel that has headers.
    type: bool
    default: false
  host:
    description: The inventory host name, for the messages.
    type: str
    default: ""
  initramfs_configs:
    description: Files the initramfs holds (the driver role's nouveau blacklist); a kernel whose
      C(/boot/initrd.img-<release>) is older than the newest of them is listed in RV(initramfs_stale).
    type: list
    elements: path
    default: []
    version_added: 2.0.0
  efi_root:
    description:
      - Where the EFI variables are read for Secure Boot (C(<efi_root>/efivars), C(<efi_root>/mok-variables)); for
        tests, a tree of one's own. With Secure Boot enabled, every NVIDIA module of the kernels a reboot may come
        up in must be signed by an enrolled key (the firmware's C(db), shim's C(MokListRT); C(modinfo)'s C(signer)
        and C(sig_key) against the certificates' issuer and serial), else RV(reboot.allowed) is false and
        RV(reboot.reason) names the host, the kernel, the module and the fix (C(mokutil --import)). C(modinfo) runs
        only then.
    type: path
    default: /sys/firmware/efi
    version_added: 2.0.0
  boot_check:
    description:
      - Also read, before any build, whether the host booted since the newest NVIDIA module file was installed
        (RV(reboot_check), what M(k8sgpu.nvidia.driver_reboot_check) returns, one module run instead of two), and
        fail when no kernel has an NVIDIA module file, naming DKMS's records and its build log.
    type: bool
    default: false
    version_added: 2.0.0
  proc_root:
    description: Where procfs is mounted, for O(boot_check) (C(stat), C(1/stat), C(sys/kernel/osrelease)).
    type: path
    default: /proc
    version_added: 2.0.0
notes:
  - A host never boots the kernel it was checked for in a container; there only the build and the files are proven.
seealso:
  - module: k8sgpu.nvidia.driver_reboot_check
"""

EXAMPLES = r"""
- name: Build the NVIDIA module for every installed kernel
  k8sgpu.nvidia.driver_kernels:
    branch: "535"
    build: true
    host: "{{ inventory_hostname }}"
  register: kernels

- name: Refuse a reboot into a kernel without the module
  ansible.builtin.assert:
    that: kernels.reboot.allowed
    fail_msg: "{{ kernels.reboot.reason }}"
"""

RETURN = r"""
reboot_check:
  description:
    - With O(boot_check), M(k8sgpu.nvidia.driver_reboot_check)'s result read before any build (C(boot_time),
      C(module_time), C(module_file), C(module_kernels), C(running_kernel), C(installed_since_boot), C(detail); see
      that module); null without.
  returned: always
  type: dict
  sample: {"boot_time": 1795977601.52, "module_time": 1795978802.07, "installed_since_boot": true,
           "module_file": /lib/modules/6.1.0-50-amd64/updates/dkms/nvidia-current.ko,
           "module_kernels": [6.1.0-50-amd64], "running_kernel": 6.1.0-50-amd64,
           "detail": "the kernel module ... was installed after the boot: a reboot loads it"}
kernels:
  description:
    - Per installed kernel release - C(image) (a kernel image under /boot), C(headers), C(running), C(module_files),
      C(dkms) (DKMS's records of its NVIDIA modules for it), C(ok) (a built and installed module of the branch),
      C(status) (V(ok), V(not_built), V(no_headers)), C(detail) and C(fix).
  returned: always
  type: dict
  sample: {"6.1.0-50-amd64": {"image": true, "headers": true, "running": true, "ok": true, "status": "ok",
           "detail": "module nvidia-current 535.261.03 installed", "fix": "", "module_files": [], "dkms": []}}
branch:
  description: The branch checked (given, or inferred).
  returned: always
  type: str
  sample: "535"
running_kernel:
  description: The running kernel's release.
  returned: always
  type: str
  sample: 6.1.0-50-amd64
boot:
  description: The kernel the host will boot (C(kernel), empty when undetermined), where that was read (C(source)) and
    the kernels a reboot may come up in (C(candidates)).
  returned: always
  type: dict
reboot:
  description: Whether a reboot may be done now, and why not.
  returned: always
  type: dict
  contains:
    allowed:
      description: True when every kernel the host may come up in has a built module of the branch.
      type: bool
    kernel:
      description: The kernel the host will boot, as in RV(boot); empty when undetermined.
      type: str
    source:
      description: Where the boot kernel was read (GRUB's C(next_entry) or saved entry, C(GRUB_DEFAULT), the newest image).
      type: str
    candidates:
      description: The kernels a reboot may come up in.
      type: list
      elements: str
    refused_kernels:
      description: The candidates without a built module of the branch.
      type: list
      elements: str
    reason:
      description: Why the reboot is refused, naming the host, the kernel and the fix; empty when allowed.
      type: str
built:
  description: The kernels a module was built for in this run (C(dkms autoinstall) succeeded and the module is there).
  returned: always
  type: list
  elements: str
would_build:
  description: In check mode, the kernels it would build for.
  returned: always
  type: list
  elements: str
secure_boot:
  description: The firmware's Secure Boot state from the EFI variables under O(efi_root) - C(state) (V(enabled),
    V(disabled), V(setup_mode), V(unknown), V(not_efi)), C(enforcing), C(pending_enrolment) (shim's C(MokNew) - an
    import waits for the console), C(sources) (the key lists read), and where enforcing, C(modules_trusted).
  returned: always
  type: dict
  version_added: 2.0.0
initramfs_stale:
  description: The kernels whose initramfs is older than a file of O(initramfs_configs) (file modification times) -
    a run stopped between the write and the initramfs rebuild left them so; the driver role rebuilds them. Only
    kernels whose initramfs initramfs-tools tracks (C(/var/lib/initramfs-tools/<release>)) count.
  returned: always
  type: list
  elements: str
  version_added: 2.0.0
signing_drop_in:
  description: The driver role's DKMS signing drop-in (C(/etc/dkms/framework.conf.d/90-k8sgpu-nvidia-signing.conf))
    exists, so that a role with signing turned off knows to remove it.
  returned: always
  type: bool
  version_added: 2.0.0
build_failures:
  description: Per kernel whose build failed, the end of DKMS's output.
  returned: always
  type: dict
summary:
  description: One line per kernel, C(<release>) then its status and detail, for reports.
  returned: always
  type: list
  elements: str
"""

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _secure_boot
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_kernels import (
    boot_reading, dkms_tree, read_kernels, stale_initramfs)


def _summary(kernels: dict, boot: dict) -> list[str]:
    return [f"{release}: {info['status']} - {info['detail']}"
            + (" (running)" if info["running"] else "") + (" (boots next)" if release == boot.get("kernel") else "")
            for release, info in kernels.items()]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "branch": {"type": "str", "default": ""},
            "build": {"type": "bool", "default": False},
            "host": {"type": "str", "default": ""},
            "efi_root": {"type": "path", "default": "/sys/firmware/efi"},
            "initramfs_configs": {"type": "list", "elements": "path", "default": []},
            "boot_check": {"type": "bool", "default": False},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["root"]
    running = os.uname().release
    read = read_kernels(root, running, p["branch"], p["host"])
    reboot_check = None
    if p["boot_check"]:
        try:
            reboot_check = boot_reading(Path(p["proc_root"]), Path(root, "lib/modules"))
        except ValueError as exc:
            module.fail_json(msg=f"{p['host'] or 'this host'}: {exc}")
        if not reboot_check["module_kernels"]:
            records = "; ".join(f"{d['module']}/{d['version']}" + (f" {d['kernel']} {d['arch']}" if d["kernel"] else "")
                                + f": {d['state']}" for d in dkms_tree(Path(root))) or "none"
            module.fail_json(msg=f"{p['host'] or 'this host'}: no kernel has an NVIDIA kernel module under "
                                 f"/lib/modules: DKMS did not build or install it (DKMS's records: {records}). See "
                                 "/var/lib/dkms/nvidia*/*/build/make.log, and check that kernel headers are installed.",
                             reboot_check=reboot_check)
    to_build = [k for k, info in read["kernels"].items() if info["status"] == "not_built"] if p["build"] else []
    built, failures, would = [], {}, []
    if to_build and module.check_mode:
        would = to_build
    elif to_build:
        dkms = module.get_bin_path("dkms")
        if not dkms:
            failures = {k: "dkms is not installed" for k in to_build}
        else:
            for release in to_build:
                rc, out, err = module.run_command([dkms, "autoinstall", "-k", release])
                if rc != 0:
                    failures[release] = ((out or "") + (err or ""))[-1500:].strip() or f"rc {rc}"
            read = read_kernels(root, running, p["branch"], p["host"])
            built = [k for k in to_build if read["kernels"].get(k, {}).get("ok")]
            for release in to_build:
                if release not in built and release not in failures:
                    failures[release] = "dkms autoinstall ended without installing an NVIDIA module"

    def modinfo(paths: list) -> str:
        return module.run_command([module.get_bin_path("modinfo", required=True)] + paths)[1]
    _secure_boot.kernels_reboot(p["host"], root, read, p["efi_root"], modinfo)
    signing_drop_in = os.path.isfile(os.path.join(root, _secure_boot.DKMS_DROP_IN.lstrip("/")))
    for release, info in read["kernels"].items():
        if not info["ok"] and release not in failures and (info["image"] or info["running"]):
            module.warn(f"{p['host'] or 'this host'}: kernel {release}: {info['detail']} (fix: {info['fix']})")
    for release, text in failures.items():
        module.warn(f"{p['host'] or 'this host'}: building the NVIDIA module for kernel {release} failed: "
                    f"{text[-400:]}")
    module.exit_json(changed=bool(built) or bool(would), built=built, would_build=would, build_failures=failures,
                     signing_drop_in=signing_drop_in,
                     # Only what the role's handler rebuilds: initrds initramfs-tools tracks (/var/lib/initramfs-tools).
                     initramfs_stale=stale_initramfs(root, [k for k in read["kernels"] if os.path.exists(
                         os.path.join(root, "var/lib/initramfs-tools", k))], p["initramfs_configs"]),
                     summary=_summary(read["kernels"], read["boot"]), reboot_check=reboot_check, **read)


if __name__ == "__main__":
    main()
