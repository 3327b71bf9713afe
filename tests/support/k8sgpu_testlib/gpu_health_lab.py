"""The GPU health chain of the lab, shared by tests/lab/test_gpu_health.py, tests/lab/test_gpu_health_eda.py and
bench/gpu_health_alert.py.

The lab's GPU hosts have no GPU (the driver is installed, not loaded), so each host gets, under HDIR, stand-ins that
the role is pointed at by extra vars (standin_vars): an nvidia-smi that prints one of the gpu_health fixture XMLs
(tests/unit/fixtures/gpu_health/, the H100's healthy one when the file HDIR/fault is absent) and answers the
compute-apps query from HDIR/processes; a proc root with the driver's version file and an uptime; an empty sysfs root
(the fixture's GPU is the host's only one); a kernel log file (HDIR/kernel.log, empty: no Xid); a GPU reset command
that records its arguments in HDIR/resets and removes HDIR/fault (the fault cleared); and a CUDA driver library (built
here from C_SOURCE, loaded through gpu_health_cuda_library_dir) whose kernel launch adds the vectors on the CPU, so
the verify role's vectorAdd passes.

AlertChain: the DCGM stand-in -> Prometheus with the gpu_alerts role's rules -> Alertmanager -> ansible-rulebook
running the rulebook k8sgpu.nvidia.gpu_health (extensions/eda/rulebooks/gpu_health.yml) with an inventory of the
lab's plus the site's settings.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from k8sgpu_testlib.monitoring_lab import (
    CACHE, COUNTERS_CSV, GPU_NODES, LAB_STATE, ROOT, SHARED, LabProcess, Prometheus, Standin, exporter_pod_name,
    free_port, http, scrape_config, wait_for)

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _alert_rules  # noqa: E402 pylint: disable=wrong-import-position

HDIR = "/var/tmp/k8sgpu-gpu-health-test"
# A fault that a reboot clears: /run is a tmpfs in the lab's node containers, new at each (re)start.
RUN_FAULT = "/run/k8sgpu-gpu-health-fault"
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
# What the gpu_health role and node_maintenance leave on a Node.
TAINT = "nvidia.com/gpu-health"
RECORD = "k8sgpu.nvidia/gpu-health"
MAINTENANCE = ["k8sgpu.nvidia/cordoned-for-maintenance", "k8sgpu.nvidia/gpus-before-maintenance",
               "k8sgpu.nvidia/host-gpus-before-maintenance"]


NVIDIA_SMI = f"""#!/bin/sh
case "$*" in
  *--query-compute-apps*) cat {HDIR}/processes 2>/dev/null; exit 0 ;;
  *-q*) f=$(cat {RUN_FAULT} {HDIR}/fault 2>/dev/null | head -n 1); cat "{HDIR}/xml/${{f:-healthy.xml}}"; exit 0 ;;
esac
echo "stand-in nvidia-smi: $*" >&2
exit 2
"""
GPU_RESET = f"""#!/bin/sh
echo "$*" >> {HDIR}/resets
if [ -e {HDIR}/reset-fails ]; then echo "Unable to reset this GPU because it's being used by some other process" >&2; exit 255; fi
rm -f {HDIR}/fault
"""
# The CUDA driver API calls of module_utils/_cuda_driver.py; memory is the host's, the kernel c[i] = a[i] + b[i].
C_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
CUresult cuDeviceGetCount(int *c) { *c = 1; return 0; }
CUresult cuDeviceGet(int *d, int i) { *d = i; return 0; }
CUresult cuDeviceGetName(char *n, int len, int d) { strncpy(n, "NVIDIA H100 80GB HBM3", len - 1); n[len - 1] = 0; return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) { *v = a == 75 ? 9 : 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)(intptr_t)(d + 1); return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
CUresult cuCtxSetCurrent(void *c) { return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *i, unsigned n, int *o, void **v) { *m = (void *)1; return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { *f = (void *)1; return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) { void *x = malloc(n); if (!x) return 2; *p = (uint64_t)(uintptr_t)x; return 0; }
CUresult cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return 0; }
CUresult cuMemsetD32_v2(uint64_t p, unsigned v, size_t n) { uint32_t *q = (uint32_t *)(uintptr_t)p; for (size_t i = 0; i < n; i++) q[i] = v; return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, uint64_t s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *st, void **p, void **e) {
  float *a = (float *)(uintptr_t)*(uint64_t *)p[0], *b = (float *)(uintptr_t)*(uint64_t *)p[1];
  float *c = (float *)(uintptr_t)*(uint64_t *)p[2];
  int n = *(int32_t *)p[3];
  for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
  return 0;
}
"""


