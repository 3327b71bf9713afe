# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters dcgm_counters_csv and dcgm_profiling_fields of the dcgm_exporter role; the logic is in
module_utils/_monitoring.py."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _monitoring


def dcgm_counters_csv(counters: Any, profiling: bool = True, extra: Any = None) -> str:
    try:
        return _monitoring.counters_csv(counters, bool(profiling), extra or [])
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc)) from None


def dcgm_profiling_fields(csv_text: Any) -> list[str]:
    if not isinstance(csv_text, str):
        raise AnsibleFilterError("dcgm_profiling_fields expects the counters CSV text")
    return _monitoring.profiling_fields(csv_text)


class FilterModule:
    def filters(self) -> dict:
        return {
            "dcgm_counters_csv": dcgm_counters_csv,
            "dcgm_profiling_fields": dcgm_profiling_fields,
        }
