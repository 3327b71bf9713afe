# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_health filter."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _maintenance_health
version_added: 1.0.0
short_description: 'Private to the node_maintenance role, not API: what keeps a GPU host from going back into service after its maintenance window'
description:
  - From the host's GPU facts read after the window (M(k8sgpu.nvidia.gpu_facts)), the verify role's node-level result
    (C(verify_host), vectorAdd) and the count of GPUs the host had on its PCI bus before the drain, lists what is
    worse than before; an empty list when the host is as good as before.
  - On a host that had GPUs, each must be on the PCI bus again, the NVIDIA driver loaded and seeing each, and
    vectorAdd passed on each. A skipped vectorAdd is a failure there. A host that had no GPU gives no problem.
positional: _input, verify_host, host_gpus_before
options:
  _input:
    description: The host's C(ansible_facts) after the window (C(nvidia_pci_devices), C(nvidia_driver_loaded), C(nvidia_gpus)).
    type: dict
    required: true
  verify_host:
    description: The verify role's C(verify_host) (C(node_test_status), C(node_test), C(node_test_failures), C(gpus)).
    type: dict
    required: true
  host_gpus_before:
    description: GPUs on the host's PCI bus before the drain.
    type: int
    required: true
"""

EXAMPLES = r"""
problems: "{{ ansible_facts | k8sgpu.nvidia._maintenance_health(verify_host, 8) }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem.
  type: list
  elements: str
"""

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def maintenance_health(facts: Any, verify_host: Any, host_gpus_before: Any) -> list[str]:
    """What keeps a host from going back into service after its maintenance window ([] when nothing does).

    ``facts`` are the host's GPU facts read after the window (k8sgpu.nvidia.gpu_facts: nvidia_pci_devices,
    nvidia_driver_loaded, nvidia_gpus), ``verify_host`` the verify role's node-level result (vectorAdd), and
    ``host_gpus_before`` the GPUs the host had on its PCI bus before the drain. On a host that had GPUs, each must be
    on the PCI bus again, the driver loaded, the driver seeing each, and vectorAdd passed on each: a skipped vectorAdd
    is a failure there.
    """
    if not isinstance(facts, Mapping) or not isinstance(verify_host, Mapping):
        raise AnsibleFilterError("maintenance_health expects the host's GPU facts and verify_host (mappings)")
    try:
        before = int(host_gpus_before or 0)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"maintenance_health: host_gpus_before must be a count, not {host_gpus_before!r}") from None
    if before <= 0:
        return []
    problems = []
    on_bus = len([d for d in facts.get("nvidia_pci_devices") or [] if isinstance(d, Mapping) and d.get("gpu")])
    if on_bus < before:
        problems.append(f"{before - on_bus} of {before} GPU(s) missing from the PCI bus")
    if not facts.get("nvidia_driver_loaded"):
        problems.append("the NVIDIA driver is not loaded")
    seen = len(facts.get("nvidia_gpus") or [])
    if facts.get("nvidia_driver_loaded") and seen < before:
        problems.append(f"the driver sees {seen} of {before} GPU(s)")
    status = verify_host.get("node_test_status")
    if status == "skipped":
        problems.append(f"vectorAdd did not run (skipped) on a host that had {before} GPU(s)")
    elif status != "passed":
        failures = "; ".join(str(f) for f in verify_host.get("node_test_failures") or [])
        problems.append(f"vectorAdd {verify_host.get('node_test', 'failed')}{': ' + failures if failures else ''}")
    elif len(verify_host.get("gpus") or []) < before:
        problems.append(f"vectorAdd ran on {len(verify_host.get('gpus') or [])} of {before} GPU(s)")
    return problems


class FilterModule:
    def filters(self) -> dict:
        return {"_maintenance_health": maintenance_health}