def node_sh(host: str, cmd: str, check: bool = True, timeout: int = 600) -> str:
    """`sh -c CMD` in the node container HOST (docker exec): its standard output; raises unless it exits 0."""
    cp = subprocess.run(["docker", "exec", host, "sh", "-c", cmd], capture_output=True, text=True, timeout=timeout,
                        check=False)
    if check and cp.returncode != 0:
        raise RuntimeError(f"{host}: {cmd}: {cp.stdout[-2000:]}{cp.stderr[-2000:]}")
    return cp.stdout


def install_standins(work: Path, hosts: list[str] | None = None) -> Path:
    """The stand-ins on the GPU hosts; the JSON file of the extra vars that point the role at them."""
    (work / "fake_cuda.c").write_text(C_SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(work / "libcuda.so.1"), str(work / "fake_cuda.c")],
                   check=True, capture_output=True)
    (work / "nvidia-smi").write_text(NVIDIA_SMI)
    (work / "gpu-reset").write_text(GPU_RESET)
    for host in hosts or GPU_NODES:
        node_sh(host, f"rm -rf {HDIR} && mkdir -p {HDIR}/xml {HDIR}/proc/driver/nvidia {HDIR}/sys {HDIR}/lib && "
                      f"printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\\n' "
                      f"> {HDIR}/proc/driver/nvidia/version && echo '100000.00 200000.00' > {HDIR}/proc/uptime && "
                      f": > {HDIR}/kernel.log")
        for src, dest in ((FIXTURES / "h100" / "nvidia-smi-q.xml", "xml/healthy.xml"),
                          *((p, f"xml/{p.name}") for p in (FIXTURES / "gpu_health").glob("*.xml")),
                          (work / "libcuda.so.1", "lib/libcuda.so.1"), (work / "nvidia-smi", "nvidia-smi"),
                          (work / "gpu-reset", "gpu-reset")):
            subprocess.run(["docker", "cp", str(src), f"{host}:{HDIR}/{dest}"], check=True, capture_output=True)
        node_sh(host, f"chmod 755 {HDIR}/nvidia-smi {HDIR}/gpu-reset")
    extra = {
        "gpu_health_nvidia_smi": f"{HDIR}/nvidia-smi", "gpu_health_proc_root": f"{HDIR}/proc",
        "gpu_health_sysfs_root": f"{HDIR}/sys", "gpu_health_kernel_log_file": f"{HDIR}/kernel.log",
        "gpu_health_reset_command": [f"{HDIR}/gpu-reset"],
        "gpu_health_cuda_library_dir": f"{HDIR}/lib",
        "driver_reboot": "report", "node_maintenance_drain_timeout": 60, "node_maintenance_drain_retry_delay": 1,
    }
    (work / "vars.json").write_text(json.dumps(extra))
    return work / "vars.json"


def remove_standins(hosts: list[str] | None = None) -> None:
    for host in hosts or GPU_NODES:
        node_sh(host, f"rm -rf {HDIR}", check=False)


def state(core: Any, name: str) -> tuple[bool, dict, dict | None]:
    """(cordoned, {taint key: value:effect}, the role's record)."""
    node = core.read_node(name)
    taints = {t.key: f"{t.value}:{t.effect}" for t in node.spec.taints or []}
    text = (node.metadata.annotations or {}).get(RECORD)
    return bool(node.spec.unschedulable), taints, json.loads(text) if text else None


def is_state(core: Any, name: str, record_state: str, cordoned: bool = True, tainted: bool = True) -> bool:
    """The Node cordoned (or not), tainted by the role (or not), its record in record_state."""
    unschedulable, taints, record = state(core, name)
    return (unschedulable == cordoned and (TAINT in taints) == tainted and record is not None
            and record["state"] == record_state)


def snapshot(core: Any, name: str) -> tuple[bool, list, dict]:
    node = core.read_node(name)
    return bool(node.spec.unschedulable), [t.to_dict() for t in node.spec.taints or []], dict(node.metadata.annotations or {})


def restore(core: Any, name: str, before: tuple[bool, list, dict]) -> None:
    """The Node as snapshot() found it: the role's taint and the role's and node_maintenance's annotations it did not
    have removed, its cordon as it was."""
    unschedulable, _taints, annotations = before
    node = core.read_node(name)
    taints = [t.to_dict() for t in node.spec.taints or [] if t.key != TAINT]
    ours = {k: None for k in [RECORD, *MAINTENANCE] if k not in annotations}
    core.patch_node(name, {"spec": {"unschedulable": unschedulable or None,
                                    "taints": [{k: v for k, v in t.items() if v is not None} for t in taints]},
                           "metadata": {"annotations": ours}})


