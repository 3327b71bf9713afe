"""NVSwitch systems (issue 45 item 4): NVSwitches on the PCI bus from a fake sysfs tree, each GPU's fabric state and
status from nvidia-smi -q -x (the real H200 and H100 outputs, and the states they do not show), and gpu_health's
finding for a fabric that is not ready, which takes the GPU out of service."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health as gh
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _gpu_health_plan as gp
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _nvswitch as nvs
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import (
    COMPUTE_CAP_ARGS,
    XML_ARGS,
    gather,
    parse_smi_xml,
    scan_nvswitches,
    scan_pci_devices,
)
from ansible_collections.k8sgpu.nvidia.plugins.modules import gpu_facts

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H100_XML = FIXTURES / "h100" / "nvidia-smi-q.xml"
SHARED = ROOT.parent / "shared" / "fixtures"
H200X2_XML = SHARED / "h200x2" / "nvidia-smi-q.xml"
SHARED_H100_XML = SHARED / "h100" / "nvidia-smi-q.xml"
PROC_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n"
SMI = "/usr/bin/nvidia-smi"


def shared(path: Path) -> Path:
    """A file of ../shared (the lent machines' real outputs, never copied into the project), or a skip."""
    if not path.is_file():
        pytest.skip(f"{path} is not there: the shared fixtures (../shared beside the checkout) are absent")
    return path


def make_sysfs(root: Path, devices: dict) -> Path:
    """devices: {address: (vendor, device, class, driver or None)} as sysfs files and a driver link."""
    base = root / "sys" / "bus" / "pci" / "devices"
    base.mkdir(parents=True)
    for address, (vendor, device, pci_class, driver) in devices.items():
        dev = base / address
        dev.mkdir()
        for key, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
            (dev / key).write_text(value + "\n")
        if driver:
            (root / "sys" / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(root / "sys" / "bus" / "pci" / "drivers" / driver)
    return root / "sys"


# An HGX H100 board as sysfs shows it (two of its eight GPUs and two of its four NVSwitches, enough here), with a
# bridge function of the NVSwitch driver's table that is no NVSwitch, and the other vendors' bridges of the same
# class (Intel's, Mellanox's) that must not count.
HGX = {
    "0000:18:00.0": ("0x10de", "0x2330", "0x030200", "nvidia"),
    "0000:2a:00.0": ("0x10de", "0x2330", "0x030200", "nvidia"),
    "0000:05:00.0": ("0x10de", "0x22a3", "0x068000", "nvidia-nvswitch"),
    "0000:06:00.0": ("0x10DE", "0x22A3", "0x068000", None),
    "0000:07:00.0": ("0x10de", "0x22ac", "0x068000", None),
    "0000:00:14.2": ("0x8086", "0x0998", "0x068000", None),
    "0000:a1:00.1": ("0x15b3", "0x2100", "0x068000", None),
}
# An H100 PCIe host (the lab's): a GPU, no NVSwitch; an Intel bridge of the NVSwitch class beside it.
PCIE = {
    "0000:00:06.0": ("0x10de", "0x2330", "0x030200", None),
    "0000:00:1f.0": ("0x8086", "0x7a06", "0x068000", None),
}


class TestNvswitchDetection:
    def test_hgx_h100(self, tmp_path):
        sysfs = make_sysfs(tmp_path, HGX)
        assert scan_nvswitches(str(sysfs)) == [
            {"pci_bus_id": "0000:05:00.0", "device_id": "0x22a3", "generation": "LS10",
             "name": "GH100 [H100 NVSwitch]", "driver": "nvidia-nvswitch"},
            {"pci_bus_id": "0000:06:00.0", "device_id": "0x22a3", "generation": "LS10",
             "name": "GH100 [H100 NVSwitch]", "driver": None},
        ]
        flags = {d["pci_bus_id"]: (d["gpu"], d["nvswitch"]) for d in scan_pci_devices(str(sysfs))}
        assert flags == {"0000:05:00.0": (False, True), "0000:06:00.0": (False, True),
                         "0000:07:00.0": (False, False), "0000:18:00.0": (True, False),
                         "0000:2a:00.0": (True, False)}

    def test_no_nvswitch_and_other_vendors_bridges_ignored(self, tmp_path):
        sysfs = make_sysfs(tmp_path, PCIE)
        assert scan_nvswitches(str(sysfs)) == []
        assert [(d["pci_bus_id"], d["nvswitch"]) for d in scan_pci_devices(str(sysfs))] == [("0000:00:06.0", False)]

    def test_no_sysfs(self, tmp_path):
        assert scan_nvswitches(str(tmp_path / "nowhere")) == []

    @pytest.mark.parametrize("device_id, generation, name", [
        ("0x1af1", "LR10", "GA100 [A100 NVSwitch]"),
        ("0x1ae8", "LR10", None),
        ("0x22a0", "LS10", None),
        ("0x22a7", "LS10", None),
        ("0x1ac1", None, None),  # an NVIDIA bridge-class id of no table: still an NVSwitch
    ])
    def test_generations(self, device_id, generation, name):
        device = {"pci_bus_id": "0000:05:00.0", "device_id": device_id, "class": "0x068000", "driver": None}
        assert nvs.nvswitches([device]) == [{"pci_bus_id": "0000:05:00.0", "device_id": device_id,
                                             "generation": generation, "name": name, "driver": None}]

    @pytest.mark.parametrize("device_id", ["0x22a8", "0x22ab", "0x22ac", "0x22af"])
    def test_the_tables_bridge_functions_are_not_nvswitches(self, device_id):
        assert nvs.nvswitches([{"pci_bus_id": "0000:07:00.0", "device_id": device_id, "class": "0x068000"}]) == []

    def test_gather_without_a_driver_still_reports_the_nvswitches(self, tmp_path):
        sysfs = make_sysfs(tmp_path, HGX)
        (tmp_path / "proc").mkdir()
        facts, warnings = gather(lambda argv: pytest.fail("nvidia-smi must not run"), SMI, sysfs_root=str(sysfs),
                                 proc_root=str(tmp_path / "proc"))
        assert facts["nvidia_gpu_source"] == "sysfs" and warnings == []
        assert [s["pci_bus_id"] for s in facts["nvidia_nvswitches"]] == ["0000:05:00.0", "0000:06:00.0"]


# --- the fabric state --------------------------------------------------------------------------------------------

def with_fabric(text: str, state: str, status: str) -> str:
    """nvidia-smi -q -x with every GPU's <fabric><state> and <status> replaced."""
    text, count = re.subn(r"(<fabric>\s*<state>)[^<]*(</state>\s*<status>)[^<]*(</status>)",
                          lambda m: f"{m.group(1)}{state}{m.group(2)}{status}{m.group(3)}", text)
    assert count >= 1, "no <fabric> element to edit"
    return text


def small_xml(*fabrics) -> str:
    """A small nvidia-smi -q -x: one <gpu> per (state, status); None leaves the <fabric> element out."""
    gpus = []
    for position, fabric in enumerate(fabrics):
        element = "" if fabric is None else (f"<fabric><state>{fabric[0]}</state><status>{fabric[1]}</status>"
                                             "<cliqueId>0</cliqueId></fabric>")
        gpus.append(f'<gpu id="00000000:{0x18 + position:02X}:00.0"><product_name>NVIDIA H100 80GB HBM3</product_name>'
                    f"<uuid>GPU-{position}</uuid><persistence_mode>Enabled</persistence_mode>{element}</gpu>")
    return (f"<nvidia_smi_log><driver_version>580.159.04</driver_version><cuda_version>13.0</cuda_version>"
            f"<attached_gpus>{len(gpus)}</attached_gpus>{''.join(gpus)}</nvidia_smi_log>")


class TestFabricFacts:
    def test_real_h200x2_completed_success(self):
        parsed = parse_smi_xml(shared(H200X2_XML).read_text())
        assert [(g["name"], g["fabric_state"], g["fabric_status"]) for g in parsed["gpus"]] == [
            ("NVIDIA H200", "Completed", "Success"), ("NVIDIA H200", "Completed", "Success")]

    def test_real_h100_without_fabric(self):
        for path in (H100_XML, shared(SHARED_H100_XML)):
            (gpu,) = parse_smi_xml(path.read_text())["gpus"]
            assert (gpu["fabric_state"], gpu["fabric_status"]) == ("N/A", "N/A"), path

    @pytest.mark.parametrize("state, status", [
        ("In Progress", "N/A"), ("Not Started", "N/A"), ("Completed", "Unknown Error"), ("Not Supported", "N/A")])
    def test_other_states_as_written(self, state, status):
        (gpu,) = parse_smi_xml(with_fabric(H100_XML.read_text(), state, status))["gpus"]
        assert (gpu["fabric_state"], gpu["fabric_status"]) == (state, status)

    def test_no_fabric_element_is_null(self):
        parsed = parse_smi_xml(small_xml(None, ("Completed", "Success")))
        assert [(g["fabric_state"], g["fabric_status"]) for g in parsed["gpus"]] == [
            (None, None), ("Completed", "Success")]

    @pytest.mark.parametrize("state, status, check", [
        ("Completed", "Success", None),
        ("N/A", "N/A", None),
        ("Not Supported", "N/A", None),
        (None, None, None),
        ("In Progress", "N/A", "fabric_not_completed"),
        ("Not Started", "N/A", "fabric_not_completed"),
        ("Something New", "Success", "fabric_not_completed"),
        ("Completed", "Unknown Error", "fabric_failed"),
        ("Completed", "N/A", "fabric_failed"),
        ("completed", "success", None),
    ])
    def test_fabric_problem(self, state, status, check):
        problem = nvs.fabric_problem(state, status)
        assert (problem[0] if problem else None) == check
        if problem:
            named = state if check == "fabric_not_completed" else status
            assert repr(named) in problem[1] and "nvidia-fabricmanager" in problem[1]


class TestGpuFactsModule:
    def test_facts_and_their_return_documentation(self, monkeypatch, module_io, tmp_path):
        """gpu_facts main() on an HGX-like tree with the H200s' real XML: NVSwitches and fabric in the facts, every
        key of a GPU, a PCI device and an NVSwitch in RETURN."""
        from ansible.module_utils import basic
        from ansible.module_utils.testing import patch_module_args
        from module_harness import AnsibleExitJson

        sysfs = make_sysfs(tmp_path, HGX)
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text(PROC_VERSION)
        smi = tmp_path / "nvidia-smi"
        smi.write_text("#!/bin/sh\nexit 99\n")
        smi.chmod(0o755)
        xml = with_fabric(H100_XML.read_text(), "In Progress", "N/A")
        answers = {XML_ARGS: (0, xml, ""), COMPUTE_CAP_ARGS: (0, "", "")}
        monkeypatch.setattr(basic.AnsibleModule, "run_command",
                            lambda self, args, **kw: answers[tuple(args[args.index(str(smi)) + 1:])])
        with patch_module_args({"nvidia_smi": str(smi), "sysfs_root": str(sysfs), "proc_root": str(tmp_path / "proc")}):
            with pytest.raises(AnsibleExitJson) as result:
                gpu_facts.main()
        facts = result.value.args[0]["ansible_facts"]
        assert [(g["fabric_state"], g["fabric_status"]) for g in facts["nvidia_gpus"]] == [("In Progress", "N/A")]
        assert [(s["pci_bus_id"], s["generation"]) for s in facts["nvidia_nvswitches"]] == [
            ("0000:05:00.0", "LS10"), ("0000:06:00.0", "LS10")]

        doc = yaml.safe_load(gpu_facts.RETURN)["ansible_facts"]["contains"]
        assert {"nvidia_nvswitches"} <= set(doc)
        assert set(facts["nvidia_gpus"][0]) == set(doc["nvidia_gpus"]["contains"])
        assert set(facts["nvidia_pci_devices"][0]) == set(doc["nvidia_pci_devices"]["contains"])
        assert set(facts["nvidia_nvswitches"][0]) == set(doc["nvidia_nvswitches"]["contains"])


# --- gpu_health --------------------------------------------------------------------------------------------------

@pytest.fixture
def health(tmp_path):
    """health(xml) -> gpu_health's result for that nvidia-smi output (no kernel log, no sysfs GPU)."""
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text(PROC_VERSION)
    sysfs = tmp_path / "sys"
    sysfs.mkdir()

    def _read(xml: str) -> dict:
        result, _warnings = gh.gather(lambda argv: (0, xml, ""), SMI, sysfs_root=str(sysfs), proc_root=str(proc),
                                      kernel_log="none")
        return result
    return _read


class TestGpuHealthFinding:
    def test_real_h200x2_is_healthy(self, health):
        result = health(shared(H200X2_XML).read_text())
        assert result["status"] == "healthy" and result["summary"]["gpu_count"] == 2
        assert [(g["fabric_state"], g["fabric_status"], g["findings"]) for g in result["gpus"]] == [
            ("Completed", "Success", []), ("Completed", "Success", [])]

    def test_real_h100_without_fabric_is_healthy(self, health):
        (gpu,) = health(H100_XML.read_text())["gpus"]
        assert gpu["status"] == "healthy" and gpu["findings"] == [] and gpu["fabric_state"] == "N/A"

    @pytest.mark.parametrize("state, status, check", [
        ("In Progress", "N/A", "fabric_not_completed"),
        ("Not Started", "N/A", "fabric_not_completed"),
        ("Completed", "Unknown Error", "fabric_failed"),
    ])
    def test_a_fabric_not_ready_is_a_needs_reset_finding(self, health, state, status, check):
        result = health(with_fabric(H100_XML.read_text(), state, status))
        (gpu,) = result["gpus"]
        (finding,) = gpu["findings"]
        assert finding == {"check": check, "status": "needs_reset", "detail": finding["detail"],
                           "source": nvs.FABRIC_DOC}
        assert repr(state if check == "fabric_not_completed" else status) in finding["detail"]
        assert gpu["status"] == result["status"] == "needs_reset"
        assert (gpu["fabric_state"], gpu["fabric_status"]) == (state, status)
        assert result["summary"]["unhealthy_gpus"] == [{
            "index": 0, "uuid": "GPU-3df950bc-14e1-c147-af67-d6bc91665500", "pci_bus_id": "00000000:00:06.0",
            "status": "needs_reset", "checks": [check]}]

    def test_only_the_gpu_whose_fabric_is_not_ready(self, health):
        result = health(small_xml(("Completed", "Success"), ("In Progress", "N/A"), None))
        assert [g["status"] for g in result["gpus"]] == ["healthy", "needs_reset", "healthy"]
        assert [g["uuid"] for g in result["summary"]["unhealthy_gpus"]] == ["GPU-1"]

    def test_missing_gpu_entries_have_null_fabric(self):
        finding = {"check": "missing_from_nvidia_smi", "status": "needs_reboot", "detail": "", "source": ""}
        gpu = gh._missing_gpu({"pci_bus_id": "0000:3b:00.0"}, finding)
        assert gpu["fabric_state"] is None and gpu["fabric_status"] is None

    @pytest.mark.parametrize("policy, action", [("quarantine", "quarantine"), ("recover", "recover"),
                                                ("report", "record")])
    def test_the_finding_takes_the_gpu_out_of_service(self, health, policy, action):
        """At the default taint_from (needs_reset) the fabric finding taints the Node and, under quarantine or
        recover, puts it in the serial play that cordons and drains it."""
        result = health(with_fabric(H100_XML.read_text(), "Not Started", "N/A"))
        plan = gp.plan(result, {"metadata": {"name": "gpu-1"}, "spec": {}}, policy=policy, now="2026-12-07T10:00:00Z")
        assert plan["action"] == action and plan["out"] is True and plan["window"] is (policy != "report")
        assert plan["taint"] == {"key": gp.TAINT_KEY, "value": "needs_reset", "effect": "NoSchedule",
                                 "state": "present"}
        assert [f["check"] for f in plan["gpus"][0]["findings"]] == ["fabric_not_completed"]
        assert "Not Started" in plan["reason"]

    def test_the_rule_is_documented(self):
        from ansible_collections.k8sgpu.nvidia.plugins.modules import gpu_health
        doc = yaml.safe_load(gpu_health.DOCUMENTATION)
        text = " ".join(doc["description"])
        assert "fabric_not_completed" in text and "fabric_failed" in text
        checks = yaml.safe_load(gpu_health.RETURN)["gpus"]["contains"]["findings"]["contains"]["check"]
        assert "V(fabric_not_completed)" in " ".join(checks["description"])
        assert "V(fabric_failed)" in " ".join(checks["description"])


def test_the_real_h200_element_is_where_the_parser_reads_it():
    """The place of <fabric> in the H200s' real XML: a child of <gpu>, with <state> and <status> first."""
    root = ET.fromstring(shared(H200X2_XML).read_text())
    for gpu in root.findall("gpu"):
        fabric = gpu.find("fabric")
        assert [child.tag for child in fabric][:2] == ["state", "status"]
        assert nvs.read_fabric(gpu) == ("Completed", "Success")
