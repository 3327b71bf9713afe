"""A lab "GPU host" for a test or a benchmark: the inventory that names one node container of the lab
(lab/lab.sh node NAME) as the only member of gpu_nodes, with the lab's group_vars, and localhost as the control
plane, as test_gpu_isolation_toolkit, test_maintenance_plan and bench/maintenance.py write it."""
from __future__ import annotations

import json
from pathlib import Path

from k8sgpu_testlib import ROOT


def node_inventory(inv_dir: Path, host: str, host_vars: dict | None = None) -> Path:
    """Write inv_dir/hosts.yml and the inv_dir/group_vars link to inventories/lab/group_vars; returns hosts.yml.

    host_vars are added to the gpu_nodes group's vars (after the docker connection and the Python interpreter).
    """
    (inv_dir / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
    inventory = inv_dir / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"hosts": {host: {"k8sgpu_node_name": host}},
                      "vars": {"ansible_connection": "community.docker.docker",
                               "ansible_python_interpreter": "/usr/bin/python3", **(host_vars or {})}},
        "k8s_control_plane": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}))
    return inventory
