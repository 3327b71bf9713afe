"""k8sgpu.nvidia.cuda_vector_add: the module against a fake CUDA driver that really computes, and the pure helpers."""
from __future__ import annotations

import ctypes
import math
import re
import struct
from array import array
from types import SimpleNamespace

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _cuda_driver as cd
from ansible_collections.k8sgpu.nvidia.plugins.modules import cuda_vector_add

H100 = "NVIDIA H100 80GB HBM3"


class FakeDriver:
    """Stands in for CudaDriver: device memory is bytearrays, and launch really runs vectorAdd, in float32.

    corrupt(c: array) may change the kernel's output; fail maps a method name to a CUresult to raise;
    the fake also checks what a real driver would refuse (wrong context, freed or unknown pointers).
    """

    def __init__(self, gpus=(H100,), version=13000, corrupt=None, fail=None, clock=None):
        self.gpus = list(gpus)
        self.version = version
        self.corrupt = corrupt
        self.fail = dict(fail or {})
        self.clock = clock
        self.initialised = False
        self.current = None
        self.retained = {}
        self.memory = {}
        self.modules = set()
        self.next_handle = 0x1000
        self.launches = []

    def _maybe_fail(self, method, call):
        code = self.fail.get(method)
        if code is not None:
            raise cd.CudaError(call, code)

    def _handle(self):
        self.next_handle += 0x100
        return self.next_handle

    def _tick(self, seconds):
        if self.clock is not None:
            self.clock.now += seconds

    def driver_version(self):
        return self.version

    def init(self):
        self._maybe_fail("init", "cuInit")
        self.initialised = True

    def device_count(self):
        assert self.initialised
        return len(self.gpus)

    def device(self, ordinal):
        assert self.initialised and 0 <= ordinal < len(self.gpus)
        return ordinal

    def device_name(self, dev):
        return self.gpus[dev]

    def compute_capability(self, dev):
        return 9, 0

    def device_uuid(self, dev):
        return bytes(range(dev, dev + 16))

    def pci_bus_id(self, dev):
        return f"0000:{0x18 + dev:02x}:00.0"

    def retain_primary_context(self, dev):
        self._maybe_fail("retain_primary_context", "cuDevicePrimaryCtxRetain")
        self.retained[dev] = self.retained.get(dev, 0) + 1
        return 0xC000 + dev

    def release_primary_context(self, dev):
        assert self.retained.get(dev), "release without retain"
        self.retained[dev] -= 1

    def set_current(self, ctx):
        self.current = ctx

    def load_module(self, ptx):
        assert self.current is not None, "no current context"
        self._maybe_fail("load_module", "cuModuleLoadDataEx")
        assert ".entry vectorAdd(" in ptx
        self._tick(0.5)
        module = self._handle()
        self.modules.add(module)
        return module

    def get_function(self, module, name):
        assert module in self.modules and name == "vectorAdd"
        return module + 1

    def unload_module(self, module):
        self.modules.remove(module)

    def mem_alloc(self, nbytes):
        assert self.current is not None
        self._maybe_fail("mem_alloc", "cuMemAlloc_v2")
        dptr = self._handle() << 20
        self.memory[dptr] = bytearray(nbytes)
        return dptr

    def mem_free(self, dptr):
        del self.memory[dptr]

    def memset_d32(self, dptr, value, count):
        self.memory[dptr][:count * 4] = struct.pack("<I", value) * count

    def memcpy_htod(self, dptr, host):
        self.memory[dptr][:] = host.tobytes()

    def memcpy_dtoh(self, host, dptr):
        host[:] = array("f", bytes(self.memory[dptr]))

    def launch(self, function, grid, block, args):
        self._maybe_fail("launch", "cuLaunchKernel")
        d_a, d_b, d_c, n = (arg.value for arg in args)
        assert isinstance(args[3], ctypes.c_int32) and all(isinstance(arg, ctypes.c_uint64) for arg in args[:3])
        self.launches.append((grid, block, n))
        a, b = array("f", bytes(self.memory[d_a])), array("f", bytes(self.memory[d_b]))
        c = array("f", bytes(self.memory[d_c]))
        for i in range(grid * block):  # every thread, with the kernel's bounds check
            if i < n:
                c[i] = a[i] + b[i]
        if self.corrupt:
            self.corrupt(c)
        self.memory[d_c][:] = c.tobytes()

    def synchronize(self):
        self._tick(0.002)
        self._maybe_fail("synchronize", "cuCtxSynchronize")

    def assert_all_released(self):
        assert not self.memory, "device memory leaked"
        assert not self.modules, "module not unloaded"
        assert not any(self.retained.values()), "primary context not released"
        assert self.current is None


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result.get("msg", ""))
        self.result = result
        self.failed = failed


