#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Health of each NVIDIA GPU of a host, from nvidia-smi, sysfs and the kernel's Xid events
version_added: 2.0.0
description:
  - Reads, per GPU, from one C(nvidia-smi -q -x) - ECC error counts (volatile and aggregate, SRAM and DRAM), retired
    pages, remapped rows, the driver's C(gpu_recovery_action), C(gpu_reset_status) where the driver reports it, the
    active clock event reasons (HW slowdown, HW thermal slowdown, HW power brake, SW thermal slowdown), the NVSwitch
    fabric state and status, ECC and persistence modes.
  - Lists the NVIDIA GPUs on the PCI bus (C(<sysfs_root>/bus/pci/devices), vendor C(0x10de), class C(0x0300xx) or
    C(0x0302xx), bound to the nvidia driver or to none) that C(nvidia-smi) does not show, or names as one it cannot
    open - GPUs that have fallen off the bus.
  - "Reads the Xid events that the kernel logged since O(since) (the C(NVRM: Xid) lines, with the GPU's PCI address,
    the code, the process and a message, as in C(NVRM: Xid [PCI:0000:3b:00]: 79, pid=..., GPU has fallen off the
    bus.) with round brackets around the address), and gives each to its GPU."
  - Classifies every finding as V(healthy), V(degraded), V(needs_reset), V(needs_reboot) or V(replace) (in that
    order of severity), gives each GPU the worst status of its findings and the host the worst of its GPUs
    (RV(status)), and lists the unhealthy GPUs by index, UUID and PCI address (RV(summary.unhealthy_gpus)).
  - "The rules, and where each comes from (RV(gpus[].findings[].source) names the same):"
  - "ECC - volatile uncorrectable DRAM or SRAM errors (since the driver loaded or the GPU was last reset) > 0:
    V(needs_reset) (Xid catalog, Xid 48/95: RESET_GPU). Aggregate uncorrectable errors with none volatile:
    V(healthy), reported (row remapping handles them; its flags decide). C(sram_threshold_exceeded) or
    C(unrepairable_memory): V(replace) (NVML SRAM error status, field diagnostic threshold; RMA policy).
    C(channel_repair_pending) or C(tpc_repair_pending): V(needs_reset)."
  - "Remapped rows (NVIDIA GPU memory error management, row remapping) - C(remapped_row_failure) Yes: V(replace)
    (RMA policy for row remapping); C(remapped_row_pending) Yes: V(needs_reset) (the remapping takes effect at the
    next GPU reset); a bank without spare rows (C(row_remapper_histogram_none) > 0): V(degraded)."
  - "Retired pages (Dynamic Page Retirement, GPUs before Ampere) - C(pending_retirement) Yes: V(needs_reset) (takes
    effect when the driver reloads); 64 or more retired pages, the most a GPU can retire: V(replace)."
  - "C(gpu_recovery_action) (NVML nvmlDeviceGetGpuRecoveryAction, drivers 550 and later) - C(None): nothing;
    C(GPU Reset), C(Drain and Reset), C(Bus Reset): V(needs_reset); C(Node Reboot), C(System Reboot):
    V(needs_reboot); C(Drain P2P), C(Recover IMEX Domain) and values this module does not know: V(degraded).
    C(gpu_reset_status) C(reset_required) or C(drain_and_reset_recommended) Yes: V(needs_reset)."
  - "NVSwitch fabric (NVML nvmlGpuFabricInfo_t; NVIDIA Fabric Manager user guide: a GPU that
    C(nvidia-fabricmanager) has not registered with the fabric runs no CUDA work, CUDA_ERROR_SYSTEM_NOT_READY) -
    C(fabric/state) other than V(Completed) (V(Not Started), V(In Progress)): V(needs_reset), check
    V(fabric_not_completed); V(Completed) with a C(fabric/status) other than V(Success): V(needs_reset), check
    V(fabric_failed). A GPU without NVSwitch fabric (state V(N/A) or V(Not Supported), or no C(fabric) element) has
    no such finding. V(needs_reset) takes the GPU out of service at the default C(gpu_health_taint_from); the health
    read after a recovery reads the fabric again, so a fabric manager that is not running keeps it out."
  - "Clock event reasons (nvidia-smi documentation) - C(hw_slowdown), C(hw_thermal_slowdown),
    C(hw_power_brake_slowdown) or C(sw_thermal_slowdown) active: V(degraded) (the GPU runs below its clocks:
    cooling, power supply or power brake)."
  - "A GPU on the PCI bus that C(nvidia-smi) does not show or cannot open: V(needs_reboot) (Xid catalog, Xid 79:
    RESTART_BM)."
  - "Xid events (NVIDIA Xid catalog, Ampere and newer; the catalog's immediate action in brackets) - 13, 31, 43
    (RESTART_APP) and 45 (IGNORE): V(healthy), reported (application errors); 63 (row remapping recorded; the
    pending flag decides on the reset), 92 (high single-bit error rate) and 94 (contained ECC error, RESTART_APP):
    V(degraded); 48 (double-bit ECC), 61, 62 (micro-controller), 64 (remapping failed to be recorded), 74 (NVLink),
    95 (uncontained ECC), 119, 120 (GSP), 140 (unrecovered ECC) (RESET_GPU): V(needs_reset); 79 (fallen off the
    bus, RESTART_BM): V(needs_reboot); 154 (recovery action changed): as the new recovery action above; any other
    code: V(degraded), to be looked up in the catalog."
  - "Reported as V(healthy) findings, for information: persistence mode or ECC turned off."
  - The status says what the GPU needs, not what to do with the node's work; a playbook decides that (drain,
    cordon) from RV(status) and RV(summary.unhealthy_gpus).
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
options:
  nvidia_smi:
    description:
      - Path of C(nvidia-smi). By default it is looked up on E(PATH), the C(sbin) directories and C(/usr/bin).
      - Not finding it is an error, as is a given path that is not an executable file.
    type: path
  sysfs_root:
    description: Where sysfs is mounted. PCI devices are read from C(<sysfs_root>/bus/pci/devices).
    type: path
    default: /sys
  proc_root:
    description:
      - Where procfs is mounted. The kernel module version is read from C(<proc_root>/driver/nvidia/version), the
        uptime (to convert an ISO O(since)) from C(<proc_root>/uptime).
    type: path
    default: /proc
  kernel_log:
    description:
      - Where the Xid events are read from.
      - V(auto) (the default) reads C(/dev/kmsg) without blocking - every record of the kernel's ring buffer with its
        time in microseconds since boot, no program run, no locale or timestamp format to parse - and falls back to
        C(dmesg -r) where C(/dev/kmsg) cannot be opened (a container without it). Both need root (C(CAP_SYSLOG)) where
        C(kernel.dmesg_restrict=1).
      - V(kmsg) and V(dmesg) are those alone (failing when they cannot be read); V(journal) runs
        C(journalctl -k -b -o short-monotonic) (the journal keeps what a busy ring buffer has already overwritten);
        V(none) reads no kernel log.
    type: str
    choices: [auto, kmsg, dmesg, journal, none]
    default: auto
  kernel_log_path:
    description:
      - Read the kernel log from this file instead (O(kernel_log) must be V(auto)). Lines in the formats of
        C(/dev/kmsg), C(dmesg -r), C(dmesg) and C(journalctl -o short-monotonic) have a time; lines in other formats
        (syslog's) have none and are kept whatever O(since).
    type: path
  since:
    description:
      - Only Xid events logged at or after this time count.
      - A number is seconds since boot, the clock of C(dmesg)'s C([ 12.345678]) (it does not advance while the
        host is suspended); an ISO 8601 time (V(2026-11-29T04:00:00Z); without an offset, the host's local time) is
        converted to it with the boot time (now minus C(<proc_root>/uptime)). Unset or V(0), the whole log since boot.
      - Set it to when the GPUs were last reset, so that Xid events a reset has already dealt with do not count.
    type: raw
  timeout:
    description:
      - Seconds each command (C(nvidia-smi), C(dmesg), C(journalctl)) may run before it is killed and the module
        fails (through coreutils C(timeout), when the host has it). V(0) waits without a limit.
    type: int
    default: 30
notes:
  - Reads only; changes nothing on the GPUs (no reset, no setting). C(nvidia-smi) runs without a shell, in the C
    locale, once.
  - Fails, naming the host and the fix, when the NVIDIA kernel module is not loaded, C(nvidia-smi) is missing, or
    C(nvidia-smi) reports a driver/library version mismatch (reboot, or reload the kernel module).
  - Volatile ECC counts start again at each driver load and GPU reset; aggregate ones last the GPU's life.
  - C(nvidia-smi -q -x) of an H100 with driver 580 has no C(gpu_reset_status); RV(gpus[].reset_status) values are
    then null.
seealso:
  - name: NVIDIA Xid catalog
    description: Each Xid code's meaning and immediate and investigatory actions.
    link: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
  - name: NVIDIA GPU memory error management
    description: Error containment, row remapping, its RMA policy, and the recovery action flag.
    link: https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html
  - name: NVIDIA Dynamic Page Retirement
    description: Page retirement on GPUs before Ampere.
    link: https://docs.nvidia.com/deploy/dpr-whitepaper/index.html
  - name: nvidia-smi documentation
    description: The fields of C(nvidia-smi -q).
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
  - module: k8sgpu.nvidia.gpu_facts
"""

EXAMPLES = r"""
- name: Read the health of every GPU
  k8sgpu.nvidia.gpu_health:
  register: health

- name: Fail where a GPU needs more than watching
  ansible.builtin.assert:
    that: health.status in ['healthy', 'degraded']
    fail_msg: >-
      {{ inventory_hostname }}: {{ health.status }}:
      {{ health.summary.unhealthy_gpus | map(attribute='pci_bus_id') | join(', ') }}

- name: Count only the Xid events of the last hour (seconds since boot)
  k8sgpu.nvidia.gpu_health:
    since: "{{ (ansible_facts.uptime_seconds | int) - 3600 }}"

- name: Count only the Xid events since a time (ISO 8601)
  k8sgpu.nvidia.gpu_health:
    since: "2026-11-29T04:00:00Z"

- name: Read the Xid events from the journal, which keeps what the ring buffer lost
  k8sgpu.nvidia.gpu_health:
    kernel_log: journal
"""

RETURN = r"""
status:
  description:
    - The host's status, the worst of RV(gpus[].status) (V(healthy) when there is no GPU), one of V(healthy),
      V(degraded), V(needs_reset), V(needs_reboot), V(replace), in that order.
  returned: success
  type: str
  sample: healthy
summary:
  description: The host in short.
  returned: success
  type: dict
  contains:
    status:
      description: Same as RV(status).
      type: str
      sample: needs_reset
    gpu_count:
      description: Number of entries in RV(gpus).
      type: int
      sample: 8
    counts:
      description: Number of GPUs per status; every status is a key.
      type: dict
      sample: {healthy: 7, degraded: 0, needs_reset: 1, needs_reboot: 0, replace: 0}
    unhealthy_gpus:
      description: The GPUs whose status is not V(healthy), in the order of RV(gpus).
      type: list
      elements: dict
      contains:
        index:
          description: As RV(gpus[].index); null for a GPU that C(nvidia-smi) does not show.
          type: int
        uuid:
          description: As RV(gpus[].uuid); null for a GPU that C(nvidia-smi) does not show.
          type: str
        pci_bus_id:
          description: As RV(gpus[].pci_bus_id).
          type: str
        status:
          description: As RV(gpus[].status).
          type: str
        checks:
          description: The RV(gpus[].findings[].check) names of the findings that gave that status.
          type: list
          elements: str
      sample:
        - {index: 3, uuid: GPU-3df950bc-14e1-c147-af67-d6bc91665500, pci_bus_id: "00000000:3B:00.0",
           status: needs_reset, checks: [remapped_rows_pending]}
gpus:
  description:
    - One entry per GPU - those of C(nvidia-smi -q -x) (in its order, which is NVML's index order), then the GPUs on
      the PCI bus that it does not show (V(sysfs)), then the PCI addresses that only the kernel log names
      (V(kernel_log)); see RV(gpus[].source).
    - For the last two kinds, every field read from C(nvidia-smi) is null.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: Position in C(nvidia-smi -q -x), which is the NVML index (C(nvidia-smi -i)); null when C(source) is
        not V(nvidia-smi).
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
      description:
        - PCI address - as C(nvidia-smi) writes it (8-digit domain, upper case, V(00000000:3B:00.0)) for its GPUs;
          as sysfs does (V(0000:3b:00.0)) for V(sysfs) entries; domain, bus and device (V(0000:3b:00)) for
          V(kernel_log) entries, as the Xid lines give it.
      type: str
      sample: "00000000:00:06.0"
    source:
      description:
        - V(nvidia-smi); V(sysfs) for a GPU on the PCI bus that C(nvidia-smi) does not show or cannot open;
          V(kernel_log) for an address only Xid events name.
      type: str
      sample: nvidia-smi
    status:
      description: The worst RV(gpus[].findings[].status), V(healthy) without findings.
      type: str
      sample: healthy
    findings:
      description: What was found, each classified. Empty for a GPU with nothing to report.
      type: list
      elements: dict
      contains:
        check:
          description:
            - Which rule - V(ecc_volatile_dram_uncorrectable), V(ecc_volatile_sram_uncorrectable),
              V(ecc_volatile_uncorrectable), V(ecc_aggregate_uncorrectable), V(ecc_sram_threshold_exceeded),
              V(ecc_unrepairable_memory), V(ecc_channel_repair_pending), V(ecc_tpc_repair_pending),
              V(remapped_rows_failure), V(remapped_rows_pending), V(remapped_rows_no_spare), V(retired_pages_pending),
              V(retired_pages_exhausted), V(recovery_action), V(reset_required), V(drain_and_reset_recommended),
              V(fabric_not_completed), V(fabric_failed),
              V(clocks_hw_slowdown), V(clocks_hw_thermal_slowdown), V(clocks_hw_power_brake_slowdown),
              V(clocks_sw_thermal_slowdown), V(persistence_mode_disabled), V(ecc_disabled),
              V(missing_from_nvidia_smi), V(not_on_pci_bus), or V(xid_<code>) (one per Xid event).
          type: str
          sample: remapped_rows_pending
        status:
          description: The finding's status.
          type: str
          sample: needs_reset
        detail:
          description: What was read, in words.
          type: str
          sample: a row remapping is pending; it takes effect at the next GPU reset
        source:
          description: Where the rule comes from (NVIDIA's document, and the action it gives).
          type: str
    persistence_mode:
      description: From C(persistence_mode) - V(Enabled), V(Disabled) or V(N/A).
      type: str
      sample: Enabled
    ecc_mode:
      description: Current ECC mode, from C(ecc_mode/current_ecc) - V(Enabled), V(Disabled) or V(N/A).
      type: str
      sample: Enabled
    ecc_errors:
      description:
        - ECC error counts, from C(ecc_errors). A count the GPU does not report (V(N/A)) is null.
        - C(volatile) counts since the driver loaded or the GPU was last reset; C(aggregate) over the GPU's life
          (kept in its InfoROM).
      type: dict
      contains:
        volatile:
          description:
            - Counts (errors) C(sram_correctable), C(sram_uncorrectable) (the sum of C(sram_uncorrectable_parity)
              and C(sram_uncorrectable_secded) where the driver splits it, 550 and later), C(sram_uncorrectable_parity),
              C(sram_uncorrectable_secded), C(dram_correctable), C(dram_uncorrectable) (double-bit), and the totals
              C(correctable) and C(uncorrectable) (from C(single_bit/total) and C(double_bit/total) on drivers older
              than 535).
          type: dict
          sample: {sram_correctable: 0, sram_uncorrectable: 0, sram_uncorrectable_parity: 0,
                   sram_uncorrectable_secded: 0, dram_correctable: 0, dram_uncorrectable: 0, correctable: 0,
                   uncorrectable: 0}
        aggregate:
          description: The same counts as C(volatile), over the GPU's life.
          type: dict
        sram_threshold_exceeded:
          description: From C(ecc_errors/aggregate/sram_threshold_exceeded); null where not reported.
          type: bool
        channel_repair_pending:
          description: From C(ecc_errors/channel_repair_pending); null where not reported.
          type: bool
        tpc_repair_pending:
          description: From C(ecc_errors/tpc_repair_pending); null where not reported.
          type: bool
        unrepairable_memory:
          description: From C(ecc_errors/unrepairable_memory); null where not reported.
          type: bool
    retired_pages:
      description: Dynamic page retirement (GPUs before Ampere; null values on later ones, where it is V(N/A)).
      type: dict
      contains:
        single_bit:
          description: Pages retired for multiple single-bit errors (pages), from
            C(retired_pages/multiple_single_bit_retirement/retired_count).
          type: int
        double_bit:
          description: Pages retired for a double-bit error (pages), from C(retired_pages/double_bit_retirement/retired_count).
          type: int
        pending:
          description: Whether a retirement waits for the next driver load, from C(retired_pages/pending_retirement).
          type: bool
    remapped_rows:
      description: Row remapping (Ampere and later), from C(remapped_rows); null values where not supported.
      type: dict
      contains:
        correctable:
          description: Rows remapped for correctable errors (rows), from C(remapped_row_corr).
          type: int
          sample: 0
        uncorrectable:
          description: Rows remapped for uncorrectable errors (rows), from C(remapped_row_unc).
          type: int
          sample: 0
        pending:
          description: Whether a remapping waits for the next GPU reset, from C(remapped_row_pending).
          type: bool
          sample: false
        failure:
          description: Whether a remapping has ever failed, from C(remapped_row_failure).
          type: bool
          sample: false
        banks_without_spare_rows:
          description: Memory banks with no spare row left (banks), from C(row_remapper_histogram/row_remapper_histogram_none).
          type: int
          sample: 0
    recovery_action:
      description:
        - The driver's recovery action, from C(gpu_recovery_action) (drivers 550 and later), as written there
          (V(None), V(GPU Reset), V(Node Reboot), V(Drain P2P), V(Drain and Reset)); null where not reported.
      type: str
      sample: None
    reset_status:
      description: From C(gpu_reset_status), where the driver reports it; null values where it does not.
      type: dict
      contains:
        reset_required:
          description: From C(gpu_reset_status/reset_required).
          type: bool
        drain_and_reset_recommended:
          description: From C(gpu_reset_status/drain_and_reset_recommended).
          type: bool
    fabric_state:
      description:
        - The GPU's NVSwitch fabric registration state, from C(fabric/state), as written there - V(Not Started),
          V(In Progress), V(Completed), V(Not Supported), or V(N/A) on a GPU without NVSwitch fabric; null where the
          driver writes no C(fabric) element, and for GPUs that C(nvidia-smi) does not show.
      type: str
      sample: Completed
    fabric_status:
      description:
        - The result of that registration, from C(fabric/status) - V(Success), an NVML error text, or V(N/A); null
          as RV(gpus[].fabric_state) is.
      type: str
      sample: Success
    clock_event_reasons:
      description:
        - Whether each clock event reason is active (true), from C(clocks_event_reasons) (C(clocks_throttle_reasons)
          before driver 535) - C(hw_slowdown), C(hw_thermal_slowdown), C(hw_power_brake_slowdown),
          C(sw_thermal_slowdown); null where not reported.
      type: dict
      sample: {hw_slowdown: false, hw_thermal_slowdown: false, hw_power_brake_slowdown: false,
               sw_thermal_slowdown: false}
    xid_events:
      description: This GPU's entries of RV(xid_events).
      type: list
      elements: dict
xid_events:
  description: The Xid events of the kernel log at or after O(since), in the log's order.
  returned: success
  type: list
  elements: dict
  contains:
    code:
      description: The Xid code.
      type: int
      sample: 79
    pci_bus_id:
      description: The GPU's domain, bus and device as the Xid line gives them, lower case (V(0000:3b:00)).
      type: str
      sample: "0000:3b:00"
    time:
      description: Seconds since boot (the kernel's timestamp), null for a line without one.
      type: float
      sample: 4242.123456
    pid:
      description: The process ID the line names (C(pid=)), as text (V(<unknown>) occurs), or null.
      type: str
      sample: "2881"
    process:
      description: The process name the line names (C(name=)), or null.
      type: str
      sample: python3
    message:
      description: The rest of the line, after the code and the pid and name.
      type: str
      sample: GPU has fallen off the bus.
    status:
      description: The event's status (see the rules above).
      type: str
      sample: needs_reboot
    source:
      description: Where the rule comes from.
      type: str
    gpu_index:
      description: RV(gpus[].index) of its GPU; null when that GPU is not one of C(nvidia-smi)'s.
      type: int
kernel_log:
  description: What was read for RV(xid_events).
  returned: success
  type: dict
  contains:
    source:
      description: V(/dev/kmsg), the command run (V(/usr/bin/dmesg -r), C(journalctl ...)), the O(kernel_log_path),
        or V(none).
      type: str
      sample: /dev/kmsg
    since:
      description: O(since) as seconds since boot.
      type: float
      sample: 0.0
    lines:
      description: Number of lines (records) read.
      type: int
      sample: 1532
driver_version:
  description: Driver version, from C(driver_version) of C(nvidia-smi -q -x).
  returned: success
  type: str
  sample: 580.159.04
cuda_version:
  description: Highest CUDA version the driver supports, from C(cuda_version); null where C(nvidia-smi) gave no XML.
  returned: success
  type: str
  sample: "13.0"
"""

import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._gpu_health import KERNEL_LOG_SOURCES, gather
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import GpuFactsError, command_runner


def _find_nvidia_smi(module: AnsibleModule) -> tuple[str | None, str | None]:
    """Return (path, None) or (None, why it was not found)."""
    path = module.params["nvidia_smi"]
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, None
        return None, f"nvidia_smi={path} is not an executable file"
    found = module.get_bin_path("nvidia-smi", opt_dirs=["/usr/bin"])
    return found, None if found else "nvidia-smi was not found on PATH nor in /usr/bin"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            sysfs_root=dict(type="path", default="/sys"),
            proc_root=dict(type="path", default="/proc"),
            kernel_log=dict(type="str", default="auto", choices=list(KERNEL_LOG_SOURCES)),
            kernel_log_path=dict(type="path"),
            since=dict(type="raw"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 0:
        module.fail_json(msg=f"timeout must be 0 (no limit) or more seconds, not {params['timeout']}")
    if params["kernel_log_path"] and params["kernel_log"] != "auto":
        module.fail_json(msg=f"kernel_log_path reads the kernel log from a file; leave kernel_log at auto, not "
                             f"{params['kernel_log']}")
    since = params["since"]
    if isinstance(since, bool) or not isinstance(since, (str, int, float, type(None))):
        module.fail_json(msg=f"since must be seconds since boot or an ISO 8601 time, not {since!r}")

    nvidia_smi, missing_reason = _find_nvidia_smi(module)
    try:
        result, warnings = gather(
            command_runner(module, params["timeout"]),
            nvidia_smi,
            sysfs_root=params["sysfs_root"],
            proc_root=params["proc_root"],
            kernel_log=params["kernel_log"],
            kernel_log_path=params["kernel_log_path"],
            since=since,
            dmesg=module.get_bin_path("dmesg", opt_dirs=["/usr/bin", "/bin"]),
            journalctl=module.get_bin_path("journalctl", opt_dirs=["/usr/bin", "/bin"]),
            hostname=socket.gethostname(),
            nvidia_smi_missing_reason=missing_reason,
        )
    except GpuFactsError as exc:
        module.fail_json(msg=str(exc))
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
