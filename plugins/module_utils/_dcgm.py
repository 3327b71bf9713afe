# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the DCGM exporter's counters file (role dcgm_exporter; filters dcgm_counters_csv and
dcgm_profiling_fields).

Pure functions over plain data: the counters CSV from the role's list of counters, checked as the exporter checks it,
and the profiling (DCP) fields a counters file asks for.
"""
from __future__ import annotations

import re


class DcgmError(ValueError):
    """Bad input, with a message naming the entry and the fix."""


# The Prometheus types the exporter accepts in its CSV (dcgm-exporter's promMetricType; "label" turns a field into
# a label of the other metrics, e.g. DCGM_FI_DRIVER_VERSION).
COUNTER_TYPES = ("gauge", "counter", "histogram", "summary", "label")
# DCGM fields (DCGM_FI_*) and the exporter's own (DCGM_EXP_*, e.g. DCGM_EXP_XID_ERRORS_COUNT).
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
# Profiling (DCP) fields: the exporter reads them through DCGM's profiling module, which needs CAP_SYS_ADMIN.
PROFILING_PREFIX = "DCGM_FI_PROF_"


def check_counters(counters: list, source: str = "dcgm_exporter_counters") -> list[dict]:
    """The counters as {field, type, help} dicts, or DcgmError naming the first bad entry and the fix."""
    if not isinstance(counters, list) or not counters:
        raise DcgmError(f"{source} must be a non-empty list of {{field, type, help}} entries")
    seen: dict[str, int] = {}
    out = []
    for index, entry in enumerate(counters):
        where = f"{source}[{index}]"
        if not isinstance(entry, dict):
            raise DcgmError(f"{where} must be a dict with keys field, type and help, got {entry!r}")
        unknown = sorted(set(entry) - {"field", "type", "help"})
        if unknown:
            raise DcgmError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: field, type, help)")
        field = str(entry.get("field") or "").strip()
        ptype = str(entry.get("type") or "").strip()
        text = str(entry.get("help") or "").strip()
        where = f"{where} ({field or 'no field'})"
        if not _FIELD.match(field):
            raise DcgmError(f"{where}: field must be a DCGM field name such as DCGM_FI_DEV_GPU_UTIL "
                            "(DCGM_FI_* or the exporter's DCGM_EXP_*)")
        if ptype not in COUNTER_TYPES:
            raise DcgmError(f"{where}: unknown type {ptype!r}; the exporter accepts {', '.join(COUNTER_TYPES)}")
        if not text or any(c in text for c in ",\n\r\""):
            raise DcgmError(f"{where}: help must be one line of text without commas or quotes (CSV), got {text!r}")
        if field in seen:
            raise DcgmError(f"{where}: {field} is listed twice (entries {seen[field]} and {index})")
        seen[field] = index
        out.append({"field": field, "type": ptype, "help": text})
    return out


def counters_csv(counters: list, profiling: bool = True, extra: list | None = None) -> str:
    """The exporter's counters file: one "FIELD, type, help" line per counter.

    extra counters are added after the list (a field listed in both is an error); profiling=False leaves out the
    DCGM_FI_PROF_* fields, so the exporter runs without CAP_SYS_ADMIN.
    """
    base = check_counters(counters)
    more = check_counters(extra, "dcgm_exporter_extra_counters") if extra else []
    both = check_counters(base + more, "dcgm_exporter_counters + dcgm_exporter_extra_counters")
    lines = ["# DCGM field, Prometheus type, help (written by the k8sgpu.nvidia.dcgm_exporter role)"]
    for entry in both:
        if not profiling and entry["field"].startswith(PROFILING_PREFIX):
            continue
        lines.append(f"{entry['field']}, {entry['type']}, {entry['help']}")
    return "\n".join(lines) + "\n"


def profiling_fields(csv_text: str) -> list[str]:
    """The DCGM_FI_PROF_* fields a counters file asks for (those need CAP_SYS_ADMIN)."""
    fields = [line.split(",", 1)[0].strip() for line in csv_text.splitlines() if line.strip() and not line.startswith("#")]
    return [f for f in fields if f.startswith(PROFILING_PREFIX)]