# ---------------------------------------------------------------------------------------------------------------
# Alerts that act: the rulebook's chain
# ---------------------------------------------------------------------------------------------------------------
ALERTMANAGER_BIN = CACHE / "bin" / f"alertmanager-{os.environ.get('ALERTMANAGER_VERSION', 'v0.31.1')}" / "alertmanager"
REQUIREMENTS = ROOT / "requirements-eda.txt"
# The alerts the rulebook acts on, and the receiver its header documents.
GPU_HEALTH_ALERTS = "GPUXidError|GPUEccDoubleBitErrors|GPURowRemapFailure|GPUNodeGPUsNotReported"
# The lab's intervals: Prometheus scrapes and evaluates every second, Alertmanager waits 1 s before a group's first
# notification and 2 s between its updates; the rule GPUXidError has `for: 0s` (gpu_alerts_xid_for's default).
SCRAPE_S, EVALUATION_S, GROUP_WAIT_S, FOR_S = 1, 1, 1, 0
FLOOR_S = FOR_S + SCRAPE_S + EVALUATION_S + GROUP_WAIT_S
XID_79 = "<4>[99000.000000] NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
RUN_START = re.compile(r"^(\S+ \S+) - ansible_rulebook\.action\.run_playbook - DEBUG - Calling Ansible runner", re.M)
RUN_END = re.compile(r"^(\S+ \S+) - ansible_rulebook\.action\.run_playbook - DEBUG - Ansible runner rc: (\d+)", re.M)


def missing() -> str:
    """Why the chain cannot run here ("" when it can): ../shared's parts, Java for ansible-rulebook."""
    if not COUNTERS_CSV.exists() or not sorted((SHARED / "collections").glob("ansible-eda-*.tar.gz")):
        return "needs ../shared (dcgm-exporter's counters CSV, collections/ with the ansible.eda tarball)"
    return ""


def rulebook_venv() -> Path:
    """ansible-rulebook from requirements-eda.txt, as a user installs it, in a venv cached by the file's content."""
    if not shutil.which("java"):
        raise RuntimeError("ansible-rulebook needs Java 17 (drools_jpy): install openjdk-17-jre-headless")
    venv = CACHE / f"venv-rulebook-{hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]}"
    if not (venv / ".installed").exists():
        shutil.rmtree(venv, ignore_errors=True)
        python = shutil.which("python3.11") or shutil.which("python3")
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        res = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-r", str(REQUIREMENTS)],
                             capture_output=True, text=True, timeout=900, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"pip install -r {REQUIREMENTS}: {res.stderr[-3000:]}")
        (venv / ".installed").touch()
    return venv


def alert_rules(path: Path) -> Path:
    """The gpu_alerts role's rules at its defaults, from the filter the role renders them with."""
    defaults = yaml.safe_load((ROOT / "roles" / "gpu_alerts" / "defaults" / "main.yml").read_text())
    settings = {k[len("gpu_alerts_"):]: v for k, v in defaults.items() if "{{" not in str(v)}
    path.write_text(yaml.safe_dump({"groups": _alert_rules.gpu_alert_rules(settings)}, sort_keys=False))
    return path


