"""module_utils/_dcgm.py: the DCGM exporter's counters file."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _dcgm as m

COUNTERS = [
    {"field": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "help": "GPU temperature (C)"},
    {"field": "DCGM_FI_DRIVER_VERSION", "type": "label", "help": "Driver version"},
    {"field": "DCGM_FI_PROF_DRAM_ACTIVE", "type": "gauge", "help": "DRAM active"},
]


def test_counters_csv_lines_in_order_and_profiling_switch():
    text = m.counters_csv(COUNTERS)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (C)", "DCGM_FI_DRIVER_VERSION, label, Driver version",
                     "DCGM_FI_PROF_DRAM_ACTIVE, gauge, DRAM active"]
    assert m.profiling_fields(text) == ["DCGM_FI_PROF_DRAM_ACTIVE"]
    without = m.counters_csv(COUNTERS, profiling=False)
    assert "DCGM_FI_PROF_" not in without and m.profiling_fields(without) == []
    extra = [{"field": "DCGM_EXP_XID_ERRORS_COUNT", "type": "counter", "help": "XIDs in the window"}]
    assert m.counters_csv(COUNTERS, extra=extra).splitlines()[-1] == "DCGM_EXP_XID_ERRORS_COUNT, counter, XIDs in the window"


@pytest.mark.parametrize("entry, message", [
    ({"field": "DCGM_FI_DEV_FAN", "type": "gauges", "help": "x"},
     "dcgm_exporter_counters[0] (DCGM_FI_DEV_FAN): unknown type 'gauges'; the exporter accepts gauge, counter, "
     "histogram, summary, label"),
    ({"field": "gpu_temp", "type": "gauge", "help": "x"}, "field must be a DCGM field name"),
    ({"field": "DCGM_FI_DEV_FAN", "type": "gauge", "help": "fan, in %"}, "help must be one line of text without commas"),
    ({"field": "DCGM_FI_DEV_FAN", "type": "gauge", "help": "x", "unit": "%"}, "unknown key(s) unit"),
    ("DCGM_FI_DEV_FAN", "must be a dict with keys field, type and help"),
])
def test_bad_counter_entries_are_named(entry, message):
    with pytest.raises(m.DcgmError, match=None) as err:
        m.check_counters([entry])
    assert message in str(err.value)


def test_a_field_twice_is_an_error_naming_both_entries():
    with pytest.raises(m.DcgmError) as err:
        m.counters_csv(COUNTERS, extra=[dict(COUNTERS[0])])
    assert "DCGM_FI_DEV_GPU_TEMP is listed twice (entries 0 and 3)" in str(err.value)


# The exporter's objects (the frozen comparison with the templates they replace is
# tests/unit/plugins/filter/test_dcgm_exporter_objects.py).

import copy  # noqa: E402
import json  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402
from ansible.plugins.filter import core  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "role_objects" / "before_issue_35.json").read_text())
SETTINGS = FROZEN["dcgm_exporter"][0]["settings"]


class Recording(Mapping):
    """The settings, recording which are read (Ansible templates a setting when it is read)."""

    def __init__(self, data):
        self.data, self.reads = data, []

    def __getitem__(self, key):
        self.reads.append(key)
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def container(objects):
    return objects[1]["spec"]["template"]["spec"]["containers"][0]


def test_sys_admin_only_with_profiling_fields():
    with_prof = m.exporter_objects(SETTINGS, "objects")
    assert container(with_prof)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    settings = {**SETTINGS, "counters_csv": m.counters_csv(COUNTERS, profiling=False)}
    without = m.exporter_objects(settings, "objects")
    assert container(without)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container(without)["securityContext"]["privileged"] is False
    # the pods roll when the counters change
    annotation = "k8sgpu.nvidia/counters-sha256"
    assert with_prof[1]["spec"]["template"]["metadata"]["annotations"][annotation] != \
        without[1]["spec"]["template"]["metadata"]["annotations"][annotation]


@pytest.mark.parametrize("value, mounted", [(True, True), ("true", True), ("yes", True), (False, False),
                                            ("false", False), ("False", False), ("no", False)])
def test_the_gpus_by_volume_mount_as_ansibles_bool_reads_it(value, mounted):
    """A string as -e dcgm_exporter_gpus_by_volume_mount=false gives it: no mount (the template tested the string's
    truth, so "false" mounted the GPUs)."""
    objects = m.exporter_objects({**SETTINGS, "gpus_by_volume_mount": value}, "objects")
    names = [v["name"] for v in objects[1]["spec"]["template"]["spec"]["volumes"]]
    assert ("all-gpus" in names) is mounted
    assert any(v["name"] == "all-gpus" for v in container(objects)["volumeMounts"]) is mounted


@pytest.mark.parametrize("part", m.PARTS)
def test_a_part_reads_only_its_settings(part):
    settings = Recording(SETTINGS)
    m.exporter_objects(settings, part)
    assert sorted(set(settings.reads)) == sorted(m.SETTINGS[part])
    assert "counters_csv" in settings.reads or part != "objects"


def test_the_scrape_configuration_is_the_service_monitors_scrape():
    both = m.exporter_objects({**SETTINGS, "scrape_interval": "30s", "name": "gpu-metrics", "namespace": "mon"})
    job = yaml.safe_load(both["scrape_config"])["scrape_configs"][0]
    endpoint = both["service_monitor"]["spec"]["endpoints"][0]
    assert job["job_name"] == both["service_monitor"]["metadata"]["name"] == "gpu-metrics"
    assert job["scrape_interval"] == endpoint["interval"] == "30s"
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == \
        both["service_monitor"]["spec"]["namespaceSelector"]["matchNames"] == ["mon"]
    relabel = endpoint["relabelings"][0]
    assert {"source_labels": relabel["sourceLabels"], "target_label": relabel["targetLabel"]} in job["relabel_configs"]
    assert both["scrape_config"].startswith("#\n# Ansible managed\n#\n# DCGM exporter scrape configuration")


@pytest.mark.parametrize("text", ["Ansible managed", "Managed by site.yml\n\nDo not edit", "a\n", " x \ny"])
def test_comment_is_ansibles(text):
    assert m.comment(text) == core.comment(text)


@pytest.mark.parametrize("hostile", ["x\n---\nkind: Secret", "x: y", "'\"}, {\"evil\": 1}: [{", "a\n  evil: 1"])
def test_no_setting_adds_structure_to_the_scrape_configuration(hostile):
    plain = yaml.safe_load(m.exporter_objects(SETTINGS, "scrape_config"))
    got = yaml.safe_load(m.exporter_objects({**SETTINGS, "name": hostile, "namespace": hostile, "scrape_interval": hostile,
                                             "managed": hostile}, "scrape_config"))
    job, want = got["scrape_configs"][0], plain["scrape_configs"][0]
    assert list(got) == ["scrape_configs"] and len(got["scrape_configs"]) == 1
    assert (job["job_name"], job["scrape_interval"], job["kubernetes_sd_configs"][0]["namespaces"]["names"]) == \
        (hostile, hostile, [hostile])
    assert job["relabel_configs"][0]["regex"] == hostile + ";metrics"
    assert {**job, "job_name": None, "scrape_interval": None, "kubernetes_sd_configs": None,
            "relabel_configs": job["relabel_configs"][1:]} == \
        {**want, "job_name": None, "scrape_interval": None, "kubernetes_sd_configs": None,
         "relabel_configs": want["relabel_configs"][1:]}


def test_no_object_shared_and_settings_left_alone():
    settings = copy.deepcopy(SETTINGS)
    everything = m.exporter_objects(settings)
    seen, twice = set(), []

    def walk(value):
        if isinstance(value, (dict, list)):
            if id(value) in seen:
                twice.append(value)
                return
            seen.add(id(value))
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)
    walk(everything)
    assert twice == []
    container(everything["objects"])["resources"]["limits"]["memory"] = "1Gi"
    everything["service_monitor"]["metadata"]["labels"]["x"] = "y"
    assert settings == SETTINGS


def test_a_bad_part_or_setting_is_named():
    with pytest.raises(m.DcgmError, match="part must be one of"):
        m.exporter_objects(SETTINGS, "daemonset")
    with pytest.raises(m.nd.NodeDaemonSetError, match="dcgm_exporter_probe_period must be a whole number, got 'ten'"):
        m.exporter_objects({**SETTINGS, "probe_period": "ten"}, "objects")
    with pytest.raises(m.DcgmError, match="service_monitor_labels must be a dict"):
        m.exporter_objects({**SETTINGS, "service_monitor_labels": ["release"]}, "service_monitor")
