#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_reboot_check
short_description: Whether a host has booted since its NVIDIA kernel module was installed
version_added: 1.0.0
description:
  - Tells a host that must boot to load a newly installed NVIDIA kernel module from one that booted since the
    module was installed and still has no loaded driver, so that a role reboots a host once after an install and
    never again for a module that cannot load there (a container, a kernel the module was not built for, a module
    that Secure Boot refuses).
  - The boot time (RV(boot_time)) is when PID 1 started - C(btime) of C(<proc_root>/stat) (the kernel's boot, seconds
    since the epoch) plus the start time of C(<proc_root>/1/stat) (its 22nd field, clock ticks after the boot, divided
    by C(SC_CLK_TCK)). On a host that is the boot itself; in a container it is the container's start, its "boot",
    which the kernel's C(btime) and C(boot_id) (the host's) cannot tell.
  - The install time (RV(module_time)) is the newest change time (C(ctime)) of a kernel module file named
    C(nvidia*.ko) (or C(.ko.xz), C(.ko.zst), C(.ko.gz)) under C(<modules_root>/<kernel>/), for every kernel - where
    DKMS installs what it built (C(updates/dkms/)) and where a distribution's prebuilt modules go, less the kernel's
    own modules under C(kernel/) other than C(kernel/nvidia*) (Debian's 6.12 kernel ships C(nvidia-wmi-ec-backlight)
    in C(kernel/drivers/)), read as M(k8sgpu.nvidia.driver_kernels) reads them. The change time,
    not the modification time, which dpkg takes from the package for the files it unpacks; the change time
    is when the file was written on this host.
  - Written because no builtin module gives a container's boot time (the C(uptime) facts read C(/proc/uptime), the
    host's) and M(ansible.builtin.find) would return every file's times for the comparison to be written in Jinja.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes.read_only
attributes:
  platform:
    platforms: linux
options:
  modules_root:
    description: Where the kernel modules are, one directory per kernel release.
    type: path
    default: /lib/modules
  proc_root:
    description: Where procfs is mounted (C(stat), C(1/stat), C(sys/kernel/osrelease)).
    type: path
    default: /proc
notes:
  - A clock set backwards after the install makes an install look older than the boot.
seealso:
  - module: ansible.builtin.reboot
  - module: k8sgpu.nvidia.gpu_facts
"""

EXAMPLES = r"""
- name: Read whether the host booted since the NVIDIA kernel module was installed
  k8sgpu.nvidia.driver_reboot_check:
  register: boot

- name: Reboot into the new driver, once
  ansible.builtin.reboot:
  when: not ansible_facts['nvidia_driver_loaded'] and boot.installed_since_boot
"""

RETURN = r"""
boot_time:
  description: When PID 1 started (the host's boot, or a container's start), in seconds since the epoch.
  returned: always
  type: float
  sample: 1795977601.52
module_time:
  description: The newest change time of an NVIDIA kernel module file, in seconds since the epoch; null when none is installed.
  returned: always
  type: float
  sample: 1795978802.07
module_file:
  description: That file; null when none is installed.
  returned: always
  type: str
  sample: /lib/modules/6.1.0-50-amd64/updates/dkms/nvidia-current.ko
module_kernels:
  description: The kernel releases that have an NVIDIA kernel module, sorted.
  returned: always
  type: list
  elements: str
  sample: [6.1.0-50-amd64]
running_kernel:
  description: The running kernel's release (C(<proc_root>/sys/kernel/osrelease)).
  returned: always
  type: str
  sample: 6.18.5
installed_since_boot:
  description: An NVIDIA kernel module was installed or rebuilt after the boot (RV(module_time) > RV(boot_time)).
  returned: always
  type: bool
  sample: true
detail:
  description:
    - What the times say, for a role's report. When the host booted since the install, why a driver that is not
      loaded will not load by booting again - the running kernel has no NVIDIA module (built for others), or it
      has one that did not load.
  returned: always
  type: str
  sample: >-
    booted since the kernel module was installed (/lib/modules/6.1.0-50-amd64/updates/dkms/nvidia-current.ko):
    the running kernel 6.18.5 has no NVIDIA module (built for 6.1.0-50-amd64)
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_kernels import boot_reading


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "modules_root": {"type": "path", "default": "/lib/modules"},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    try:
        reading = boot_reading(Path(module.params["proc_root"]), Path(module.params["modules_root"]))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **reading)


if __name__ == "__main__":
    main()
