# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter verify_summary of the verify role; the logic is in module_utils/_verify_summary.py."""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _verify_summary
version_added: 1.0.0
short_description: 'Private to the verify role, not API: the verify role''s summary table of every GPU host, and its failures'
description:
  - One row per GPU host - inventory name, Node name (P(k8sgpu.nvidia.node_name#filter), V(?) where unknown), GPUs,
    driver, node-level result and in-cluster result - with each failed GPU's reason on a line of its own under
    its host's row.
  - The node-level result comes from the host variable C(verify_host) the role M(k8sgpu.nvidia.verify) sets
    (C(node_test), C(node_test_status), C(node_test_failures), see P(k8sgpu.nvidia._verify_node_result#filter)); a host
    without it shows C(not run (host failed or unreachable)). The in-cluster result comes from the registered result
    of M(k8sgpu.nvidia.k8s_gpu_verify), matched by Node name.
  - After the table, a section C(Not proven:) says what the checks that ran could not prove, which is not a
    failure - GPUs on the PCI bus (sysfs) with no NVIDIA driver loaded, so that no vectorAdd ran on them (a driver
    installed and waiting for a reboot, or a host with no real GPU such as the lab's node containers); and Jobs whose
    pod completed but whose log could not be read (status C(completed_no_logs), accepted with
    O(k8sgpu.nvidia.k8s_gpu_verify#module:require_logs=false), as on the lab's kwok Nodes).
positional: _input, hostvars, cluster
options:
  _input:
    description: Inventory names of the GPU hosts.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  cluster:
    description: The registered result of the M(k8sgpu.nvidia.k8s_gpu_verify) task (it may be skipped or failed).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: "{{ (groups['gpu_nodes'] | k8sgpu.nvidia._verify_summary(hostvars, cluster_result)).text }}"
"""

RETURN = r"""
_value:
  description: The table and the failures.
  type: dict
  contains:
    text:
      description: "The table, one line per host plus one per failure reason, then the C(Not proven:) section, if any."
      type: str
    failures:
      description: "Every failure: C(<host>: node test FAILED: <reason>) per failed GPU, and C(in cluster: <message>)."
      type: list
      elements: str
    unproven:
      description:
        - "What could not be proven, one line per group of hosts (C(<hosts>: <what was not proven and why>)); empty
          when everything that ran proved its part."
      type: list
      elements: str
      version_added: 1.1.0
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _verify_summary


def verify_summary(hosts, hostvars, cluster):
    """module_utils/_verify_summary.py's verify_summary, its errors as the filter's."""
    try:
        return _verify_summary.verify_summary(hosts, hostvars, cluster)
    except _verify_summary.VerifySummaryError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict:
        return {"_verify_summary": verify_summary}