@pytest.fixture(autouse=True)
def module_exits(monkeypatch):
    def exit_json(self, **kwargs):
        raise ModuleExit(kwargs, False)

    def fail_json(self, msg, **kwargs):
        raise ModuleExit(dict(kwargs, msg=msg), True)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    # main() sets CUDA_DEVICE_ORDER in os.environ; restore it afterwards.
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "unset-by-test")
    monkeypatch.delenv("CUDA_DEVICE_ORDER")


def run_module(monkeypatch, args=None, driver=None):
    if driver is not None:
        monkeypatch.setattr(cuda_vector_add, "CudaDriver", lambda library: driver)
    with patch_module_args(args or {}):
        with pytest.raises(ModuleExit) as info:
            cuda_vector_add.main()
    return info.value


# --- the module with a fake driver ------------------------------------------------------------------

def test_success_computes_and_checks_every_element(monkeypatch):
    driver = FakeDriver(gpus=[H100, H100])
    out = run_module(monkeypatch, {}, driver)
    assert not out.failed, out.result["msg"]
    res = out.result
    assert res["changed"] is False and res["passed"] is True
    assert res["cuda_driver_version"] == "13.0" and res["device_count"] == 2
    assert [r["index"] for r in res["gpus"]] == [0, 1]
    first = res["gpus"][0]
    assert first["name"] == H100 and first["compute_capability"] == "9.0"
    assert first["uuid"] == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert first["pci_bus_id"] == "0000:18:00.0"
    assert first["passed"] is True and first["elements"] == 50000
    assert first["mismatches"] == 0 and first["first_mismatch"] is None and first["error"] is None
    assert all(isinstance(first[k], float) and first[k] >= 0 for k in ("init_ms", "time_ms", "kernel_ms"))
    # 196 blocks of 256 threads cover 50000 elements; the fake ran the bounds check for the 176 extra threads.
    assert driver.launches == [(196, 256, 50000), (196, 256, 50000)]
    assert cuda_vector_add.os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    driver.assert_all_released()


