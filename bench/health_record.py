"""Benchmark: playbooks/health.yml on healthy GPU hosts (nothing to taint, record or drain), two checkouts side by side.

The path every alert of the rulebook and every scheduled health run takes before anything is found: the settings
check, the Node names, per host the Node read and the health read (the gpu_health role's entry point `record`), the
window play with no host in it, the summary. Per round, in alternating order, `ansible-playbook -i inventories/lab
playbooks/health.yml` from each checkout given (its own roles and plugins, its own ansible.cfg), with the stand-in
nvidia-smi of the lab tests (k8sgpu_testlib.gpu_health_lab) reporting healthy GPUs; the PLAY RECAP must say changed=0
on every host. Wall time and the number of task results per run; the median per checkout.

Run against the lab (make lab), nothing else using it, from the checkout whose tests/support is wanted:
  PYTHONPATH=tests/support .venv/bin/python bench/health_record.py --rounds 6 BEFORE_CHECKOUT AFTER_CHECKOUT
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from k8sgpu_testlib.gpu_health_lab import install_standins, remove_standins
from k8sgpu_testlib.monitoring_lab import LAB_STATE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lab"))  # ansible_output: the lab tests' module
from ansible_output import recap  # noqa: E402


def run(tree: Path, vars_file: Path) -> tuple[float, int]:
    """One health.yml run from ``tree``: (wall seconds, task results); fails unless every host has changed=0."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(tree / "ansible.cfg"), "K8SGPU_LAB_STATE": str(LAB_STATE)}
    start = time.perf_counter()
    proc = subprocess.run(["ansible-playbook", "-i", "inventories/lab", "playbooks/health.yml", "-e", f"@{vars_file}"],
                          cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    hosts = recap(proc.stdout)
    if proc.returncode != 0 or not hosts or any(v["changed"] for v in hosts.values()):
        raise SystemExit(f"{tree}: health.yml rc {proc.returncode}, recap {hosts}:\n{proc.stdout[-3000:]}")
    return wall, sum(v["ok"] + v["skipped"] for v in hosts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts to compare (each with its own roles)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees]
    work = Path(tempfile.mkdtemp(prefix="k8sgpu-bench-health-"))
    vars_file = install_standins(work)
    times: dict[Path, list[float]] = {t: [] for t in trees}
    tasks: dict[Path, int] = {}
    try:
        for tree in trees:  # untimed: byte-compiled plugins, warm caches
            run(tree, vars_file)
        for i in range(args.rounds):
            for tree in trees if i % 2 == 0 else trees[::-1]:
                wall, tasks[tree] = run(tree, vars_file)
                times[tree].append(round(wall, 2))
                print(json.dumps({"round": i + 1, "tree": str(tree), "wall_s": round(wall, 2),
                                  "task_results": tasks[tree]}), flush=True)
    finally:
        remove_standins()
    print(json.dumps({str(t): {"runs_s": times[t], "median_s": statistics.median(times[t]), "task_results": tasks[t]}
                      for t in trees}, indent=1))


if __name__ == "__main__":
    main()
