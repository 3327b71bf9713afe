"""Benchmark: site.yml with nothing to change, beside `ansible -m ping` and the same checks done by hand.

In each round, one after the other on the same inventory:
  (ping)  ansible all -i INVENTORY -m ansible.builtin.ping: Ansible's floor for reaching every host;
  (hand)  what an operator types to check the same things: `kubectl get nodes -o json` and
          `kubectl get daemonsets -A -o json` against the inventory's cluster, and `nvidia-smi -L` on each host of
          the gpu_nodes group through its connection (docker exec for community.docker.docker, directly for local;
          a host without nvidia-smi, as the lab's, is timed all the same and said so);
  (site)  ansible-playbook site.yml -i INVENTORY: everything already in place; the PLAY RECAP must say changed=0
          on every host (--allow-changed to record instead of failing), and the task count is recorded, with the
          controller CPU seconds of its process tree (getrusage of the children), which other load on the machine
          barely moves: compare those where the machine is busy.
Before the first round, site.yml runs once untimed (--no-converge to skip it) so that the rounds find nothing to do,
and the collection's plugins are byte-compiled (as a controller has them after its first run without
PYTHONDONTWRITEBYTECODE).
The ratio site/ping is the number issue 24 sets a goal on (at most 4 in the lab).

Run against the lab (make lab, after site.yml has run once):
  .venv/bin/python bench/site_nochange.py --rounds 3
On the GPU machine, tests/gpu/k8s-node.sh runs it with its own inventory and variables (one round).
The numbers go to stdout and, with --json FILE, to FILE.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of cmd; the controller CPU seconds it used (its process tree: Ansible's workers, the docker
    and kubectl clients it starts) are left in timed.cpu, a measure that other load on the machine barely moves."""
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    timed.cpu = children_cpu() - cpu
    return time.perf_counter() - start, proc


def recap(output: str) -> dict[str, dict[str, int]]:
    hosts = {}
    for line in output.splitlines():
        m = RECAP.match(line.strip())
        if m:
            hosts[m.group(1)] = dict(zip(("ok", "changed", "unreachable", "failed", "skipped"),
                                         map(int, m.groups()[1:])))
    return hosts


