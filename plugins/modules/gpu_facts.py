#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: NVIDIA GPU, driver and CUDA facts, with a sysfs fallback when there is no driver
version_added: 1.0.0
description:
  - Sets facts about the host's NVIDIA GPUs and driver - per GPU its index, UUID, name, PCI address, memory,
    compute capability, MIG and persistence modes; the driver and CUDA driver versions; and whether the kernel
    module is the open or the proprietary flavour.
  - The NVIDIA PCI devices are always read from sysfs, so a host without a driver (or without C(nvidia-smi))
    still reports its GPUs in RV(ansible_facts.nvidia_pci_devices), with an empty RV(ansible_facts.nvidia_gpus)
    and RV(ansible_facts.nvidia_gpu_source=sysfs). That is not a failure, nor is a host without any NVIDIA device
    unless O(fail_on_missing=true).
  - When the kernel module is loaded (C(/proc/driver/nvidia/version) exists), runs C(nvidia-smi -q -x) and
    C(nvidia-smi --query-gpu=index,uuid,compute_cap --format=csv,noheader,nounits), merged by GPU UUID. The second
    query is only for the compute capability, which the XML does not carry; drivers older than 510 cannot answer
    it, which gives a warning and a null RV(ansible_facts.nvidia_gpus[].compute_capability).
  - Lists the NVSwitches of the host (NVIDIA functions of PCI class C(0x0680xx), other bridge, in
    C(<sysfs_root>/bus/pci/devices)) in RV(ansible_facts.nvidia_nvswitches), with their generation by device id
    (the NVSwitch driver's tables - LR10 of HGX A100, LS10 of HGX H100 and H200), and gives every GPU its NVSwitch
    fabric state and status from C(nvidia-smi -q -x) (RV(ansible_facts.nvidia_gpus[].fabric_state)), which is
    V(Completed) and V(Success) once C(nvidia-fabricmanager) has registered the GPU.
  - "Detects the C(Failed to initialize NVML: Driver/library version mismatch) of C(nvidia-smi), which means the
    driver packages changed without the kernel module being reloaded, and fails saying so (see O(fail_on_mismatch))."
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
  - ansible.builtin.action_common_attributes.facts
attributes:
  action:
    support: full
    details: An action plugin runs the module, or with O(reuse=true) may hand back the facts of an earlier read.
  async:
    support: none
  bypass_host_loop:
    support: none
  facts:
    support: full
    details: Sets the C(nvidia_*) facts listed under RV(ansible_facts).
options:
  nvidia_smi:
    description:
      - Path of C(nvidia-smi).
      - By default it is looked up on E(PATH), the C(sbin) directories and C(/usr/bin). Not finding it is not an
        error; a given path that is not an executable file gives a warning, and the facts then come from sysfs.
    type: path
  sysfs_root:
    description: Where sysfs is mounted. PCI devices are read from C(<sysfs_root>/bus/pci/devices).
    type: path
    default: /sys
  proc_root:
    description: Where procfs is mounted. The kernel module version is read from C(<proc_root>/driver/nvidia/version).
    type: path
    default: /proc
  fail_on_missing:
    description:
      - "Fail when the host has no NVIDIA GPU, neither in sysfs nor according to C(nvidia-smi). The message names the
        host, as C(<hostname>: no NVIDIA GPU found in /sys/bus/pci/devices)."
      - A GPU without a loaded driver is not missing.
    type: bool
    default: false
  fail_on_mismatch:
    description:
      - Fail when C(nvidia-smi) reports a driver/library version mismatch. The message gives the loaded kernel
        module version and says that a reboot (or reloading the kernel module) is needed.
      - With V(false), the module warns instead and returns RV(ansible_facts.nvidia_driver_version_mismatch=true),
        with the GPU facts from sysfs only, so that a play can decide when to reboot.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each C(nvidia-smi) command may run before it is killed and the module fails (through coreutils
        C(timeout), when the host has it). V(0) waits without a limit.
    type: int
    default: 30
  reuse:
    description:
      - With V(true), the facts that an earlier read in the same C(ansible-playbook) run left on this host stand for
        this read, without running anything on the host, when that read had the same O(nvidia_smi), O(sysfs_root)
        and O(proc_root), and found no driver/library version mismatch (nor, with O(fail_on_missing=true), a host
        without a GPU). Otherwise the host is read as with V(false). RV(reused) says which.
      - The action plugin decides, on the controller, from RV(ansible_facts.nvidia_facts_read). Facts of another run
        (a fact cache) are never reused.
      - Whatever changes the driver between the two reads must read the facts again (without O(reuse)); the driver
        role does so after a reboot, and when new packages leave a loaded kernel module behind them.
    type: bool
    default: false
    version_added: 1.1.0
  kernels:
    description:
      - Also read, for every installed kernel (C(/lib/modules/*), the images under C(/boot)), whether the NVIDIA
        kernel module of the driver's branch is built and installed for it (DKMS's records under C(/var/lib/dkms),
        the module files), as M(k8sgpu.nvidia.driver_kernels) reads it, into RV(ansible_facts.nvidia_kernel_modules).
        A walk of each kernel's module tree; no command is run.
    type: bool
    default: false
    version_added: 2.0.0
notes:
  - Reads only; C(nvidia-smi) is run without a shell, in the C locale, and never when the kernel module is not
    loaded (where it could load it through C(nvidia-modprobe)).
  - RV(ansible_facts.nvidia_pci_devices[].pci_bus_id) uses the kernel's 4-digit PCI domain (V(0000:00:06.0)),
    RV(ansible_facts.nvidia_gpus[].pci_bus_id) the 8-digit one of C(nvidia-smi) (V(00000000:00:06.0)).
  - The fourth-generation NVSwitches of HGX B200/B100 systems are managed through the NVLink Subnet Manager (NVIDIA
    Fabric Manager user guide) and are not NVIDIA bridge functions of the host, so they are not in
    RV(ansible_facts.nvidia_nvswitches); their GPUs' fabric state is reported all the same. Nor are NVSwitches that
    a hypervisor keeps to itself. A GPU may so report V(Completed) on a host whose PCI bus shows no NVSwitch; the
    fabric state, not that list, says whether a GPU is registered with its fabric.
seealso:
  - name: nvidia-smi documentation
    description: The fields of C(nvidia-smi -q) and C(--query-gpu).
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
  - name: NVML fabric definitions
    description: The GPU fabric states (C(nvmlGpuFabricState_t)) and status of C(nvmlGpuFabricInfo_t).
    link: https://docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html
  - name: NVIDIA Fabric Manager user guide
    description: NVSwitch systems, and the fabric manager that registers their GPUs.
    link: https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html
  - name: The PCI ID repository
    description: The NVIDIA device ids of the NVSwitch generations.
    link: https://pci-ids.ucw.cz/read/PC/10de
"""

EXAMPLES = r"""
- name: Gather NVIDIA GPU facts
  k8sgpu.nvidia.gpu_facts:

- name: Every host in the group must have a GPU, and a driver that matches its libraries
  k8sgpu.nvidia.gpu_facts:
    fail_on_missing: true

- name: Reboot hosts whose driver was upgraded under a loaded kernel module
  block:
    - name: Read the facts without failing on a version mismatch
      k8sgpu.nvidia.gpu_facts:
        fail_on_mismatch: false

    - name: Reboot to load the new kernel module
      ansible.builtin.reboot:
      when: ansible_facts.nvidia_driver_version_mismatch

- name: Read the GPUs again only where an earlier task of this run has not
  k8sgpu.nvidia.gpu_facts:
    reuse: true

- name: Every GPU of a host with NVSwitches must be registered with the fabric
  ansible.builtin.assert:
    that: >-
      ansible_facts.nvidia_gpus
      | rejectattr('fabric_state', 'equalto', 'Completed') | list | length == 0
      and ansible_facts.nvidia_gpus
      | rejectattr('fabric_status', 'equalto', 'Success') | list | length == 0
    fail_msg: "{{ inventory_hostname }}: start nvidia-fabricmanager, then read the facts again"
  when: ansible_facts.nvidia_nvswitches | length > 0

- name: Show the GPU models and compute capabilities
  ansible.builtin.debug:
    msg: "GPU {{ item.index }}: {{ item.name }}, compute capability {{ item.compute_capability }}, MIG {{ item.mig_mode }}"
  loop: "{{ ansible_facts.nvidia_gpus }}"
  loop_control:
    label: "{{ item.uuid }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts about the NVIDIA GPUs and driver of the host.
  returned: always
  type: dict
  contains:
    nvidia_gpus:
      description:
        - GPUs as C(nvidia-smi) reports them, in its order. Empty when RV(ansible_facts.nvidia_gpu_source=sysfs).
      type: list
      elements: dict
      contains:
        index:
          description:
            - The C(nvidia-smi) (NVML) index, as used by C(nvidia-smi -i) and C(CUDA_DEVICE_ORDER=PCI_BUS_ID), from
              the C(--query-gpu) answer; where that query fails, the position in C(nvidia-smi -q -x), which is the
              same order.
          type: int
          sample: 0
        minor_number:
          description: Device minor number (C(/dev/nvidia<minor_number>)), from C(minor_number); null when N/A.
          type: int
          sample: 0
        uuid:
          description: GPU UUID, from C(uuid).
          type: str
          sample: GPU-3df950bc-14e1-c147-af67-d6bc91665500
        name:
          description: Product name, from C(product_name).
          type: str
          sample: NVIDIA H100 80GB HBM3
        pci_bus_id:
          description: PCI address as C(nvidia-smi) writes it (8-digit domain), from C(pci/pci_bus_id).
          type: str
          sample: "00000000:00:06.0"
        memory_total_mib:
          description: Total framebuffer memory in MiB, from C(fb_memory_usage/total); null when not reported.
          type: int
          sample: 81559
        compute_capability:
          description:
            - CUDA compute capability as C(major.minor), from C(nvidia-smi --query-gpu=compute_cap).
            - Null when the driver cannot report it (older than 510), with a warning.
          type: str
          sample: "9.0"
        mig_mode:
          description: Current MIG mode, from C(mig_mode/current_mig) - V(Enabled), V(Disabled) or V(N/A) (no MIG support).
          type: str
          sample: Disabled
        persistence_mode:
          description: Persistence mode, from C(persistence_mode) - V(Enabled), V(Disabled) or V(N/A).
          type: str
          sample: Enabled
        fabric_state:
          description:
            - The GPU's NVSwitch fabric registration state, from C(fabric/state), as written there (NVML
              C(nvmlGpuFabricState_t)) - V(Not Started), V(In Progress), V(Completed) (registered by
              C(nvidia-fabricmanager)), V(Not Supported), or V(N/A) on a GPU without NVSwitch fabric (a PCIe card).
            - Null where the driver writes no C(fabric) element.
          type: str
          sample: Completed
          version_added: 2.0.0
        fabric_status:
          description:
            - The result of that registration, from C(fabric/status) - V(Success), an NVML error text, or V(N/A).
              NVML defines it only once RV(ansible_facts.nvidia_gpus[].fabric_state=Completed).
            - Null where the driver writes no C(fabric) element.
          type: str
          sample: Success
          version_added: 2.0.0
    nvidia_driver_loaded:
      description: Whether the NVIDIA kernel module is loaded (C(/proc/driver/nvidia/version) exists).
      type: bool
      sample: true
    nvidia_driver_version:
      description:
        - Driver version, from C(driver_version) of C(nvidia-smi -q -x), else from C(/proc/driver/nvidia/version)
          (the loaded kernel module). Null when no module is loaded.
      type: str
      sample: 580.159.04
    nvidia_cuda_driver_version:
      description:
        - Highest CUDA version the driver supports, from C(cuda_version) of C(nvidia-smi -q -x). Null without
          C(nvidia-smi).
      type: str
      sample: "13.0"
    nvidia_kernel_module_flavour:
      description:
        - V(open) when C(/proc/driver/nvidia/version) says C(Open Kernel Module), else V(proprietary). Null when no
          module is loaded.
      type: str
      sample: open
    nvidia_driver_version_mismatch:
      description:
        - Whether C(nvidia-smi) reported C(Driver/library version mismatch). Also set in the failure result when
          O(fail_on_mismatch=true).
      type: bool
      sample: false
    nvidia_pci_devices:
      description:
        - Every PCI function of vendor C(0x10de) in C(<sysfs_root>/bus/pci/devices), sorted by address, whether or
          not a driver is loaded. Includes non-GPU functions such as HDMI audio and NVSwitches.
      type: list
      elements: dict
      contains:
        pci_bus_id:
          description: PCI address, the directory name in sysfs (4-digit domain).
          type: str
          sample: "0000:00:06.0"
        vendor_id:
          description: Vendor ID, from the C(vendor) file.
          type: str
          sample: "0x10de"
        device_id:
          description: Device ID, from the C(device) file.
          type: str
          sample: "0x2330"
        class:
          description: PCI class code, from the C(class) file.
          type: str
          sample: "0x030200"
        gpu:
          description: Whether the class is a display (C(0x0300xx)) or 3D (C(0x0302xx)) controller, that is a GPU.
          type: bool
          sample: true
        nvswitch:
          description:
            - Whether the class is an other bridge (C(0x0680xx)), that is an NVSwitch (see
              RV(ansible_facts.nvidia_nvswitches), which lists these).
          type: bool
          sample: false
          version_added: 2.0.0
        driver:
          description: Kernel driver bound to the device (for example V(nvidia), V(nouveau), V(vfio-pci)), or null.
          type: str
          sample: nvidia
    nvidia_kernel_modules:
      description:
        - With O(kernels), per installed kernel release - C(status) (V(ok), V(not_built), V(no_headers)), C(detail),
          C(fix), C(running), C(image) (a kernel image under C(/boot)) and C(headers); the branch is that of the running
          kernel's DKMS module, else the newest DKMS has. Read from C(/lib/modules), C(/boot), C(/usr/src) and
          C(/var/lib/dkms). Absent without O(kernels).
      returned: with O(kernels)
      type: dict
      sample: {"6.1.0-44-amd64": {"status": "ok", "detail": "module nvidia-current 535.261.03 installed", "fix": "",
               "running": true, "image": true, "headers": true}}
      version_added: 2.0.0
    nvidia_nvswitches:
      description:
        - The NVSwitches of RV(ansible_facts.nvidia_pci_devices) (vendor C(0x10de), class C(0x0680xx)), in its
          order; empty on a host without any (whether or not a driver is loaded).
        - The bridge functions that the NVSwitch driver's table lists beside the H100 NVSwitch (V(0x22a8) to
          V(0x22af)) are not NVSwitches, so one NVSwitch is one entry.
      type: list
      elements: dict
      version_added: 2.0.0
      contains:
        pci_bus_id:
          description: PCI address, the directory name in sysfs (4-digit domain).
          type: str
          sample: "0000:05:00.0"
        device_id:
          description: Device ID, from the C(device) file.
          type: str
          sample: "0x22a3"
        generation:
          description:
            - The NVSwitch generation of the device id, after the NVSwitch driver's device id tables
              (open-gpu-kernel-modules C(src/common/nvswitch/kernel/nvswitch.c)) - V(LR10) (HGX A100; V(0x1ae8),
              V(0x1af0) to V(0x1aff)) or V(LS10) (HGX H100 and H200; V(0x22a0) to V(0x22a7)); null for another id
              (the NVSwitch is reported all the same).
          type: str
          sample: LS10
        name:
          description:
            - The PCI ID repository's name of the device id (C(pci.ids), vendor 10de) - V(GA100 [A100 NVSwitch]) for
              V(0x1af1), V(GH100 [H100 NVSwitch]) for V(0x22a3), the only NVSwitch names it has; null for another id.
          type: str
          sample: GH100 [H100 NVSwitch]
        driver:
          description: Kernel driver bound to the device (V(nvidia-nvswitch) where the driver runs), or null.
          type: str
          sample: nvidia-nvswitch
    nvidia_gpu_source:
      description:
        - V(nvidia-smi) when RV(ansible_facts.nvidia_gpus) comes from C(nvidia-smi); V(sysfs) when there is no loaded
          driver, no C(nvidia-smi), or a version mismatch, and only RV(ansible_facts.nvidia_pci_devices) is known.
      type: str
      sample: nvidia-smi
    nvidia_facts_read:
      description:
        - Which read the other facts come from, set by the action plugin on the controller after the module ran
          successfully; O(reuse=true) compares it.
        - C(run) is a token of the C(ansible-playbook) run (a hash of the random multiprocessing authentication key
          its processes share, not the key); the others are the options of that read, as given.
      type: dict
      version_added: 1.1.0
      sample: {run: 3f9c2b7d01a4e6c8, nvidia_smi: null, sysfs_root: /sys, proc_root: /proc}
reused:
  description:
    - Whether the facts are those of an earlier read in the same run (O(reuse=true)); V(false) when the module read
      the host.
  returned: always
  type: bool
  sample: true
  version_added: 1.1.0
"""

import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_kernels import read_kernels
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import (
    READ_OPTIONS,
    GpuFactsError,
    command_runner,
    gather,
)


def _find_nvidia_smi(module: AnsibleModule) -> tuple[str | None, str | None]:
    """Return (path, None) or (None, why it was not found)."""
    path = module.params["nvidia_smi"]
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, None
        module.warn(f"nvidia_smi={path} is not an executable file; GPU details come from sysfs only.")
        return None, f"nvidia_smi={path} is not an executable file"
    found = module.get_bin_path("nvidia-smi", opt_dirs=["/usr/bin"])
    return found, None if found else "nvidia-smi was not found on PATH nor in /usr/bin"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            sysfs_root=dict(type="path", default=READ_OPTIONS["sysfs_root"]),
            proc_root=dict(type="path", default=READ_OPTIONS["proc_root"]),
            fail_on_missing=dict(type="bool", default=False),
            fail_on_mismatch=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
            # Decided by the action plugin (plugins/action/gpu_facts.py), which has the controller's view of the run.
            reuse=dict(type="bool", default=False),
            kernels=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 0:
        module.fail_json(msg=f"timeout must be 0 (no limit) or more seconds, not {params['timeout']}")

    nvidia_smi, missing_reason = _find_nvidia_smi(module)
    try:
        facts, warnings = gather(
            command_runner(module, params["timeout"]),
            nvidia_smi,
            sysfs_root=params["sysfs_root"],
            proc_root=params["proc_root"],
            fail_on_missing=params["fail_on_missing"],
            fail_on_mismatch=params["fail_on_mismatch"],
            hostname=socket.gethostname(),
            nvidia_smi_missing_reason=missing_reason,
        )
    except GpuFactsError as exc:
        result = {"ansible_facts": exc.facts} if exc.facts else {}
        module.fail_json(msg=str(exc), **result)
    for warning in warnings:
        module.warn(warning)
    if params["kernels"]:
        facts["nvidia_kernel_modules"] = kernel_modules("/", os.uname().release)
    module.exit_json(changed=False, ansible_facts=facts)


def kernel_modules(root: str, running: str) -> dict:
    """The NVIDIA module of every installed kernel (driver_kernels' reading, without its decision)."""
    read = read_kernels(root, running)
    keys = ("status", "detail", "fix", "running", "image", "headers")
    return {release: {k: info[k] for k in keys} for release, info in read["kernels"].items()}


if __name__ == "__main__":
    main()