def test_library_option_reaches_the_driver(monkeypatch):
    opened = []
    monkeypatch.setattr(cuda_vector_add, "CudaDriver", lambda library: opened.append(library) or FakeDriver())
    with patch_module_args({"library": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "elements": 10}):
        with pytest.raises(ModuleExit) as info:
            cuda_vector_add.main()
    assert not info.value.failed
    assert opened == ["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]


def test_corrupted_kernel_output_fails_with_elements_wrong(monkeypatch):
    def corrupt(c):
        for i in (17, 18, 4000):
            c[i] = 0.0

    driver = FakeDriver(corrupt=corrupt)
    out = run_module(monkeypatch, {}, driver)
    assert out.failed
    a, b = cd.random_inputs(50000, seed=0)
    want = (f"GPU 0 ({H100}): 3 of 50000 elements wrong, first at index 17: "
            f"{cd.format_float32(a[17])} + {cd.format_float32(b[17])} gave 0.0, expected {cd.format_float32(a[17] + b[17])}")
    assert out.result["msg"] == f"vectorAdd failed on 1 of 1 GPU(s): {want}"
    gpu = out.result["gpus"][0]
    assert (gpu["passed"], gpu["mismatches"], gpu["first_mismatch"], gpu["error"]) == (False, 3, 17, want)
    assert out.result["passed"] is False and out.result["changed"] is False
    driver.assert_all_released()


def test_small_error_within_tolerance_passes_but_larger_fails(monkeypatch):
    def nudge(c):
        c[5] += 4e-6  # the sample's tolerance is 1e-5

    assert not run_module(monkeypatch, {"elements": 1000}, FakeDriver(corrupt=nudge)).failed

    def push(c):
        c[5] += 5e-5

    out = run_module(monkeypatch, {"elements": 1000}, FakeDriver(corrupt=push))
    assert out.failed and "1 of 1000 elements wrong, first at index 5" in out.result["msg"]


def test_kernel_that_writes_nothing_fails(monkeypatch):
    """C is filled with NaN before the launch, so stale memory that happens to hold the right sums cannot pass."""
    driver = FakeDriver()
    driver.launch = lambda function, grid, block, args: None
    out = run_module(monkeypatch, {"elements": 300}, driver)
    assert out.failed
    assert "300 of 300 elements wrong, first at index 0" in out.result["msg"] and "gave nan" in out.result["msg"]


def test_only_the_bad_gpu_fails_and_every_gpu_is_tested(monkeypatch):
    calls = {"n": 0}

    def corrupt_second_gpu(c):
        calls["n"] += 1
        if calls["n"] == 2:
            c[-1] = -1.0

    driver = FakeDriver(gpus=["GPU A", "GPU B", "GPU C"], corrupt=corrupt_second_gpu)
    out = run_module(monkeypatch, {"elements": 600}, driver)
    assert out.failed
    assert out.result["msg"].startswith("vectorAdd failed on 1 of 3 GPU(s): GPU 1 (GPU B): 1 of 600 elements wrong, first at index 599: ")
    assert [r["passed"] for r in out.result["gpus"]] == [True, False, True]
    driver.assert_all_released()


def test_devices_selects_in_order_without_repeats(monkeypatch):
    driver = FakeDriver(gpus=["g0", "g1", "g2", "g3"])
    out = run_module(monkeypatch, {"devices": [3, 1, 3], "elements": 10}, driver)
    assert not out.failed
    assert [(r["index"], r["name"]) for r in out.result["gpus"]] == [(3, "g3"), (1, "g1")]


def test_device_index_out_of_range(monkeypatch):
    driver = FakeDriver(gpus=[H100] * 8)
    out = run_module(monkeypatch, {"devices": [0, 9]}, driver)
    assert out.failed
    assert out.result["msg"] == "devices: no GPU 9 on this node; the CUDA driver sees 8 (indices 0-7)"
    assert out.result["gpus"] == [] and out.result["device_count"] == 8
    assert driver.launches == []


@pytest.mark.parametrize("code,name,hint", [
    (100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable GPU is visible"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "different driver versions"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY", "nvidia-fabricmanager"),
    (34, "CUDA_ERROR_STUB_LIBRARY", "stub libcuda.so"),
    (999, "CUDA_ERROR_UNKNOWN", None),
])
def test_cuinit_failure_names_the_error(monkeypatch, code, name, hint):
    out = run_module(monkeypatch, {}, FakeDriver(fail={"init": code}))
    assert out.failed
    msg = out.result["msg"]
    assert f"cuInit failed with {name} ({code}" in msg
    if hint:
        assert hint in msg
    assert out.result["cuda_driver_version"] == "13.0"  # read before cuInit, to help with mismatches
    assert out.result["gpus"] == []


def test_no_device_with_fail_on_no_gpu_false_passes(monkeypatch):
    out = run_module(monkeypatch, {"fail_on_no_gpu": False}, FakeDriver(fail={"init": 100}))
    assert not out.failed
    assert out.result["gpus"] == [] and out.result["passed"] is True and out.result["device_count"] == 0


def test_zero_devices_fails_by_default(monkeypatch):
    out = run_module(monkeypatch, {}, FakeDriver(gpus=[]))
    assert out.failed and out.result["msg"] == "No CUDA GPU found: cuDeviceGetCount returned 0"


def test_other_cuinit_errors_fail_even_with_fail_on_no_gpu_false(monkeypatch):
    out = run_module(monkeypatch, {"fail_on_no_gpu": False}, FakeDriver(fail={"init": 803}))
    assert out.failed and "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" in out.result["msg"]


def test_ptx_too_new_for_driver_reports_jit_log(monkeypatch):
    driver = FakeDriver(version=8000)

    def load_module(ptx):
        raise cd.CudaError("cuModuleLoadDataEx", 222, log="ptxas application ptx input, line 2; fatal   : Unsupported .version 6.0; current version is '5.0'\n")

    driver.load_module = load_module
    out = run_module(monkeypatch, {}, driver)
    assert out.failed
    msg = out.result["msg"]
    assert f"GPU 0 ({H100}): cuModuleLoadDataEx failed with CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)" in msg
    assert "too old for PTX ISA 6.0" in msg and "JIT log: ptxas application ptx input, line 2; fatal   : Unsupported .version 6.0" in msg
    assert out.result["cuda_driver_version"] == "8.0"
    driver.assert_all_released()


@pytest.mark.parametrize("method,call,code,name", [
    ("launch", "cuLaunchKernel", 701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    ("synchronize", "cuCtxSynchronize", 700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("mem_alloc", "cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY"),
    ("retain_primary_context", "cuDevicePrimaryCtxRetain", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
])
def test_cuda_error_on_a_gpu_fails_and_frees_everything(monkeypatch, method, call, code, name):
    driver = FakeDriver(fail={method: code})
    out = run_module(monkeypatch, {"elements": 100}, driver)
    assert out.failed
    assert out.result["msg"].startswith(f"vectorAdd failed on 1 of 1 GPU(s): GPU 0 ({H100}): {call} failed with {name} ({code}")
    gpu = out.result["gpus"][0]
    assert gpu["passed"] is False and gpu["mismatches"] is None and gpu["name"] == H100
    driver.assert_all_released()


def test_library_missing(monkeypatch, tmp_path):
    path = str(tmp_path / "libcuda.so.1")
    out = run_module(monkeypatch, {"library": path})
    assert out.failed
    msg = out.result["msg"]
    assert msg.startswith(f"Cannot load the CUDA driver library {path} (")
    assert "the NVIDIA driver's user-space library is missing or not in the linker cache" in msg
    assert out.result["gpus"] == [] and out.result["passed"] is False


def test_elements_must_be_positive(monkeypatch):
    out = run_module(monkeypatch, {"elements": 0, "library": "/nonexistent/libcuda.so.1"})
    assert out.failed and out.result["msg"] == "elements must be between 1 and 2147483647, not 0"
    with pytest.raises(cd.VectorAddError, match="elements must be between 1 and 2147483647, not 2147483648"):
        cd.run_vector_add(FakeDriver(), elements=2**31)


def test_timings_bracket_the_right_calls():
    clock = SimpleNamespace(now=100.0)
    driver = FakeDriver(gpus=["a", "b"], clock=clock)
    report = cd.run_vector_add(driver, elements=64, clock=lambda: clock.now)
    gpu = report["gpus"][0]
    assert gpu["init_ms"] == 500.0  # context and JIT (the fake's load_module takes 0.5 s)
    assert gpu["kernel_ms"] == 2.0  # launch until cuCtxSynchronize returned (0.002 s)
    assert gpu["time_ms"] == 2.0  # alloc, copies, kernel and copy back, not the JIT
    assert report["init_ms"] == 1000.0  # cuInit (0 s here) and both GPUs' context and JIT


# --- CudaDriver over a stand-in library (no GPU needed) ---------------------------------------------

def _stub_library(**overrides):
    symbols = {sym: (lambda *args: 0) for symbols, argtypes in cd._REQUIRED.values() for sym in symbols}
    symbols.update(overrides)
    return SimpleNamespace(**symbols)


def test_driver_sets_prototypes_and_maps_cuinit_error_without_cugeterrorname():
    lib = _stub_library(cuInit=lambda flags: 803)
    driver = cd.CudaDriver("libcuda.so.1", loader=lambda path: lib)
    assert lib.cuLaunchKernel.restype is ctypes.c_int and len(lib.cuLaunchKernel.argtypes) == 11
    assert lib.cuMemAlloc_v2.argtypes[1] is ctypes.c_size_t
    with pytest.raises(cd.CudaError) as info:
        driver.init()
    assert info.value.name == "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" and info.value.call == "cuInit"
    assert str(info.value).startswith("cuInit failed with CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803): libcuda and the loaded nvidia kernel module")


def test_driver_refuses_a_library_without_the_functions():
    lib = _stub_library()
    del lib.cuLaunchKernel
    with pytest.raises(cd.CudaLibraryError, match=r"libcuda\.so\.1 has no cuLaunchKernel: it is not the NVIDIA driver's libcuda"):
        cd.CudaDriver("libcuda.so.1", loader=lambda path: lib)


def test_driver_library_not_found_is_a_library_error(tmp_path):
    with pytest.raises(cd.CudaLibraryError, match="user-space library is missing"):
        cd.CudaDriver(str(tmp_path / "nope.so"))


# --- pure helpers -----------------------------------------------------------------------------------

def test_compare_sums_counts_and_finds_first():
    a, b = array("f", [1.0, 2.0, 3.0, 4.0]), array("f", [0.5, 0.5, 0.5, 0.5])
    assert cd.compare_sums(a, b, array("f", [1.5, 2.5, 3.5, 4.5])) == (0, None)
    assert cd.compare_sums(a, b, array("f", [1.5, 9.0, 3.5, 0.0])) == (2, 1)
    assert cd.compare_sums(a, b, array("f", [1.5, 2.5, math.nan, 4.5])) == (1, 2)
    assert cd.compare_sums(a, b, array("f", [1.5, 2.5, 3.5, math.inf])) == (1, 3)
    with pytest.raises(ValueError):
        cd.compare_sums(a, b, array("f", [1.5]))


def test_random_inputs_are_deterministic_and_float32():
    a1, b1 = cd.random_inputs(1000, seed=3)
    a2, b2 = cd.random_inputs(1000, seed=3)
    assert a1 == a2 and b1 == b2 and a1 != b1 and a1.typecode == "f" and len(b1) == 1000
    assert a1 != cd.random_inputs(1000, seed=4)[0]
    assert all(0.0 <= x <= 1.0 for x in a1)


@pytest.mark.parametrize("value,text", [
    (0.0, "0.0"), (1.0, "1.0"), (0.1, "0.1"), (1.23, "1.23"), (5.79, "5.79"), (-2.5, "-2.5"),
    (1e20, "1e+20"), (math.nan, "nan"), (math.inf, "inf"), (16777217.0, "16777216.0"),
])
def test_format_float32(value, text):
    assert cd.format_float32(value) == text


def test_format_float32_round_trips():
    for x in cd.random_inputs(200, seed=1)[0]:
        assert struct.unpack("f", struct.pack("f", float(cd.format_float32(x))))[0] == x


@pytest.mark.parametrize("raw,version", [(13000, "13.0"), (12040, "12.4"), (11080, "11.8"), (9000, "9.0"), (None, None)])
def test_format_driver_version(raw, version):
    assert cd.format_driver_version(raw) == version


def test_format_uuid():
    assert cd.format_uuid(bytes.fromhex("6f3a0b1c2d4e5f60718293a4b5c6d7e8")) == "GPU-6f3a0b1c-2d4e-5f60-7182-93a4b5c6d7e8"
    assert cd.format_uuid(None) is None and cd.format_uuid(b"short") is None


@pytest.mark.parametrize("elements,grid", [(1, 1), (256, 1), (257, 2), (50000, 196)])
def test_grid_size(elements, grid):
    assert cd.grid_size(elements) == grid


def test_select_devices():
    assert cd.select_devices(None, 3) == [0, 1, 2]
    assert cd.select_devices([2, 0, 2], 3) == [2, 0]
    with pytest.raises(ValueError, match=r"no GPU -1, 4 on this node; the CUDA driver sees 3 \(indices 0-2\)"):
        cd.select_devices([-1, 0, 4], 3)
    with pytest.raises(ValueError, match=r"no GPU 1 on this node; the CUDA driver sees 1 \(index 0\)$"):
        cd.select_devices([1], 1)
    with pytest.raises(ValueError, match="the CUDA driver sees none"):
        cd.select_devices([0], 0)


def test_error_message_without_hint_or_description():
    assert cd.cuda_error_message("cuMemFree_v2", 400, cd.error_name(400)) == "cuMemFree_v2 failed with CUDA_ERROR_INVALID_HANDLE (400)"
    assert cd.error_name(12345) == "CUDA error 12345"
    err = cd.CudaError("cuInit", 100, description="no CUDA-capable device is detected")
    assert str(err).startswith("cuInit failed with CUDA_ERROR_NO_DEVICE (100, no CUDA-capable device is detected): no CUDA-capable GPU")


def test_ptx_header_and_kernel():
    ptx = cd.VECTOR_ADD_PTX
    lines = [line.split("//")[0].strip() for line in ptx.splitlines() if line.strip()]
    assert lines[:3] == [f".version {cd.PTX_ISA}", f".target {cd.PTX_TARGET}", ".address_size 64"]
    assert ".visible .entry vectorAdd(" in ptx and ptx.count(".param .u64") == 3 and ptx.count(".param .u32") == 1
    # every register used is declared: %p<2>, %f<4>, %r<6>, %rd<11> declare indices below the bound
    bounds = dict(re.findall(r"\.reg \.\w+\s+%(\w+)<(\d+)>", ptx))
    for reg, num in re.findall(r"%(rd|r|f|p)(\d+)", ptx):
        assert int(num) < int(bounds[reg]), f"%{reg}{num} not declared"
    assert ptx.count("{") == ptx.count("}") == 1


def test_empty_device_list_tests_every_gpu(monkeypatch):
    # The verify role passes its (empty by default) device list through: that must test
    # every GPU, never zero GPUs reported as passed.
    out = run_module(monkeypatch, {"devices": []}, FakeDriver(gpus=[H100, H100]))
    assert not out.failed, out.result["msg"]
    assert [r["index"] for r in out.result["gpus"]] == [0, 1]
