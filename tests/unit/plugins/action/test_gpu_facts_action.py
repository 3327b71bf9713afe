"""The token that tells one ansible-playbook run from another (plugins/action/gpu_facts.py): the same in the worker
processes a run forks, another in the next run. (Reuse itself: tests/lab/test_gpu_facts_reuse.py on the lab's
hosts, and TestReuse in module_utils/test_nvidia_smi.py.)"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

from ansible_collections.k8sgpu.nvidia.plugins.action.gpu_facts import run_token


def _child(queue):
    queue.put(run_token())


def test_a_forked_worker_has_the_runs_token():
    ctx = multiprocessing.get_context("fork")  # how ansible-playbook starts its workers
    queue = ctx.Queue()
    worker = ctx.Process(target=_child, args=(queue,))
    worker.start()
    worker.join(30)
    assert queue.get(timeout=5) == run_token()


def test_another_run_has_another_token():
    probe = "from ansible_collections.k8sgpu.nvidia.plugins.action.gpu_facts import run_token; print(run_token())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    other = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                           env=env).stdout.strip()
    assert len(other) == len(run_token()) == 16
    assert other != run_token()
