"""_gpu_health: the classification of each fixture, the kernel log parser, and the missing-GPU rule."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health as gh
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import GpuFactsError, parse_smi_xml, pci_key

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HEALTH = FIXTURES / "gpu_health"
H100_XML = FIXTURES / "h100" / "nvidia-smi-q.xml"
H100_PROC_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n"


def gpu_of(path: Path) -> dict:
    root = ET.fromstring(path.read_text())
    gpu = gh.read_gpu(root.find("gpu"), 0)
    gpu["findings"] = gh.classify_gpu(gpu)
    gh.summarize([gpu])
    return gpu


def test_real_h100_is_healthy():
    gpu = gpu_of(H100_XML)
    assert gpu["status"] == "healthy" and gpu["findings"] == []
    assert gpu["uuid"] == "GPU-3df950bc-14e1-c147-af67-d6bc91665500" and gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["recovery_action"] == "None" and gpu["persistence_mode"] == "Enabled" and gpu["ecc_mode"] == "Enabled"
    assert gpu["ecc_errors"]["volatile"] == {
        "sram_correctable": 0, "sram_uncorrectable": 0, "sram_uncorrectable_parity": 0,
        "sram_uncorrectable_secded": 0, "dram_correctable": 0, "dram_uncorrectable": 0, "correctable": 0,
        "uncorrectable": 0}
    assert gpu["ecc_errors"]["sram_threshold_exceeded"] is False
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}  # N/A on Hopper
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False,
                                    "banks_without_spare_rows": 0}
    assert gpu["reset_status"] == {"reset_required": None, "drain_and_reset_recommended": None}
    assert gpu["clock_event_reasons"] == dict.fromkeys(gh.CLOCK_EVENTS, False)


def test_real_h200_is_healthy():
    """The output of the H200 the module ran on (docs/h200/): healthy too."""
    gpu = gpu_of(HEALTH / "h200-nvidia-smi-q.xml")
    assert gpu["status"] == "healthy" and gpu["findings"] == [] and gpu["name"] == "NVIDIA H200"
    assert gpu["uuid"] == "GPU-eec5c974-b5cd-6e00-f69b-e0e50576350a" and gpu["recovery_action"] == "None"


@pytest.mark.parametrize("fixture, status, checks", [
    ("ecc-dbe-volatile.xml", "needs_reset", ["ecc_volatile_dram_uncorrectable"]),
    ("remapped-rows-pending.xml", "needs_reset", ["remapped_rows_pending"]),
    ("remapped-rows-failure.xml", "replace", ["remapped_rows_failure"]),
    ("retired-pages-pending.xml", "needs_reset", ["retired_pages_pending"]),
    ("recovery-gpu-reset.xml", "needs_reset", ["recovery_action"]),
    ("recovery-node-reboot.xml", "needs_reboot", ["recovery_action"]),
    ("recovery-drain-p2p.xml", "degraded", ["recovery_action"]),
    ("reset-status-drain-and-reset.xml", "needs_reset", ["recovery_action", "drain_and_reset_recommended"]),
    ("hw-slowdown.xml", "degraded", ["clocks_hw_slowdown", "clocks_hw_thermal_slowdown"]),
])
def test_unhealthy_variants(fixture, status, checks):
    gpu = gpu_of(HEALTH / fixture)
    assert gpu["status"] == status
    assert [f["check"] for f in gpu["findings"]] == checks
    assert all(f["source"] and f["detail"] for f in gpu["findings"])


def test_variant_values():
    ecc = gpu_of(HEALTH / "ecc-dbe-volatile.xml")["ecc_errors"]
    assert ecc["volatile"]["dram_uncorrectable"] == 2 and ecc["volatile"]["dram_correctable"] == 5
    assert ecc["aggregate"]["uncorrectable"] == 2
    rows = gpu_of(HEALTH / "remapped-rows-failure.xml")["remapped_rows"]
    assert rows == {"correctable": 0, "uncorrectable": 8, "pending": False, "failure": True,
                    "banks_without_spare_rows": 1}
    assert gpu_of(HEALTH / "retired-pages-pending.xml")["retired_pages"] == {
        "single_bit": 2, "double_bit": 1, "pending": True}
    assert gpu_of(HEALTH / "reset-status-drain-and-reset.xml")["reset_status"] == {
        "reset_required": False, "drain_and_reset_recommended": True}


def test_aggregate_only_uncorrectable_is_reported_not_unhealthy():
    text = H100_XML.read_text().replace(
        "<aggregate>\n\t\t\t\t<sram_correctable>0</sram_correctable>",
        "<aggregate>\n\t\t\t\t<sram_correctable>3</sram_correctable>", 1)
    text = text.replace("<dram_uncorrectable>0</dram_uncorrectable>\n\t\t\t\t<sram_threshold_exceeded>",
                        "<dram_uncorrectable>1</dram_uncorrectable>\n\t\t\t\t<sram_threshold_exceeded>", 1)
    gpu = gh.read_gpu(ET.fromstring(text).find("gpu"), 0)
    findings = gh.classify_gpu(gpu)
    assert [(f["check"], f["status"]) for f in findings] == [("ecc_aggregate_uncorrectable", "healthy")]


def test_older_drivers_single_double_bit_and_throttle_reasons():
    """Drivers before 535: ecc_errors/volatile/double_bit/total and clocks_throttle_reasons."""
    gpu_xml = """<gpu id="00000000:07:00.0"><uuid>GPU-1</uuid><ecc_errors><volatile>
      <single_bit><device_memory>4</device_memory><total>4</total></single_bit>
      <double_bit><device_memory>1</device_memory><total>1</total></double_bit></volatile></ecc_errors>
      <clocks_throttle_reasons><clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>
      </clocks_throttle_reasons></gpu>"""
    gpu = gh.read_gpu(ET.fromstring(gpu_xml), 0)
    assert gpu["ecc_errors"]["volatile"]["uncorrectable"] == 1 and gpu["ecc_errors"]["volatile"]["correctable"] == 4
    assert gpu["clock_event_reasons"]["hw_slowdown"] is True
    assert gpu["recovery_action"] is None
    checks = {f["check"]: f["status"] for f in gh.classify_gpu(gpu)}
    assert checks == {"ecc_volatile_uncorrectable": "needs_reset", "clocks_hw_slowdown": "degraded"}


@pytest.mark.parametrize("action, status", [
    ("None", None), ("N/A", None), ("GPU Reset", "needs_reset"), ("Node Reboot", "needs_reboot"),
    ("Drain P2P", "degraded"), ("Drain and Reset", "needs_reset"), ("System Reboot", "needs_reboot"),
    ("Something New", "degraded"),
])
def test_recovery_actions(action, status):
    gpu = gh.read_gpu(ET.fromstring(H100_XML.read_text()).find("gpu"), 0)
    gpu["recovery_action"] = action
    found = [f["status"] for f in gh.classify_gpu(gpu) if f["check"] == "recovery_action"]
    assert found == ([status] if status else [])


def test_parse_smi_xml_unchanged_by_the_shared_root():
    """gpu_facts' parser still gives what it gave (smi_xml_root and pci_key were added beside it, not into it)."""
    parsed = parse_smi_xml(H100_XML.read_text())
    assert parsed["driver_version"] == "580.159.04" and parsed["gpus"][0]["pci_bus_id"] == "00000000:00:06.0"
    with pytest.raises(ValueError, match="not <nvidia_smi_log>"):
        parse_smi_xml("<other/>")


