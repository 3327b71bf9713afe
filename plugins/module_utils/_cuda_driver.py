# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the CUDA samples' vectorAdd test through the CUDA driver API.

Not a public API; modules of this collection only. A node needs nothing but the
NVIDIA driver: libcuda.so.1 is loaded with ctypes and the kernel is PTX text of
our own, compiled by the driver's JIT for whatever GPU it finds.

Layers:
  * pure functions (inputs, comparison, number and error formatting, device
    selection) - no GPU, unit-tested directly;
  * CudaDriver, a thin ctypes binding with one method per driver call, each
    raising CudaError on a non-zero CUresult - the only code that touches the
    library, and what tests replace with a fake of the same methods;
  * run_vector_add(driver, ...), the test itself, written against those methods.
"""
from __future__ import annotations

import ctypes
import itertools
import math
import random
import struct
import time
from array import array
from typing import Any, Callable, Sequence

PTX_ISA = "6.0"
PTX_TARGET = "sm_50"
PTX_MIN_DRIVER = "CUDA 9.0 (driver 384.81 or newer)"
KERNEL_NAME = "vectorAdd"
BLOCK_SIZE = 256
TOLERANCE = 1e-5
MAX_ELEMENTS = 2**31 - 1  # the kernel's n is a 32-bit int
FLOAT_NAN_BITS = 0x7FC00000  # C is filled with this before the launch, so an element the kernel never wrote is a mismatch

# vectorAdd from the CUDA samples, as nvcc writes it, by hand:
#   __global__ void vectorAdd(const float *A, const float *B, float *C, int n)
#   { int i = blockDim.x * blockIdx.x + threadIdx.x; if (i < n) C[i] = A[i] + B[i]; }
# PTX ISA 6.0 (CUDA 9.0) and target sm_50 (Maxwell): the driver JIT-compiles it
# for any GPU of compute capability 5.0 or higher.
VECTOR_ADD_PTX = r"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry vectorAdd(
    .param .u64 vectorAdd_param_0,
    .param .u64 vectorAdd_param_1,
    .param .u64 vectorAdd_param_2,
    .param .u32 vectorAdd_param_3
)
{
    .reg .pred %p<2>;
    .reg .f32 %f<4>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [vectorAdd_param_0];
    ld.param.u64 %rd2, [vectorAdd_param_1];
    ld.param.u64 %rd3, [vectorAdd_param_2];
    ld.param.u32 %r2, [vectorAdd_param_3];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.s32 %p1, %r1, %r2;
    @%p1 bra $L__done;

    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.s32 %rd7, %r1, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;

$L__done:
    ret;
}
"""

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
JIT_LOG_BYTES = 16384

# CUresult names (cuda.h), for when cuGetErrorName is not there or does not know the code.
CUDA_ERRORS = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
    200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    218: "CUDA_ERROR_INVALID_PTX",
    220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}

