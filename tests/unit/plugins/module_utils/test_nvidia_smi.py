from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import (
    COMPUTE_CAP_ARGS,
    XML_ARGS,
    READ_FACT,
    GpuFactsError,
    command_runner,
    gather,
    parse_compute_caps,
    parse_proc_version,
    parse_smi_xml,
    read_marker,
    reusable,
    scan_pci_devices,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H100 = FIXTURES / "h100"
MULTI = FIXTURES / "multi"
SMI = "/usr/bin/nvidia-smi"
H100_UUID = "GPU-3df950bc-14e1-c147-af67-d6bc91665500"
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Oct  1 11:49:20 UTC 2025\nGCC version:  gcc 12\n"
MISMATCH_OUT = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"


def env_section(name: str) -> str:
    """A '== name' section of the recorded environment.txt."""
    text = (H100 / "environment.txt").read_text()
    return text.split(f"== {name}\n", 1)[1].split("\n== ", 1)[0]


def h100_proc_version() -> str:
    return env_section("proc version")


def h100_sysfs_device() -> tuple[str, dict]:
    """('0000:00:06.0', {vendor, device, class}) from the recorded '/sys/bus/pci/devices/... vendor=...' line."""
    line = next(ln for ln in env_section("lspci").splitlines() if ln.startswith("/sys/bus/pci/devices/"))
    path, *attrs = line.split()
    return path.rsplit("/", 1)[1], dict(a.split("=", 1) for a in attrs)


def make_sysfs(root: Path, devices: dict) -> Path:
    """devices: {address: {vendor, device, class[, driver]}} as sysfs files (and a driver link)."""
    base = root / "sys" / "bus" / "pci" / "devices"
    base.mkdir(parents=True)
    for address, attrs in devices.items():
        dev = base / address
        dev.mkdir()
        for key in ("vendor", "device", "class"):
            (dev / key).write_text(attrs[key] + "\n")
        if attrs.get("driver"):
            (dev / "driver").symlink_to(f"../../../bus/pci/drivers/{attrs['driver']}")
    return root / "sys"


def make_proc(root: Path, version_text: str | None) -> Path:
    proc = root / "proc"
    proc.mkdir()
    if version_text is not None:
        (proc / "driver" / "nvidia").mkdir(parents=True)
        (proc / "driver" / "nvidia" / "version").write_text(version_text)
    return proc


class FakeSmi:
    """Stands for nvidia-smi: answers by argument list and records the calls."""

    def __init__(self, xml=(0, "", ""), caps=(0, "", "")):
        self.answers = {XML_ARGS: xml, COMPUTE_CAP_ARGS: caps}
        self.calls = []

    def __call__(self, args):
        self.calls.append(list(args))
        assert args[0] == SMI
        return self.answers[tuple(args[1:])]


def h100_smi() -> FakeSmi:
    return FakeSmi(xml=(0, (H100 / "nvidia-smi-q.xml").read_text(), ""), caps=(0, (H100 / "query-compute-cap.csv").read_text(), ""))


@pytest.fixture
def h100_host(tmp_path):
    address, attrs = h100_sysfs_device()
    sysfs = make_sysfs(tmp_path, {address: {**attrs, "driver": "nvidia"}})
    proc = make_proc(tmp_path, h100_proc_version())
    return {"sysfs_root": str(sysfs), "proc_root": str(proc)}


class TestParsers:
    def test_h100_xml(self):
        parsed = parse_smi_xml((H100 / "nvidia-smi-q.xml").read_text())
        assert parsed["driver_version"] == "580.159.04"
        assert parsed["cuda_version"] == "13.0"
        assert parsed["gpus"] == [{
            "index": 0,
            "minor_number": 0,
            "uuid": H100_UUID,
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:00:06.0",
            "memory_total_mib": 81559,
            "compute_capability": None,
            "mig_mode": "Disabled",
            "persistence_mode": "Enabled",
            "fabric_state": "N/A",
            "fabric_status": "N/A",
        }]

    def test_h100_compute_cap_csv_matches_the_recorded_query(self):
        recorded = next(csv.reader((H100 / "query-gpu.csv").open(), skipinitialspace=True))
        assert parse_compute_caps((H100 / "query-compute-cap.csv").read_text()) == {H100_UUID: (0, "9.0")}
        assert (recorded[0], recorded[1], recorded[6]) == ("0", H100_UUID, "9.0")

    def test_compute_cap_not_available(self):
        assert parse_compute_caps("0, GPU-x, [N/A]\n\n") == {"GPU-x": (0, None)}

    def test_compute_cap_wrong_columns(self):
        with pytest.raises(ValueError, match="expected 3"):
            parse_compute_caps("0, GPU-x\n")

    def test_two_gpus_with_mig(self):
        gpus = parse_smi_xml((MULTI / "nvidia-smi-q-2gpu-mig.xml").read_text())["gpus"]
        assert [g["uuid"] for g in gpus] == ["GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"]
        assert [g["mig_mode"] for g in gpus] == ["Enabled", "Disabled"]
        assert [g["persistence_mode"] for g in gpus] == ["Enabled", "Disabled"]
        # the GPU's own memory, not that of its MIG devices (40192 MiB)
        assert [g["memory_total_mib"] for g in gpus] == [81920, 81920]
        assert [g["pci_bus_id"] for g in gpus] == ["00000000:07:00.0", "00000000:0F:00.0"]
        # index is nvidia-smi's order, not the minor number
        assert [(g["index"], g["minor_number"]) for g in gpus] == [(0, 1), (1, 0)]

    def test_old_xml_without_mig_or_memory(self):
        xml = ("<nvidia_smi_log><driver_version>470.256.02</driver_version><gpu id='00000000:3B:00.0'>"
               "<product_name>Tesla T4</product_name><uuid>GPU-t4</uuid><minor_number>N/A</minor_number>"
               "<fb_memory_usage><total>N/A</total></fb_memory_usage></gpu></nvidia_smi_log>")
        (gpu,) = parse_smi_xml(xml)["gpus"]
        assert gpu["mig_mode"] == "N/A" and gpu["persistence_mode"] == "N/A"
        assert gpu["memory_total_mib"] is None and gpu["minor_number"] is None
        assert gpu["pci_bus_id"] == "00000000:3B:00.0"  # from the id attribute

    @pytest.mark.parametrize("text", ["not xml", "<html/>"])
    def test_bad_xml(self, text):
        with pytest.raises(ValueError):
            parse_smi_xml(text)

    @pytest.mark.parametrize("text,expected", [
        (h100_proc_version(), ("580.159.04", "open")),
        (PROPRIETARY, ("535.261.03", "proprietary")),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build  (dvs-builder@U16)\n",
         ("570.86.15", "open")),
        ("something else\n", (None, None)),
    ])
    def test_proc_version(self, text, expected):
        assert parse_proc_version(text) == expected