@pytest.mark.parametrize("address, key", [
    ("00000000:3B:00.0", "0000:3b:00"), ("0000:3b:00.0", "0000:3b:00"), ("PCI:0000:3b:00", "0000:3b:00"),
    ("0001:c1:1f.3", "0001:c1:1f"), ("nonsense", None), (None, None),
])
def test_pci_key(address, key):
    assert pci_key(address) == key


# --- the kernel log -------------------------------------------------------------------------------------------------

EXPECTED_XIDS = [
    # (code, pci, status)
    (13, "0000:00:06", "healthy"), (13, "0000:00:06", "healthy"), (31, "0000:00:06", "healthy"),
    (94, "0000:00:06", "degraded"), (63, "0000:00:06", "degraded"), (48, "0000:00:06", "needs_reset"),
    (95, "0000:00:06", "needs_reset"), (64, "0000:00:06", "needs_reset"), (154, "0000:00:06", "needs_reset"),
    (74, "0000:3b:00", "needs_reset"), (79, "0000:3b:00", "needs_reboot"),
]


@pytest.mark.parametrize("fixture", ["kernel-log-dmesg-r.txt", "kernel-log-kmsg.txt", "kernel-log-journal.txt"])
def test_xid_events_in_each_format(fixture):
    events, lines = gh.parse_xid_events((HEALTH / fixture).read_text().splitlines())
    assert [(e["code"], e["pci_bus_id"], e["status"]) for e in events] == EXPECTED_XIDS
    assert lines >= 17
    fallen = events[-1]
    assert fallen == {
        "code": 79, "pci_bus_id": "0000:3b:00", "time": pytest.approx(9000.771601), "pid": "5102",
        "process": "nvidia-smi", "message": "GPU has fallen off the bus.", "status": "needs_reboot",
        "source": fallen["source"]}
    assert "Xid 79" in fallen["source"] and "RESTART_BM" in fallen["source"]
    nvlink = events[-2]
    assert nvlink["pid"] == "<unknown>" and nvlink["process"] == "<unknown>"
    assert nvlink["message"].startswith("NVLink: fatal error detected on link 5")
    recovery = events[8]
    assert recovery["pid"] is None and "Reset Required" in recovery["message"]