_KERNEL_FAULT = "the GPU faulted running the kernel; look for NVRM Xid messages in the kernel log (dmesg) and check the GPU's health"
_JIT_DISABLED = "the driver did not compile the PTX: unset CUDA_DISABLE_PTX_JIT, and check that the driver's JIT library is installed"
ERROR_HINTS = {
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable GPU is visible to this process: check nvidia-smi, that /dev/nvidia* exist and are readable, "
                            "and CUDA_VISIBLE_DEVICES",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": "libcuda and the loaded nvidia kernel module are from different driver versions "
                                         "(driver upgraded without a reboot or module reload?); compare nvidia-smi with "
                                         "/proc/driver/nvidia/version",
    "CUDA_ERROR_STUB_LIBRARY": "this is the CUDA toolkit's stub libcuda.so, not the driver's: point library at the driver's libcuda.so.1",
    "CUDA_ERROR_SYSTEM_NOT_READY": "the system is not ready for CUDA: on NVSwitch systems (HGX, DGX) start nvidia-fabricmanager, "
                                   "and check the fabric state in nvidia-smi -q",
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": "a CUDA forward-compatibility libcuda (cuda-compat) is in use on a GPU that it does not support",
    "CUDA_ERROR_OPERATING_SYSTEM": "an operating system call failed: check permissions on /dev/nvidia* and the kernel log",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "the GPU is busy or unavailable: in Exclusive Process compute mode another process may hold it "
                                     "(nvidia-smi -q -d COMPUTE)",
    "CUDA_ERROR_DEVICE_NOT_LICENSED": "the vGPU has no license",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": f"the driver is too old for PTX ISA {PTX_ISA}, which needs {PTX_MIN_DRIVER}",
    "CUDA_ERROR_INVALID_PTX": "the driver's JIT compiler rejected the PTX",
    "CUDA_ERROR_JIT_COMPILER_NOT_FOUND": "the driver's PTX JIT compiler (libnvidia-ptxjitcompiler.so.1) is missing: install the driver's "
                                         "compute libraries completely",
    "CUDA_ERROR_JIT_COMPILATION_DISABLED": _JIT_DISABLED,
    "CUDA_ERROR_NO_BINARY_FOR_GPU": _JIT_DISABLED,
    "CUDA_ERROR_OUT_OF_MEMORY": "not enough free GPU memory: lower elements, or see what else uses the GPU (nvidia-smi)",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "uncorrectable ECC error: check nvidia-smi -q -d ECC and drain the node",
    "CUDA_ERROR_NVLINK_UNCORRECTABLE": "uncorrectable NVLink error: check nvidia-smi nvlink -e and the kernel log",
    "CUDA_ERROR_ILLEGAL_ADDRESS": _KERNEL_FAULT,
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": _KERNEL_FAULT,
    "CUDA_ERROR_MISALIGNED_ADDRESS": _KERNEL_FAULT,
    "CUDA_ERROR_HARDWARE_STACK_ERROR": _KERNEL_FAULT,
    "CUDA_ERROR_LAUNCH_FAILED": _KERNEL_FAULT,
    "CUDA_ERROR_LAUNCH_TIMEOUT": "the kernel ran into the display watchdog's time limit",
}


class CudaLibraryError(Exception):
    """libcuda cannot be loaded, or lacks a function this module needs."""


class CudaError(Exception):
    """A driver API call returned an error."""

    def __init__(self, call: str, code: int, name: str | None = None, description: str | None = None, log: str = "") -> None:
        self.call = call
        self.code = code
        self.name = name or error_name(code)
        self.description = description or ""
        self.log = log
        super().__init__(cuda_error_message(call, code, self.name, self.description, log))


class VectorAddError(Exception):
    """The test could not run, or failed; report holds what is known so far (the module's return values)."""

    def __init__(self, msg: str, report: dict) -> None:
        super().__init__(msg)
        self.report = report


def error_name(code: int) -> str:
    """CUresult name for code, from cuda.h."""
    return CUDA_ERRORS.get(code, f"CUDA error {code}")


def cuda_error_message(call: str, code: int, name: str, description: str = "", log: str = "") -> str:
    """One line for a failed driver call: the call, the error's name and code, the driver's words, what to check."""
    description = description.strip().rstrip(".")
    msg = f"{call} failed with {name} ({code}{', ' + description if description else ''})"
    hint = ERROR_HINTS.get(name)
    if hint:
        msg += f": {hint}"
    if log:
        msg += f". JIT log: {' | '.join(line.strip() for line in log.splitlines() if line.strip())}"
    return msg


def library_missing_message(library: str, error: Exception | str) -> str:
    return (
        f"Cannot load the CUDA driver library {library} ({error}): the NVIDIA driver's user-space library is missing or not "
        "in the linker cache (ldconfig -p | grep libcuda). Install the driver's compute libraries (on Debian and Ubuntu "
        "libcuda1 or libnvidia-compute-<version>), run ldconfig, or set library to the file's path."
    )


def format_driver_version(version: int | None) -> str | None:
    """cuDriverGetVersion's 13000 as "13.0", 12040 as "12.4"."""
    if version is None:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def format_uuid(raw: bytes | None) -> str | None:
    """A CUuuid's 16 bytes the way nvidia-smi prints a GPU UUID."""
    if not raw or len(raw) != 16:
        return None
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def format_float32(value: float) -> str:
    """Shortest text that reads back as the same float32 (0.1 rather than 0.10000000149011612)."""
    if not math.isfinite(value):
        return repr(value)
    try:
        target = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return repr(value)
    text = repr(target)
    for digits in range(1, 10):
        candidate = f"{target:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(candidate)))[0] == target:
            text = candidate
            break
    if not any(ch in text for ch in ".e"):
        text += ".0"
    return text


