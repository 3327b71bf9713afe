"""gpu_facts reuse=true (plugins/action/gpu_facts.py) on a lab GPU host: within one ansible-playbook run a second read
with the same options does not reach the host; other options, no reuse, or facts a fact cache kept from an earlier
run are read from the host again."""
from __future__ import annotations

import json

from conftest import GPU_NODES, run

PLAYBOOK = "tests/lab/playbooks/gpu_facts_reuse.yml"


def _results(cache_dir) -> list[dict]:
    res = run(["ansible-playbook", "-i", "inventories/lab", PLAYBOOK],
              # ansible-core 2.21 adds a result's invocation (the sign a module ran) only with INJECT_INVOCATION.
              env_extra={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
                         "ANSIBLE_INJECT_INVOCATION": "true",
                         "ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache_dir)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    tasks = json.loads(res.stdout)["plays"][0]["tasks"]
    return [t["hosts"][GPU_NODES[0]] for t in tasks]


def test_one_read_per_run_and_none_across_runs(tmp_path):
    first, again, other_roots, no_reuse = _results(tmp_path)
    assert first["reused"] is False and "invocation" in first
    marker = first["ansible_facts"]["nvidia_facts_read"]
    assert marker["sysfs_root"] == "/sys" and marker["proc_root"] == "/proc" and len(marker["run"]) == 16
    # Reused without a round trip: the task's interpreter does not exist on the host.
    assert again["reused"] is True and "invocation" not in again
    assert again["ansible_facts"]["nvidia_pci_devices"] == first["ansible_facts"]["nvidia_pci_devices"]
    assert len([d for d in again["ansible_facts"]["nvidia_pci_devices"] if d["gpu"]]) == 8
    assert other_roots["reused"] is False and other_roots["ansible_facts"]["nvidia_facts_read"]["sysfs_root"] == "/sys/bus/.."
    assert no_reuse["reused"] is False and "invocation" in no_reuse

    # The next run finds this run's facts in the fact cache, and reads the host all the same.
    (cache_file,) = tmp_path.glob(f"*{GPU_NODES[0]}")  # ansible-core 2.19: s1_<host>, the facts in __payload__
    cached = json.loads(cache_file.read_text())
    cached = json.loads(cached["__payload__"]) if "__payload__" in cached else cached
    assert cached["nvidia_facts_read"]["run"] == marker["run"]
    first_next = _results(tmp_path)[0]
    assert first_next["reused"] is False and "invocation" in first_next
    assert first_next["ansible_facts"]["nvidia_facts_read"]["run"] != marker["run"]