def _stamp(text: str) -> float:
    day, millis = text.split(",")
    return time.mktime(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def rulebook_runs(log: Path) -> list[tuple[float, float | None, str | None]]:
    """(start, end, rc) of each playbook run (seconds since the epoch), from ansible-rulebook's debug log."""
    text = log.read_text(errors="replace")
    starts = [_stamp(m.group(1)) for m in RUN_START.finditer(text)]
    ends = [(_stamp(m.group(1)), m.group(2)) for m in RUN_END.finditer(text)]
    return [(s, *(ends[i] if i < len(ends) else (None, None))) for i, s in enumerate(starts)]


class AlertChain:
    """Stand-in exporter, Prometheus with the rules, Alertmanager, ansible-rulebook (start(); stop())."""

    def __init__(self, work: Path, site_vars: dict[str, Any], core: Any):
        self.work, self.site_vars, self.core = work, site_vars, core
        self.procs: list[Any] = []
        self.standin: Standin | None = None
        self.rulebook: LabProcess | None = None
        self.eda_port = 0

    def start(self) -> AlertChain:
        work = self.work
        venv = rulebook_venv()
        collections = work / "collections"
        tarball = sorted((SHARED / "collections").glob("ansible-eda-*.tar.gz"))[-1]
        res = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-galaxy"), "collection", "install", "--offline",
                              "-p", str(collections), str(tarball)], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(res.stdout + res.stderr)
        # The inventory the rulebook runs the playbook with: the lab's, and the site's settings in group_vars (all:
        # the playbook's first play reads k8sgpu_max_unavailable on localhost).
        inventory = work / "inventory"
        shutil.copytree(ROOT / "inventories" / "lab", inventory, dirs_exist_ok=True)
        (inventory / "group_vars" / "all" / "zz-site.yml").write_text(yaml.safe_dump(self.site_vars))

        self.standin = Standin(str(LAB_STATE / "kubeconfig"), work / "standin").start()
        eda_port, am_port = free_port(), free_port()
        self.eda_port = eda_port
        pods = {n: exporter_pod_name(self.core, n, "dcgm-exporter", "dcgm-exporter") for n in GPU_NODES}
        config = scrape_config(self.standin, pods, interval=f"{SCRAPE_S}s")
        config["global"].update(evaluation_interval=f"{EVALUATION_S}s", scrape_timeout=f"{SCRAPE_S}s")
        config["rule_files"] = [str(alert_rules(work / "gpu-alerts.rules.yml"))]
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]}
        am_config = {
            "route": {"receiver": "null", "routes": [{
                "receiver": "k8sgpu-gpu-health", "matchers": [f'alertname=~"{GPU_HEALTH_ALERTS}"'],
                "group_by": ["alertname", "node"], "group_wait": f"{GROUP_WAIT_S}s", "group_interval": "2s",
                "repeat_interval": "1h"}]},
            "receivers": [{"name": "null"}, {"name": "k8sgpu-gpu-health", "webhook_configs": [
                {"url": f"http://127.0.0.1:{eda_port}/alerts", "send_resolved": True}]}],
        }
        (work / "alertmanager.yml").write_text(yaml.safe_dump(am_config))
        (work / "eda-vars.yml").write_text(yaml.safe_dump({"gpu_health_eda_port": eda_port}))
        env = {
            # ansible-playbook, ansible-galaxy and the dependency collections: the collection's development venv.
            "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
            "ANSIBLE_COLLECTIONS_PATH": f"{collections}:{ROOT / 'collections'}",
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            "K8SGPU_LAB_STATE": str(LAB_STATE),
        }
        alertmanager = LabProcess("alertmanager-eda", [
            str(ALERTMANAGER_BIN), f"--config.file={work / 'alertmanager.yml'}", f"--storage.path={work / 'am'}",
            f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], work).start()
        self.procs.append(alertmanager)
        wait_for("Alertmanager", lambda: "OK" in http(f"http://127.0.0.1:{am_port}/-/ready"), 30, log=alertmanager.log)
        self.rulebook = LabProcess("ansible-rulebook", [
            str(venv / "bin" / "ansible-rulebook"), "-r", "k8sgpu.nvidia.gpu_health", "-i", str(inventory),
            "--vars", str(work / "eda-vars.yml"), "-vv"], work, env=env).start()
        self.procs.append(self.rulebook)
        wait_for("ansible-rulebook's alertmanager source", lambda: http(f"http://127.0.0.1:{eda_port}/") == "up", 120,
                 log=self.rulebook.log)
        prometheus = Prometheus(config, work / "prometheus", name="prometheus-eda").start()
        self.procs.append(prometheus)
        wait_for("Prometheus scraping the stand-in", prometheus.targets_up, 30)
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        if self.standin:
            self.standin.stop()

    def runs(self) -> list[tuple[float, float | None, str | None]]:
        return rulebook_runs(self.rulebook.log)

    def idle(self) -> bool:
        """Every playbook run the rulebook started has ended."""
        return all(end for _start, end, _rc in self.runs())

    def inject(self, node: str, gpus: tuple[int, ...] = (0,)) -> float:
        """Xid 79 on the Node's GPUs in the exporter, and in the host's kernel log; the time."""
        node_sh(node, f"echo \"{XID_79}\" > {HDIR}/kernel.log")
        for gpu in gpus:
            self.standin.set("DCGM_FI_DEV_XID_ERRORS", 79, node=node, gpu=gpu)
        return time.time()

    def clear(self, node: str, gpus: tuple[int, ...] = (0,)) -> float:
        """The fault gone: the series back to 0, the kernel log emptied (what a reboot does); the time."""
        node_sh(node, f": > {HDIR}/kernel.log")
        for gpu in gpus:
            self.standin.set("DCGM_FI_DEV_XID_ERRORS", 0, node=node, gpu=gpu)
        return time.time()