def grid_size(elements: int, block: int = BLOCK_SIZE) -> int:
    """Blocks of block threads that cover elements."""
    return (elements + block - 1) // block


def random_inputs(elements: int, seed: int) -> tuple[array, array]:
    """A and B: elements random floats in [0, 1), the same for the same seed."""
    rng = random.Random(seed)
    a = array("f", itertools.islice(iter(rng.random, None), elements))
    b = array("f", itertools.islice(iter(rng.random, None), elements))
    return a, b


def compare_sums(a: Sequence[float], b: Sequence[float], c: Sequence[float], tolerance: float = TOLERANCE) -> tuple[int, int | None]:
    """Check C[i] == A[i] + B[i] within tolerance, as the CUDA sample does; NaN is wrong too.

    Returns the number of wrong elements and the index of the first, or None.
    """
    if not len(a) == len(b) == len(c):
        raise ValueError(f"A, B and C differ in length: {len(a)}, {len(b)}, {len(c)}")
    wrong = 0
    first = None
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        if not abs(x + y - z) <= tolerance:
            wrong += 1
            if first is None:
                first = i
    return wrong, first


def gpu_label(index: int, name: str | None) -> str:
    return f"GPU {index} ({name or 'name unknown'})"


def mismatch_message(index: int, name: str | None, wrong: int, first: int, a: Sequence[float], b: Sequence[float], c: Sequence[float]) -> str:
    expected = format_float32(a[first] + b[first])
    return (
        f"{gpu_label(index, name)}: {wrong} of {len(c)} elements wrong, first at index {first}: "
        f"{format_float32(a[first])} + {format_float32(b[first])} gave {format_float32(c[first])}, expected {expected}"
    )


def elements_error(elements: int) -> str | None:
    """Why elements is not a valid vector length, or None."""
    if 1 <= elements <= MAX_ELEMENTS:
        return None
    return f"elements must be between 1 and {MAX_ELEMENTS}, not {elements}"


def select_devices(devices: Sequence[int] | None, count: int) -> list[int]:
    """The device indices to test: all when devices is None, else devices in order, without repeats."""
    if devices is None:
        return list(range(count))
    wanted = list(dict.fromkeys(devices))
    bad = [i for i in wanted if i < 0 or i >= count]
    if bad:
        has = {0: "none", 1: "1 (index 0)"}.get(count, f"{count} (indices 0-{count - 1})")
        raise ValueError(f"devices: no GPU {', '.join(str(i) for i in bad)} on this node; the CUDA driver sees {has}")
    return wanted


def failure_message(results: Sequence[dict]) -> str:
    failed = [r["error"] for r in results if not r["passed"]]
    return f"vectorAdd failed on {len(failed)} of {len(results)} GPU(s): " + "; ".join(failed)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class _CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


_INT_P = ctypes.POINTER(ctypes.c_int)
_VOID_PP = ctypes.POINTER(ctypes.c_void_p)
_DPTR = ctypes.c_uint64  # CUdeviceptr (64-bit)