class TestSysfs:
    def test_nvidia_functions_only(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {
            "0000:00:02.0": {"vendor": "0x8086", "device": "0x46a6", "class": "0x030000", "driver": "i915"},
            "0000:01:00.0": {"vendor": "0x10de", "device": "0x2684", "class": "0x030000", "driver": "nouveau"},
            "0000:01:00.1": {"vendor": "0x10de", "device": "0x22ba", "class": "0x040300"},
            "0000:c1:00.0": {"vendor": "0x10DE", "device": "0x20B2", "class": "0x030200"},
        })
        assert scan_pci_devices(str(sysfs)) == [
            {"pci_bus_id": "0000:01:00.0", "vendor_id": "0x10de", "device_id": "0x2684", "class": "0x030000", "gpu": True,
             "driver": "nouveau", "nvswitch": False},
            {"pci_bus_id": "0000:01:00.1", "vendor_id": "0x10de", "device_id": "0x22ba", "class": "0x040300", "gpu": False,
             "driver": None, "nvswitch": False},
            {"pci_bus_id": "0000:c1:00.0", "vendor_id": "0x10de", "device_id": "0x20b2", "class": "0x030200", "gpu": True,
             "driver": None, "nvswitch": False},
        ]

    def test_no_sysfs(self, tmp_path):
        assert scan_pci_devices(str(tmp_path / "nowhere")) == []

    def test_unreadable_class_names_the_file(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {"0000:01:00.0": {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"}})
        (sysfs / "bus/pci/devices/0000:01:00.0/class").unlink()
        with pytest.raises(GpuFactsError, match=r"Could not read .*/0000:01:00\.0/class"):
            scan_pci_devices(str(sysfs))


class TestGather:
    def test_h100(self, h100_host):
        smi = h100_smi()
        facts, warnings = gather(smi, SMI, **h100_host)
        assert warnings == []
        assert smi.calls == [[SMI, "-q", "-x"], [SMI, "--query-gpu=index,uuid,compute_cap", "--format=csv,noheader,nounits"]]
        assert facts["nvidia_gpus"] == [{
            "index": 0, "minor_number": 0, "uuid": H100_UUID, "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:00:06.0", "memory_total_mib": 81559, "compute_capability": "9.0",
            "mig_mode": "Disabled", "persistence_mode": "Enabled", "fabric_state": "N/A", "fabric_status": "N/A",
        }]
        assert facts["nvidia_driver_version"] == "580.159.04"
        assert facts["nvidia_cuda_driver_version"] == "13.0"
        assert facts["nvidia_kernel_module_flavour"] == "open"
        assert facts["nvidia_driver_loaded"] is True
        assert facts["nvidia_driver_version_mismatch"] is False
        assert facts["nvidia_gpu_source"] == "nvidia-smi"
        assert facts["nvidia_pci_devices"] == [{
            "pci_bus_id": "0000:00:06.0", "vendor_id": "0x10de", "device_id": "0x2330", "class": "0x030200",
            "gpu": True, "driver": "nvidia", "nvswitch": False,
        }]
        assert facts["nvidia_nvswitches"] == []

    def test_two_gpus_merged_by_uuid(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {})
        proc = make_proc(tmp_path, PROPRIETARY)
        smi = FakeSmi(xml=(0, (MULTI / "nvidia-smi-q-2gpu-mig.xml").read_text(), ""),
                      caps=(0, (MULTI / "query-compute-cap-2gpu.csv").read_text(), ""))
        facts, warnings = gather(smi, SMI, sysfs_root=str(sysfs), proc_root=str(proc))
        assert warnings == []
        assert [(g["index"], g["compute_capability"], g["mig_mode"]) for g in facts["nvidia_gpus"]] == [
            (0, "8.0", "Enabled"), (1, "8.0", "Disabled")]
        assert facts["nvidia_kernel_module_flavour"] == "proprietary"
        assert facts["nvidia_driver_version"] == "535.261.03"
        assert facts["nvidia_cuda_driver_version"] == "12.2"

    def test_index_from_the_query_wins(self, tmp_path):
        sysfs, proc = make_sysfs(tmp_path, {}), make_proc(tmp_path, PROPRIETARY)
        caps = "5, GPU-11111111-2222-3333-4444-555555555555, 8.0\n4, GPU-66666666-7777-8888-9999-000000000000, 8.0\n"
        smi = FakeSmi(xml=(0, (MULTI / "nvidia-smi-q-2gpu-mig.xml").read_text(), ""), caps=(0, caps, ""))
        facts, _warnings = gather(smi, SMI, sysfs_root=str(sysfs), proc_root=str(proc))
        assert [g["index"] for g in facts["nvidia_gpus"]] == [5, 4]

    def test_old_driver_without_compute_cap(self, h100_host):
        smi = h100_smi()
        smi.answers[COMPUTE_CAP_ARGS] = (2, 'Field "compute_cap" is not a valid field to query.\n', "")
        facts, warnings = gather(smi, SMI, **h100_host)
        (gpu,) = facts["nvidia_gpus"]
        assert gpu["compute_capability"] is None and gpu["index"] == 0 and gpu["memory_total_mib"] == 81559
        (warning,) = warnings
        assert f"'{SMI} --query-gpu=index,uuid,compute_cap --format=csv,noheader,nounits' failed" in warning
        assert "compute_capability is null" in warning

    def test_no_driver_loaded_uses_sysfs_and_does_not_run_nvidia_smi(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {
            "0000:00:06.0": {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"},
            "0000:00:1f.0": {"vendor": "0x8086", "device": "0x7000", "class": "0x060100"},
        })
        smi = FakeSmi()
        facts, warnings = gather(smi, SMI, sysfs_root=str(sysfs), proc_root=str(make_proc(tmp_path, None)),
                                 fail_on_missing=True)
        assert smi.calls == [] and warnings == []
        assert facts["nvidia_gpu_source"] == "sysfs"
        assert facts["nvidia_gpus"] == []
        assert facts["nvidia_driver_loaded"] is False
        assert facts["nvidia_driver_version"] is None and facts["nvidia_kernel_module_flavour"] is None
        assert [(d["pci_bus_id"], d["device_id"], d["gpu"]) for d in facts["nvidia_pci_devices"]] == [("0000:00:06.0", "0x2330", True)]

    def test_driver_loaded_without_nvidia_smi(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {"0000:00:06.0": {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"}})
        proc = make_proc(tmp_path, PROPRIETARY)
        facts, warnings = gather(FakeSmi(), None, sysfs_root=str(sysfs), proc_root=str(proc),
                                 nvidia_smi_missing_reason="nvidia-smi was not found on PATH nor in /usr/bin")
        assert facts["nvidia_gpu_source"] == "sysfs" and facts["nvidia_gpus"] == []
        assert facts["nvidia_driver_version"] == "535.261.03"
        assert facts["nvidia_kernel_module_flavour"] == "proprietary"
        assert len(warnings) == 1 and "nvidia-smi was not found on PATH" in warnings[0]

    def test_no_nvidia_device_is_not_a_failure(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {"0000:00:02.0": {"vendor": "0x8086", "device": "0x46a6", "class": "0x030000"}})
        facts, warnings = gather(FakeSmi(), SMI, sysfs_root=str(sysfs), proc_root=str(make_proc(tmp_path, None)))
        assert facts["nvidia_gpus"] == [] and facts["nvidia_pci_devices"] == [] and warnings == []

    def test_fail_on_missing_names_the_host(self, tmp_path):
        # an NVIDIA function that is not a GPU (an NVSwitch, class 0x0680) does not count
        sysfs = make_sysfs(tmp_path, {"0000:05:00.0": {"vendor": "0x10de", "device": "0x22a3", "class": "0x068000"}})
        with pytest.raises(GpuFactsError) as err:
            gather(FakeSmi(), SMI, sysfs_root=str(sysfs), proc_root=str(make_proc(tmp_path, None)),
                   fail_on_missing=True, hostname="cpu-07")
        assert str(err.value) == f"cpu-07: no NVIDIA GPU found in {sysfs}/bus/pci/devices"

    def test_version_mismatch_fails(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {"0000:00:06.0": {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"}})
        proc = make_proc(tmp_path, PROPRIETARY)
        smi = FakeSmi(xml=(18, MISMATCH_OUT, ""))
        with pytest.raises(GpuFactsError) as err:
            gather(smi, SMI, sysfs_root=str(sysfs), proc_root=str(proc))
        msg = str(err.value)
        assert "Driver/library version mismatch" in msg
        assert f"version 535.261.03 according to {proc}/driver/nvidia/version" in msg
        assert "(version 580.95)" in msg and "reboot" in msg
        assert err.value.facts["nvidia_driver_version_mismatch"] is True
        assert len(smi.calls) == 1

    def test_version_mismatch_without_failing(self, tmp_path):
        sysfs = make_sysfs(tmp_path, {"0000:00:06.0": {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"}})
        proc = make_proc(tmp_path, h100_proc_version())
        smi = FakeSmi(xml=(18, "", "Failed to initialize NVML: Driver/library version mismatch\n"))
        facts, warnings = gather(smi, SMI, sysfs_root=str(sysfs), proc_root=str(proc), fail_on_mismatch=False)
        assert facts["nvidia_driver_version_mismatch"] is True
        assert facts["nvidia_gpu_source"] == "sysfs" and facts["nvidia_gpus"] == []
        assert facts["nvidia_driver_version"] == "580.159.04"  # the loaded kernel module's
        assert len(facts["nvidia_pci_devices"]) == 1
        assert len(warnings) == 1 and "version 580.159.04" in warnings[0]

    def test_driver_not_reachable_falls_back(self, h100_host):
        smi = FakeSmi(xml=(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                              "Make sure that the latest NVIDIA driver is installed and running.\n", ""))
        facts, warnings = gather(smi, SMI, **h100_host)
        assert facts["nvidia_gpu_source"] == "sysfs" and len(warnings) == 1

    def test_fewer_gpus_than_sysfs_warns(self, h100_host):
        smi = FakeSmi(xml=(6, "No devices were found\n", ""))
        facts, warnings = gather(smi, SMI, **h100_host)
        assert facts["nvidia_gpu_source"] == "nvidia-smi" and facts["nvidia_gpus"] == []
        assert any("1 GPU(s)" in w and "nvidia-smi reports 0" in w for w in warnings)

    def test_other_failure_names_the_command(self, h100_host):
        smi = FakeSmi(xml=(255, "", "Unknown Error\n"))
        with pytest.raises(GpuFactsError, match=rf"^'{SMI} -q -x' failed \(rc=255\): Unknown Error$"):
            gather(smi, SMI, **h100_host)

    def test_unparsable_xml_names_the_command(self, h100_host):
        with pytest.raises(GpuFactsError, match=rf"Could not parse the output of '{SMI} -q -x': not valid XML"):
            gather(FakeSmi(xml=(0, "<nvidia_smi_log><gpu>", "")), SMI, **h100_host)


class FakeModule:
    def __init__(self, rc=0, timeout_bin="/usr/bin/timeout"):
        self.rc, self.timeout_bin, self.calls = rc, timeout_bin, []

    def get_bin_path(self, name):
        assert name == "timeout"
        return self.timeout_bin

    def run_command(self, args, **kwargs):
        self.calls.append((args, kwargs))
        return self.rc, "out", "err"


class TestCommandRunner:
    def test_under_timeout_in_c_locale(self):
        module = FakeModule()
        assert command_runner(module, 30)([SMI, "-q", "-x"]) == (0, "out", "err")
        assert module.calls == [(["/usr/bin/timeout", "--kill-after=5", "30", SMI, "-q", "-x"], {"environ_update": {"LC_ALL": "C"}})]

    def test_timed_out(self):
        with pytest.raises(GpuFactsError, match=rf"'{SMI} -q -x' did not finish within 7 seconds"):
            command_runner(FakeModule(rc=124), 7)([SMI, "-q", "-x"])

    @pytest.mark.parametrize("timeout,timeout_bin", [(0, "/usr/bin/timeout"), (30, None)])
    def test_without_limit(self, timeout, timeout_bin):
        module = FakeModule(rc=124, timeout_bin=timeout_bin)
        assert command_runner(module, timeout)([SMI, "-q", "-x"])[0] == 124
        assert module.calls[0][0] == [SMI, "-q", "-x"]


class TestReuse:
    """The action plugin's decision (plugins/action/gpu_facts.py): facts of an earlier read of the same run, with the
    same options, stand for a new read unless a new read could fail or warn on them."""

    PARAMS = {"nvidia_smi": None, "sysfs_root": "/sys", "proc_root": "/proc"}

    def read(self, tmp_path, devices=None, smi=None, **params):
        sysfs = make_sysfs(tmp_path, devices if devices is not None else
                           {"0000:00:06.0": {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"}})
        proc = make_proc(tmp_path, PROPRIETARY if smi else None)
        facts = gather(smi or FakeSmi(), SMI, sysfs_root=str(sysfs), proc_root=str(proc), fail_on_mismatch=False)[0]
        facts[READ_FACT] = read_marker("run-1", {**self.PARAMS, **params})
        return facts

    def test_same_run_and_options_is_reused(self, tmp_path):
        facts = self.read(tmp_path)
        assert facts[READ_FACT] == {"run": "run-1", "nvidia_smi": None, "sysfs_root": "/sys", "proc_root": "/proc"}
        assert reusable(facts, "run-1", dict(self.PARAMS)) is None
        # fail_on_mismatch and timeout do not change what is read.
        assert reusable(facts, "run-1", {**self.PARAMS, "fail_on_mismatch": True, "timeout": 5}) is None

    @pytest.mark.parametrize("run,params,why", [
        ("run-2", {}, "read by another run"),
        ("run-1", {"sysfs_root": "/host/sys"}, "read with other options"),
        ("run-1", {"proc_root": "/host/proc"}, "read with other options"),
        ("run-1", {"nvidia_smi": "/opt/bin/nvidia-smi"}, "read with other options"),
    ])
    def test_another_run_or_other_options_read_again(self, tmp_path, run, params, why):
        assert reusable(self.read(tmp_path), run, {**self.PARAMS, **params}) == why

    def test_facts_without_a_marker_read_again(self, tmp_path):
        facts = self.read(tmp_path)
        del facts[READ_FACT]
        assert reusable(facts, "run-1", dict(self.PARAMS)) == "no earlier read"
        assert reusable({}, "run-1", dict(self.PARAMS)) == "no earlier read"
        assert reusable(None, "run-1", dict(self.PARAMS)) == "no earlier read"

    def test_a_mismatch_is_read_again(self, tmp_path):
        facts = self.read(tmp_path, smi=FakeSmi(xml=(18, MISMATCH_OUT, "")))
        assert facts["nvidia_driver_version_mismatch"] is True
        assert reusable(facts, "run-1", dict(self.PARAMS)) == "a driver/library version mismatch"

    def test_no_gpu_is_read_again_only_with_fail_on_missing(self, tmp_path):
        facts = self.read(tmp_path, devices={"0000:05:00.0": {"vendor": "0x10de", "device": "0x22a3", "class": "0x068000"}})
        assert reusable(facts, "run-1", dict(self.PARAMS)) is None
        assert reusable(facts, "run-1", {**self.PARAMS, "fail_on_missing": True}) == "no GPU, and fail_on_missing"
        assert reusable(self.read(tmp_path / "gpu"), "run-1", {**self.PARAMS, "fail_on_missing": True}) is None