def inventory(args) -> dict:
    proc = subprocess.run(["ansible-inventory", "-i", args.inventory, "--list", *args.extra],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def gpu_hosts(inv: dict) -> list[tuple[str, dict]]:
    hostvars = inv.get("_meta", {}).get("hostvars", {})
    return [(h, hostvars.get(h, {})) for h in inv.get("gpu_nodes", {}).get("hosts", [])]


def by_hand(hosts: list[tuple[str, dict]], kubeconfig: str | None) -> tuple[float, list[str]]:
    """The operator's checks, in sequence as typed; returns wall seconds and notes."""
    notes = []
    kubectl = ["kubectl"] + (["--kubeconfig", kubeconfig] if kubeconfig else [])
    start = time.perf_counter()
    for what in (["get", "nodes", "-o", "json"], ["get", "daemonsets", "-A", "-o", "json"]):
        proc = subprocess.run(kubectl + what, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise SystemExit(f"by hand: kubectl {' '.join(what)} failed: {proc.stderr.strip()}")
    for host, hv in hosts:
        conn = hv.get("ansible_connection", "ssh")
        if conn == "community.docker.docker":
            cmd = ["docker", "exec", hv.get("ansible_host", host), "sh", "-c", "nvidia-smi -L"]
        elif conn == "local":
            cmd = ["sh", "-c", "nvidia-smi -L"]
        else:
            cmd = ["ssh", hv.get("ansible_host", host), "nvidia-smi -L"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 127:
            notes.append(f"{host}: no nvidia-smi (timed all the same)")
        elif proc.returncode:
            notes.append(f"{host}: nvidia-smi -L exited {proc.returncode}")
    return time.perf_counter() - start, notes


def summary(values: list[float]) -> dict:
    return {"median_s": round(statistics.median(values), 2), "min_s": round(min(values), 2),
            "max_s": round(max(values), 2), "runs": [round(v, 2) for v in values]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default="inventories/lab")
    parser.add_argument("-e", "--extra-vars", action="append", default=[],
                        help="passed to ansible and ansible-playbook as -e (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-converge", action="store_true", help="skip the untimed site.yml run before the rounds")
    parser.add_argument("--allow-changed", action="store_true", help="record changed tasks instead of failing")
    parser.add_argument("--kubeconfig", default=os.environ.get("K8SGPU_KUBECONFIG"),
                        help="for the by-hand kubectl (default: K8SGPU_KUBECONFIG, else the lab's)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    args.extra = [x for e in args.extra_vars for x in ("-e", e)]
    lab_state = Path(os.environ.get("K8SGPU_LAB_STATE", ROOT / ".lab"))
    kubeconfig = args.kubeconfig or (str(lab_state / "kubeconfig") if (lab_state / "kubeconfig").exists() else None)
    if not shutil.which("kubectl"):
        raise SystemExit("kubectl is not on PATH (the lab's is in $K8SGPU_LAB_STATE/env)")

    inv = inventory(args)
    hosts = gpu_hosts(inv)
    ping_cmd = ["ansible", "all", "-i", args.inventory, "-m", "ansible.builtin.ping", *args.extra]
    site_cmd = ["ansible-playbook", "-i", args.inventory, "site.yml", *args.extra]
    # The collection's plugins byte-compiled, as a user's controller has them after its first run: this machine
    # (and the GPU VM) set PYTHONDONTWRITEBYTECODE=1, under which every task would compile the filter and action
    # plugins from source again (about 0.3 s of a lab run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "plugins")], check=True,
                   stdout=subprocess.DEVNULL)
    if not args.no_converge:
        proc = timed(site_cmd)[1]
        if proc.returncode:
            sys.stdout.write(proc.stdout[-4000:])
            raise SystemExit(f"the converging site.yml run failed (rc {proc.returncode})")

    ping, hand, site, site_cpu, tasks, changed, notes = [], [], [], [], [], [], set()
    for n in range(args.rounds):
        secs, proc = timed(ping_cmd)
        if proc.returncode:
            raise SystemExit(f"round {n + 1}: ansible -m ping failed:\n{proc.stdout[-2000:]}")
        ping.append(secs)
        secs, hand_notes = by_hand(hosts, kubeconfig)
        hand.append(secs)
        notes.update(hand_notes)
        secs, proc = timed(site_cmd)
        rec = recap(proc.stdout)
        if proc.returncode or not rec:
            sys.stdout.write(proc.stdout[-4000:])
            raise SystemExit(f"round {n + 1}: site.yml failed (rc {proc.returncode})")
        site.append(secs)
        site_cpu.append(timed.cpu)
        tasks.append(sum(h["ok"] + h["skipped"] for h in rec.values()))
        changed.append({h: r["changed"] for h, r in rec.items() if r["changed"]})
        if changed[-1] and not args.allow_changed:
            raise SystemExit(f"round {n + 1}: site.yml changed something on a run that should change nothing: "
                             f"{changed[-1]} (output above; --allow-changed records it instead)")
        print(f"round {n + 1}: ping {ping[-1]:.1f} s, by hand {hand[-1]:.1f} s, site.yml {site[-1]:.1f} s "
              f"({site_cpu[-1]:.1f} controller CPU-s, {tasks[-1]} task results, changed {changed[-1] or 0})",
              flush=True)

    result = {
        "inventory": args.inventory, "hosts": len(inv.get("_meta", {}).get("hostvars", {})),
        "gpu_hosts": len(hosts), "machine": f"{platform.node()} {os.cpu_count()} CPUs",
        "ping": summary(ping), "by_hand": summary(hand), "site": summary(site),
        "site_controller_cpu": summary(site_cpu),
        "site_over_ping": round(statistics.median(site) / statistics.median(ping), 1),
        "task_results": tasks, "changed": changed, "notes": sorted(notes),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
