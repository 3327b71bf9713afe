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
