"""Helper programs shared by the collection's tests and its benchmarks (bench/); not part of the collection.

Modules:
    monitoring_lab       the lab's monitoring chain (DCGM stand-in, Prometheus, prometheus-adapter) as host processes
    dcgm_standin         the stand-in DCGM exporter program monitoring_lab starts
    scale_from_zero      FakeAutoscaler: a GPU node pool that scales from zero, with kwok Nodes
    lab_node             node_inventory(): the inventory of one lab node container as the GPU host
    gke_contract_server  an HTTP server that answers the GKE v1 API, parsing requests into google-cloud-container types
    k8s_api              ignore_404(): a Kubernetes client call where a 404 (already gone) is success
    gpu_health_lab       the GPU health stand-ins on the lab's GPU hosts, and the alert chain to ansible-rulebook
    control_plane        the lab's control-plane processes stopped, paused and started again (kwok.yaml's commands)
    roles                which roles are private, and the prefix of each role's variables

How it is imported (``from k8sgpu_testlib.scale_from_zero import FakeAutoscaler``), without sys.path edits in the
files that use it:
    pytest   pytest.ini at the checkout's root sets ``pythonpath = tests/support``;
    bench/   the scripts run with the directory on Python's path, from the checkout's root:
             ``PYTHONPATH=tests/support .venv/bin/python bench/<script>.py`` (bench/README.md).
The programs with a command line (monitoring_lab, dcgm_standin, gke_contract_server) also run by their path, e.g.
``python tests/support/k8sgpu_testlib/monitoring_lab.py up``; they import nothing from this package.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
"""The checkout's root."""

LAB_STATE = Path(os.environ.get("K8SGPU_LAB_STATE", ROOT / ".lab"))
"""The lab's state directory (kubeconfig, pid files), as lab/lab.sh writes it."""


def lab_module(name: str) -> ModuleType:
    """The lab's own Python module lab/<name>.py (for example ``lab_module("topology").node``), loaded by its path
    once and kept in sys.modules under ``k8sgpu_lab.<name>``."""
    key = f"k8sgpu_lab.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, ROOT / "lab" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