def test_since_filters_by_seconds_since_boot():
    lines = (HEALTH / "kernel-log-dmesg-r.txt").read_text().splitlines()
    events, _lines = gh.parse_xid_events(lines, since=5322.900533)
    assert [e["code"] for e in events] == [95, 64, 154, 74, 79]
    assert gh.parse_xid_events(lines, since=1e9)[0] == []


def test_lines_without_a_time_are_kept():
    line = "Nov 29 04:11:30 gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
    (event,), _lines = gh.parse_xid_events([line], since=100)
    assert event["time"] is None and event["pid"] == "0" and event["process"] is None and event["code"] == 79


@pytest.mark.parametrize("message, status", [
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required).", "needs_reboot"),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P).", "degraded"),
    ("GPU recovery action changed from 0x1 (Reset Required) to 0x0 (None).", "healthy"),
    ("GPU recovery action changed to 0x4", "needs_reset"),
    ("something else", "degraded"),
])
def test_xid_154(message, status):
    assert gh.classify_xid(154, message)[0] == status


def test_unknown_xid_is_degraded():
    status, source = gh.classify_xid(999, "whatever")
    assert status == "degraded" and "look it up" in source


def test_parse_since(tmp_path):
    (tmp_path / "uptime").write_text("1000.50 3900.10\n")
    now = 1_764_400_000.0  # the boot was at now - 1000.5
    assert gh.parse_since(None, str(tmp_path)) == 0.0
    assert gh.parse_since(3600, str(tmp_path)) == 3600.0
    assert gh.parse_since("12.5", str(tmp_path)) == 12.5
    import datetime
    iso = datetime.datetime.fromtimestamp(now - 400.5, datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    assert gh.parse_since(iso, str(tmp_path), now=now) == pytest.approx(600.0)
    assert gh.parse_since("2000-01-01T00:00:00+00:00", str(tmp_path), now=now) == 0.0
    with pytest.raises(GpuFactsError, match="neither seconds since boot"):
        gh.parse_since("yesterday", str(tmp_path))


def test_read_kmsg_reads_records_until_eagain(monkeypatch):
    xid = "4,3,9000771601,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    records = [b"6,1,100,-;first\n SUBSYSTEM=pci\n", OSError(32, "Broken pipe"), f"{xid}\n".encode()]

    def fake_read(fd, size):
        if not records:
            raise BlockingIOError
        item = records.pop(0)
        if isinstance(item, Exception):
            raise item
        return item
    monkeypatch.setattr(gh.os, "open", lambda path, flags: 99)
    monkeypatch.setattr(gh.os, "close", lambda fd: None)
    monkeypatch.setattr(gh.os, "read", fake_read)
    lines = gh.read_kmsg("/dev/kmsg")
    assert lines == ["6,1,100,-;first", xid]
    (event,), _lines = gh.parse_xid_events(lines)
    assert event["time"] == pytest.approx(9000.771601)


def test_kernel_log_auto_falls_back_to_dmesg(tmp_path):
    calls = []

    def run(args):
        calls.append(args)
        return 0, "<4>[ 1.000000] NVRM: Xid (PCI:0000:00:06): 48, pid=1, name=x, DBE\n", ""
    lines, source, warnings = gh.read_kernel_log("auto", run, path=None, dmesg="/usr/bin/dmesg", journalctl=None,
                                                 kmsg_path=str(tmp_path / "no-kmsg"))
    assert source == "/usr/bin/dmesg -r" and calls == [["/usr/bin/dmesg", "-r"]] and len(lines) == 1
    assert "could not be read" in warnings[0] and "dmesg -r" in warnings[0]


def test_kernel_log_journal_and_errors(tmp_path):
    def run(args):
        return (0, "[  1.0] host kernel: hello\n", "") if args[0].endswith("journalctl") else (1, "", "denied")
    lines, source, _warnings = gh.read_kernel_log("journal", run, path=None, dmesg=None, journalctl="/bin/journalctl")
    assert lines == ["[  1.0] host kernel: hello"] and source.startswith("/bin/journalctl -k -b -o short-monotonic")
    with pytest.raises(GpuFactsError, match="'/usr/bin/dmesg -r' failed .rc=1.: denied; run as root"):
        gh.read_kernel_log("dmesg", run, path=None, dmesg="/usr/bin/dmesg", journalctl=None)
    with pytest.raises(GpuFactsError, match="run as root .CAP_SYSLOG."):
        gh.read_kernel_log("kmsg", run, path=None, dmesg=None, journalctl=None, kmsg_path=str(tmp_path / "x"))
    with pytest.raises(GpuFactsError, match=f"kernel log file {tmp_path}/none .kernel_log_path."):
        gh.read_kernel_log("auto", run, path=str(tmp_path / "none"), dmesg=None, journalctl=None)
    assert gh.read_kernel_log("none", run, path=None, dmesg=None, journalctl=None)[:2] == ([], "none")


# --- the whole read -------------------------------------------------------------------------------------------------

def make_host(tmp_path: Path, gpus=("0000:00:06.0",), drivers=None) -> Path:
    for position, address in enumerate(gpus):
        dev = tmp_path / "sys/bus/pci/devices" / address
        dev.mkdir(parents=True)
        for key, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
            (dev / key).write_text(f"{value}\n")
        driver = (drivers or {}).get(address, "nvidia")
        if driver:
            target = tmp_path / "sys/bus/pci/drivers" / driver
            target.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(target)
    audio = tmp_path / "sys/bus/pci/devices/0000:00:07.1"  # an NVIDIA non-GPU function: never a missing GPU
    audio.mkdir(parents=True)
    for key, value in (("vendor", "0x10de"), ("device", "0x22a3"), ("class", "0x040300")):
        (audio / key).write_text(f"{value}\n")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(H100_PROC_VERSION)
    (tmp_path / "proc/uptime").write_text("10000.00 1.00\n")
    return tmp_path


def smi(answer):
    def run(args):
        assert args[1:] == ["-q", "-x"], args
        return answer
    return run


def gather(host: Path, answer, **kwargs):
    kwargs.setdefault("kernel_log", "none")
    return gh.gather(smi(answer), "/usr/bin/nvidia-smi", sysfs_root=str(host / "sys"), proc_root=str(host / "proc"),
                     hostname="gpu-node-07", **kwargs)


def test_gather_healthy_h100(tmp_path):
    host = make_host(tmp_path)
    result, warnings = gather(host, (0, H100_XML.read_text(), ""))
    assert warnings == [] and result["status"] == "healthy"
    assert result["summary"] == {"status": "healthy", "gpu_count": 1, "unhealthy_gpus": [],
                                 "counts": {"healthy": 1, "degraded": 0, "needs_reset": 0, "needs_reboot": 0,
                                            "replace": 0}}
    assert result["driver_version"] == "580.159.04" and result["cuda_version"] == "13.0"
    assert result["kernel_log"] == {"source": "none", "since": 0.0, "lines": 0}


def test_gpu_missing_from_nvidia_smi(tmp_path):
    """The H100 XML shows one GPU; sysfs has a second one bound to nvidia (fallen off the bus) and a third bound to
    vfio-pci (passed through: not the driver's)."""
    host = make_host(tmp_path, gpus=("0000:00:06.0", "0000:3b:00.0", "0000:86:00.0"),
                     drivers={"0000:86:00.0": "vfio-pci"})
    result, _warnings = gather(host, (0, H100_XML.read_text(), ""), kernel_log_path=str(HEALTH / "kernel-log-dmesg-r.txt"))
    assert result["status"] == "needs_reboot"
    gpus = {g["pci_bus_id"]: g for g in result["gpus"]}
    assert set(gpus) == {"00000000:00:06.0", "0000:3b:00.0"}
    lost = gpus["0000:3b:00.0"]
    assert lost["source"] == "sysfs" and lost["index"] is None and lost["uuid"] is None
    assert [(f["check"], f["status"]) for f in lost["findings"]] == [
        ("missing_from_nvidia_smi", "needs_reboot"), ("xid_74", "needs_reset"), ("xid_79", "needs_reboot")]
    assert [e["code"] for e in lost["xid_events"]] == [74, 79]
    assert all(e["gpu_index"] is None for e in lost["xid_events"])
    h100 = gpus["00000000:00:06.0"]
    assert h100["status"] == "needs_reset"  # Xid 48/95/64/154 since boot
    assert all(e["gpu_index"] == 0 for e in h100["xid_events"])
    assert result["summary"]["unhealthy_gpus"] == [
        {"index": 0, "uuid": "GPU-3df950bc-14e1-c147-af67-d6bc91665500", "pci_bus_id": "00000000:00:06.0",
         "status": "needs_reset", "checks": ["xid_48", "xid_95", "xid_64", "xid_154"]},
        {"index": None, "uuid": None, "pci_bus_id": "0000:3b:00.0", "status": "needs_reboot",
         "checks": ["missing_from_nvidia_smi", "xid_79"]},
    ]
    assert result["kernel_log"]["source"] == str(HEALTH / "kernel-log-dmesg-r.txt")


def test_since_leaves_the_h100_healthy(tmp_path):
    host = make_host(tmp_path)
    result, _warnings = gather(host, (0, H100_XML.read_text(), ""),
                               kernel_log_path=str(HEALTH / "kernel-log-journal.txt"), since="7000")
    gpus = {g["pci_bus_id"]: g for g in result["gpus"]}
    assert gpus["00000000:00:06.0"]["status"] == "healthy"
    # 0000:3b:00 is not on this host's bus at all: its Xids still count, under the address the log gives.
    ghost = gpus["0000:3b:00"]
    assert ghost["source"] == "kernel_log" and ghost["status"] == "needs_reboot"
    assert result["status"] == "needs_reboot" and result["kernel_log"]["since"] == 7000.0


def test_nvidia_smi_names_a_lost_gpu(tmp_path):
    """nvidia-smi exits non-zero and prints no XML, naming the GPU it cannot open."""
    host = make_host(tmp_path, gpus=("0000:3b:00.0",))
    result, warnings = gather(host, (15, "", (HEALTH / "nvidia-smi-lost-gpu.txt").read_text()))
    (gpu,) = result["gpus"]
    assert gpu["status"] == "needs_reboot" and "GPU is lost" in gpu["findings"][0]["detail"]
    assert result["driver_version"] == "580.159.04"  # from /proc
    assert "rc=15" in warnings[0]


def test_no_devices_found(tmp_path):
    host = make_host(tmp_path)
    result, _warnings = gather(host, (6, "No devices were found\n", ""))
    assert result["status"] == "needs_reboot" and result["gpus"][0]["findings"][0]["check"] == "missing_from_nvidia_smi"


@pytest.mark.parametrize("answer, match", [
    ((18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n", ""),
     r"^gpu-node-07: nvidia-smi failed with .*580\.159\.04.*\(version 580\.95\).*reboot the host"),
    ((9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", ""),
     r"^gpu-node-07: '/usr/bin/nvidia-smi -q -x' could not communicate with the NVIDIA driver"),
    ((0, "<nvidia_smi_log", ""), r"^gpu-node-07: '/usr/bin/nvidia-smi -q -x' gave output that could not be parsed"),
    ((2, "", "Some other failure"), r"^gpu-node-07: '/usr/bin/nvidia-smi -q -x' failed \(rc=2\): Some other failure"),
])
def test_nvidia_smi_failures(tmp_path, answer, match):
    host = make_host(tmp_path)
    with pytest.raises(GpuFactsError, match=match):
        gather(host, answer)


def test_driver_not_loaded_and_nvidia_smi_missing(tmp_path):
    host = make_host(tmp_path)
    with pytest.raises(GpuFactsError, match="nvidia-smi was not found.*nvidia-utils-<branch>"):
        gh.gather(smi(None), None, sysfs_root=str(host / "sys"), proc_root=str(host / "proc"))
    (host / "proc/driver/nvidia/version").unlink()
    with pytest.raises(GpuFactsError, match=r"^h: the NVIDIA kernel module is not loaded \(.*/proc/driver/nvidia/"
                                            r"version does not exist\).*modprobe nvidia"):
        gh.gather(smi(None), "/usr/bin/nvidia-smi", sysfs_root=str(host / "sys"), proc_root=str(host / "proc"),
                  hostname="h")
