#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_vector_add
short_description: Run the CUDA samples' vectorAdd test on a node's GPUs, with nothing but the NVIDIA driver
version_added: 1.0.0
description:
  - Runs the CUDA samples' C(vectorAdd) test on each GPU of the node - C = A + B on O(elements) random floats,
    checked element by element on the host within 1e-5, as the sample does - and reports per GPU whether it
    passed, the first wrong element, and how long it took.
  - Talks to the CUDA driver API directly (C(libcuda.so.1), loaded with Python's ctypes) and brings its own kernel as
    PTX text, which the driver's JIT compiles for the GPU. So a node needs only the NVIDIA driver - no CUDA toolkit,
    no container runtime, no Python packages - and the test shows that the driver, the GPU and the PTX JIT work
    together, which C(nvidia-smi) does not.
  - The PTX is ISA 6.0 for C(sm_50), so it runs on GPUs of compute capability 5.0 (Maxwell) and later with a driver for
    CUDA 9.0 (384.81) or newer.
  - The task fails, with the results so far, when the library cannot be loaded, C(cuInit) fails (the message names the
    error, such as C(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), and what to check), there is no GPU (see O(fail_on_no_gpu)),
    an index in O(devices) does not exist, the driver cannot compile the PTX (with the JIT's log), a CUDA call fails
    on a GPU, or a GPU computes wrong results. Every selected GPU is tested before the task fails.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: The module changes nothing (it only allocates GPU memory and computes), so it runs the test in check mode too.
  diff_mode:
    support: none
    details: The module changes nothing.
options:
  devices:
    description:
      - Indices of the GPUs to test, as C(nvidia-smi) numbers them. Omitted or empty means every GPU the CUDA driver sees.
      - The module sets C(CUDA_DEVICE_ORDER=PCI_BUS_ID) unless the environment sets it, so that CUDA numbers the GPUs
        as C(nvidia-smi) does; C(CUDA_VISIBLE_DEVICES), when set, limits and renumbers them.
      - An index that does not exist fails the task.
    type: list
    elements: int
  elements:
    description:
      - Number of floats in each vector. The sample uses 50000.
      - Inputs are generated and results checked in Python, which takes about 0.3 seconds per million elements.
    type: int
    default: 50000
  library:
    description: The CUDA driver library to load, a file name looked up by the dynamic linker or a path.
    type: path
    default: libcuda.so.1
  fail_on_no_gpu:
    description:
      - Fail when the CUDA driver finds no GPU (C(cuInit) returns C(CUDA_ERROR_NO_DEVICE), or the count is 0).
      - With V(false) the task then succeeds with empty RV(gpus). A missing driver library fails either way.
    type: bool
    default: true
requirements:
  - The NVIDIA driver, with C(libcuda.so.1) and its PTX JIT compiler (C(libnvidia-ptxjitcompiler.so.1)).
  - A GPU of compute capability 5.0 or later.
notes:
  - Needs read and write access to C(/dev/nvidia*), as any CUDA program does (root, or the groups the driver's
    device files belong to).
  - Uses each GPU's primary context, the one the CUDA runtime also uses; a GPU in Exclusive Process compute mode that
    another process uses fails with C(CUDA_ERROR_DEVICE_UNAVAILABLE).
  - On a MIG-enabled GPU, CUDA sees only the MIG instances that C(CUDA_VISIBLE_DEVICES) names.
seealso:
  - name: vectorAdd in the CUDA samples
    description: The test this module reproduces.
    link: https://github.com/NVIDIA/cuda-samples/tree/master/Samples/0_Introduction/vectorAdd
  - name: CUDA driver API
    description: The functions the module calls.
    link: https://docs.nvidia.com/cuda/cuda-driver-api/
"""

EXAMPLES = r"""
- name: Check that every GPU computes correctly
  k8sgpu.nvidia.cuda_vector_add:
  register: vector_add

- name: Show the per-GPU timings
  ansible.builtin.debug:
    msg: "{{ vector_add.gpus | map(attribute='kernel_ms') | list }}"

- name: Test GPUs 0 and 3 with bigger vectors
  k8sgpu.nvidia.cuda_vector_add:
    devices: [0, 3]
    elements: 1000000

- name: Run on every host; hosts without GPUs pass (they still need the driver library)
  k8sgpu.nvidia.cuda_vector_add:
    fail_on_no_gpu: false
"""

RETURN = r"""
gpus:
  description:
    - Per GPU tested, in the order tested. On failure, the GPUs tested so far.
    - Named C(results) before 2.0.0, the key Ansible reads as the results of a loop.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: CUDA device index.
      type: int
    name:
      description: Device name, from C(cuDeviceGetName).
      type: str
    uuid:
      description: GPU UUID as C(nvidia-smi) shows it, or V(null) where the driver has no C(cuDeviceGetUuid).
      type: str
    pci_bus_id:
      description: PCI address, from C(cuDeviceGetPCIBusId).
      type: str
    compute_capability:
      description: Compute capability, C(major.minor).
      type: str
    passed:
      description: Whether the test ran and every element was right.
      type: bool
    elements:
      description: Number of elements computed.
      type: int
    mismatches:
      description: Number of wrong elements; V(null) when a CUDA error stopped the test before the result was read back.
      type: int
    first_mismatch:
      description: Index of the first wrong element, or V(null).
      type: int
    init_ms:
      description: Milliseconds to retain the GPU's primary context and load (JIT-compile) the PTX module.
      type: float
    time_ms:
      description: Milliseconds for allocating the three vectors, copying A and B to the GPU, the kernel, and copying C back.
      type: float
    kernel_ms:
      description: Milliseconds from C(cuLaunchKernel) until C(cuCtxSynchronize) returned, measured on the host.
      type: float
    error:
      description: Why the GPU failed (a CUDA error, or the wrong elements), or V(null).
      type: str
  sample:
    - index: 0
      name: NVIDIA H100 80GB HBM3
      uuid: GPU-6f3a0b1c-2d4e-5f60-7182-93a4b5c6d7e8
      pci_bus_id: "0000:18:00.0"
      compute_capability: "9.0"
      passed: true
      elements: 50000
      mismatches: 0
      first_mismatch: null
      init_ms: 41.2
      time_ms: 0.61
      kernel_ms: 0.052
      error: null
cuda_driver_version:
  description: CUDA version of the driver, from C(cuDriverGetVersion); V(null) when it could not be read.
  returned: always
  type: str
  sample: "13.0"
device_count:
  description: Number of GPUs the CUDA driver sees.
  returned: always
  type: int
  sample: 8
passed:
  description: Whether every GPU tested passed (V(true) also when there was none, with O(fail_on_no_gpu=false)).
  returned: always
  type: bool
  sample: true
init_ms:
  description:
    - Milliseconds of setup - C(cuInit) and the device count, plus each tested GPU's context and PTX JIT
      (RV(gpus[].init_ms)). The first C(cuInit) after the driver loads can take seconds without persistence mode.
    - V(null) when the driver could not be initialised.
  returned: always
  type: float
  sample: 352.7
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._cuda_driver import (
    CudaDriver,
    CudaLibraryError,
    VectorAddError,
    elements_error,
    run_vector_add,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type="list", elements="int"),
            elements=dict(type="int", default=50000),
            library=dict(type="path", default="libcuda.so.1"),
            fail_on_no_gpu=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    empty = dict(changed=False, gpus=[], cuda_driver_version=None, device_count=0, passed=False, init_ms=None)
    if elements_error(p["elements"]):
        module.fail_json(msg=elements_error(p["elements"]), **empty)
    # CUDA's own default order is fastest first; nvidia-smi and NVML (so the device plugin) number GPUs by PCI address.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        driver = CudaDriver(p["library"])
    except CudaLibraryError as exc:
        module.fail_json(msg=str(exc), **empty)
    try:
        report = run_vector_add(driver, devices=p["devices"], elements=p["elements"], fail_on_no_gpu=p["fail_on_no_gpu"])
    except VectorAddError as exc:
        module.fail_json(msg=str(exc), changed=False, **exc.report)
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