# Our name -> (symbols to try, in order; argtypes). Every function returns CUresult (int).
_REQUIRED = {
    "cuInit": (("cuInit",), (ctypes.c_uint,)),
    "cuDriverGetVersion": (("cuDriverGetVersion",), (_INT_P,)),
    "cuDeviceGetCount": (("cuDeviceGetCount",), (_INT_P,)),
    "cuDeviceGet": (("cuDeviceGet",), (_INT_P, ctypes.c_int)),
    "cuDeviceGetName": (("cuDeviceGetName",), (ctypes.c_char_p, ctypes.c_int, ctypes.c_int)),
    "cuDeviceGetAttribute": (("cuDeviceGetAttribute",), (_INT_P, ctypes.c_int, ctypes.c_int)),
    "cuDevicePrimaryCtxRetain": (("cuDevicePrimaryCtxRetain",), (_VOID_PP, ctypes.c_int)),
    "cuDevicePrimaryCtxRelease": (("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"), (ctypes.c_int,)),
    "cuCtxSetCurrent": (("cuCtxSetCurrent",), (ctypes.c_void_p,)),
    "cuCtxSynchronize": (("cuCtxSynchronize",), ()),
    "cuModuleLoadDataEx": (("cuModuleLoadDataEx",), (_VOID_PP, ctypes.c_void_p, ctypes.c_uint, _INT_P, _VOID_PP)),
    "cuModuleGetFunction": (("cuModuleGetFunction",), (_VOID_PP, ctypes.c_void_p, ctypes.c_char_p)),
    "cuModuleUnload": (("cuModuleUnload",), (ctypes.c_void_p,)),
    "cuMemAlloc": (("cuMemAlloc_v2",), (ctypes.POINTER(_DPTR), ctypes.c_size_t)),
    "cuMemFree": (("cuMemFree_v2",), (_DPTR,)),
    "cuMemsetD32": (("cuMemsetD32_v2",), (_DPTR, ctypes.c_uint, ctypes.c_size_t)),
    "cuMemcpyHtoD": (("cuMemcpyHtoD_v2",), (_DPTR, ctypes.c_void_p, ctypes.c_size_t)),
    "cuMemcpyDtoH": (("cuMemcpyDtoH_v2",), (ctypes.c_void_p, _DPTR, ctypes.c_size_t)),
    "cuLaunchKernel": (("cuLaunchKernel",), (
        ctypes.c_void_p,                                # CUfunction f
        ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,    # gridDimX, Y, Z
        ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,    # blockDimX, Y, Z
        ctypes.c_uint,                                  # sharedMemBytes
        ctypes.c_void_p,                                # CUstream hStream
        _VOID_PP,                                       # void **kernelParams
        _VOID_PP,                                       # void **extra
    )),
}
_OPTIONAL = {
    "cuGetErrorName": (("cuGetErrorName",), (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))),
    "cuGetErrorString": (("cuGetErrorString",), (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))),
    "cuDeviceGetUuid": (("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), (ctypes.POINTER(_CUuuid), ctypes.c_int)),
    "cuDeviceGetPCIBusId": (("cuDeviceGetPCIBusId",), (ctypes.c_char_p, ctypes.c_int, ctypes.c_int)),
}


class CudaDriver:
    """The CUDA driver API calls the test makes, over ctypes. Errors raise CudaError.

    Handles (contexts, modules, functions) are plain ints, device pointers ints,
    host buffers array('f').
    """

    def __init__(self, library: str = "libcuda.so.1", loader: Callable[[str], Any] = ctypes.CDLL) -> None:
        self.library = library
        try:
            lib = loader(library)
        except OSError as exc:
            raise CudaLibraryError(library_missing_message(library, exc)) from None
        self._fn: dict[str, Any] = {}
        for table, required in ((_REQUIRED, True), (_OPTIONAL, False)):
            for name, (symbols, argtypes) in table.items():
                fn = next((getattr(lib, s) for s in symbols if hasattr(lib, s)), None)
                if fn is None:
                    if required:
                        raise CudaLibraryError(
                            f"{library} has no {' or '.join(symbols)}: it is not the NVIDIA driver's libcuda, or the driver is too old")
                    continue
                fn.argtypes = list(argtypes)
                fn.restype = ctypes.c_int
                self._fn[name] = fn

    def _call(self, name: str, *args: Any) -> None:
        code = self._fn[name](*args)
        if code != 0:
            raise CudaError(name, code, self._error_text("cuGetErrorName", code), self._error_text("cuGetErrorString", code))

    def _error_text(self, which: str, code: int) -> str | None:
        fn = self._fn.get(which)
        if fn is None:
            return None
        text = ctypes.c_char_p()
        if fn(code, ctypes.byref(text)) != 0 or not text.value:
            return None
        return text.value.decode(errors="replace")

    def init(self) -> None:
        self._call("cuInit", 0)

    def driver_version(self) -> int:
        version = ctypes.c_int()
        self._call("cuDriverGetVersion", ctypes.byref(version))
        return version.value

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def device_name(self, dev: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buf, len(buf), dev)
        return buf.value.decode(errors="replace")

    def compute_capability(self, dev: int) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call("cuDeviceGetAttribute", ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        self._call("cuDeviceGetAttribute", ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        return major.value, minor.value

    def device_uuid(self, dev: int) -> bytes | None:
        fn = self._fn.get("cuDeviceGetUuid")
        uuid = _CUuuid()
        if fn is None or fn(ctypes.byref(uuid), dev) != 0:
            return None
        return bytes(uuid.bytes)

    def pci_bus_id(self, dev: int) -> str | None:
        fn = self._fn.get("cuDeviceGetPCIBusId")
        buf = ctypes.create_string_buffer(64)
        if fn is None or fn(buf, len(buf), dev) != 0:
            return None
        return buf.value.decode(errors="replace")

    def retain_primary_context(self, dev: int) -> int:
        ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        return ctx.value

    def release_primary_context(self, dev: int) -> None:
        self._call("cuDevicePrimaryCtxRelease", dev)

    def set_current(self, ctx: int | None) -> None:
        self._call("cuCtxSetCurrent", ctx)

    def load_module(self, ptx: str) -> int:
        """cuModuleLoadDataEx on PTX text; a JIT failure raises CudaError with the JIT's error log."""
        module = ctypes.c_void_p()
        image = ctypes.create_string_buffer(ptx.encode())  # NUL-terminated
        log = ctypes.create_string_buffer(JIT_LOG_BYTES)
        options = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
        code = self._fn["cuModuleLoadDataEx"](ctypes.byref(module), image, 2, options, values)
        if code != 0:
            raise CudaError("cuModuleLoadDataEx", code, self._error_text("cuGetErrorName", code),
                            self._error_text("cuGetErrorString", code), log.value.decode(errors="replace").strip())
        return module.value

    def get_function(self, module: int, name: str) -> int:
        function = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
        return function.value

    def unload_module(self, module: int) -> None:
        self._call("cuModuleUnload", module)

    def mem_alloc(self, nbytes: int) -> int:
        dptr = _DPTR()
        self._call("cuMemAlloc", ctypes.byref(dptr), nbytes)
        return dptr.value

    def mem_free(self, dptr: int) -> None:
        self._call("cuMemFree", dptr)

    def memset_d32(self, dptr: int, value: int, count: int) -> None:
        self._call("cuMemsetD32", dptr, value, count)

    def memcpy_htod(self, dptr: int, host: array) -> None:
        address, length = host.buffer_info()
        self._call("cuMemcpyHtoD", dptr, address, length * host.itemsize)

    def memcpy_dtoh(self, host: array, dptr: int) -> None:
        address, length = host.buffer_info()
        self._call("cuMemcpyDtoH", address, dptr, length * host.itemsize)

    def launch(self, function: int, grid: int, block: int, args: Sequence[Any]) -> None:
        """cuLaunchKernel on the legacy default stream, no shared memory; args are ctypes values, in the kernel's order."""
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(arg) for arg in args])
        self._call("cuLaunchKernel", function, grid, 1, 1, block, 1, 1, 0, None, params, None)

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")


def check_gpu(driver: Any, index: int, elements: int, clock: Callable[[], float] = time.perf_counter) -> dict:
    """vectorAdd on one GPU. CUDA errors do not raise: they leave passed false and a message in error."""
    result: dict[str, Any] = {
        "index": index, "name": None, "uuid": None, "pci_bus_id": None, "compute_capability": None,
        "passed": False, "elements": elements, "mismatches": None, "first_mismatch": None,
        "init_ms": None, "time_ms": None, "kernel_ms": None, "error": None,
    }
    a, b = random_inputs(elements, seed=index)
    c = array("f", [math.nan]) * elements
    dev = ctx = module = None
    dptrs: list[int] = []
    try:
        dev = driver.device(index)
        result["name"] = driver.device_name(dev)
        result["uuid"] = format_uuid(driver.device_uuid(dev))
        result["pci_bus_id"] = driver.pci_bus_id(dev)
        major, minor = driver.compute_capability(dev)
        result["compute_capability"] = f"{major}.{minor}"

        start = clock()
        ctx = driver.retain_primary_context(dev)
        driver.set_current(ctx)
        module = driver.load_module(VECTOR_ADD_PTX)
        function = driver.get_function(module, KERNEL_NAME)
        ready = clock()
        result["init_ms"] = _ms(ready - start)

        nbytes = elements * a.itemsize
        while len(dptrs) < 3:  # one at a time, so that _cleanup frees those allocated before a failure
            dptrs.append(driver.mem_alloc(nbytes))
        d_a, d_b, d_c = dptrs
        driver.memset_d32(d_c, FLOAT_NAN_BITS, elements)
        driver.memcpy_htod(d_a, a)
        driver.memcpy_htod(d_b, b)
        launched = clock()
        driver.launch(function, grid_size(elements), BLOCK_SIZE,
                      [ctypes.c_uint64(d_a), ctypes.c_uint64(d_b), ctypes.c_uint64(d_c), ctypes.c_int32(elements)])
        driver.synchronize()
        result["kernel_ms"] = _ms(clock() - launched)
        driver.memcpy_dtoh(c, d_c)
        result["time_ms"] = _ms(clock() - ready)
    except CudaError as exc:
        result["error"] = f"{gpu_label(index, result['name'])}: {exc}"
        return result
    finally:
        _cleanup(driver, dev, ctx, module, dptrs)

    wrong, first = compare_sums(a, b, c)
    result.update(mismatches=wrong, first_mismatch=first, passed=wrong == 0)
    if wrong:
        result["error"] = mismatch_message(index, result["name"], wrong, first, a, b, c)
    return result


def _cleanup(driver: Any, dev: int | None, ctx: int | None, module: int | None, dptrs: list[int]) -> None:
    """Free what check_gpu got, best effort: after a kernel fault the context refuses everything."""
    steps: list[Callable[[], None]] = [lambda p=p: driver.mem_free(p) for p in dptrs]
    if module is not None:
        steps.append(lambda: driver.unload_module(module))
    if ctx is not None:
        steps.append(lambda: driver.set_current(None))
        steps.append(lambda: driver.release_primary_context(dev))
    for step in steps:
        try:
            step()
        except CudaError:
            pass


def run_vector_add(driver: Any, devices: Sequence[int] | None = None, elements: int = 50000, fail_on_no_gpu: bool = True,
                   clock: Callable[[], float] = time.perf_counter) -> dict:
    """Run vectorAdd on each selected GPU and return the module's results.

    Raises VectorAddError (message, and the results so far) when the driver
    cannot be initialised, no GPU is found (with fail_on_no_gpu), a device
    index does not exist, or any GPU fails.
    """
    report: dict[str, Any] = {"cuda_driver_version": None, "device_count": 0, "gpus": [], "passed": False, "init_ms": None}
    # An empty list means every GPU, like an omitted one: a run that tests no GPU must never pass.
    devices = list(devices) if devices else None
    if elements_error(elements):
        raise VectorAddError(elements_error(elements), report)

    start = clock()
    try:
        report["cuda_driver_version"] = format_driver_version(driver.driver_version())
    except CudaError:
        pass  # reported by cuInit below
    no_device = None
    try:
        driver.init()
        report["device_count"] = driver.device_count()
    except CudaError as exc:
        if exc.name != "CUDA_ERROR_NO_DEVICE":
            raise VectorAddError(f"Cannot initialise the CUDA driver: {exc}", report) from None
        no_device = str(exc)
    init_s = clock() - start

    if report["device_count"] == 0 and devices is None:
        report["init_ms"] = _ms(init_s)
        if fail_on_no_gpu:
            raise VectorAddError(f"No CUDA GPU found: {no_device or 'cuDeviceGetCount returned 0'}", report)
        report["passed"] = True
        return report
    try:
        wanted = select_devices(devices, report["device_count"])
    except ValueError as exc:
        raise VectorAddError(str(exc), report) from None

    for index in wanted:
        result = check_gpu(driver, index, elements, clock)
        init_s += (result["init_ms"] or 0.0) / 1000.0
        report["gpus"].append(result)
    report["init_ms"] = _ms(init_s)
    report["passed"] = all(r["passed"] for r in report["gpus"])
    if not report["passed"]:
        raise VectorAddError(failure_message(report["gpus"]), report)
    return report
