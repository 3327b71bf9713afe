"""Benchmark: site.yml with nothing to change on 2 lab GPU hosts and on N (default 20), side by side (issue 24 item 3).

The lab must have N GPU hosts first, converged: site.yml once on the lab, then `lab/lab.sh scale N --from-hosts`
(node containers k8sgpu-lab-gpu-3..N, copies of gpu-1 and gpu-2 as site.yml left them, and their kwok Nodes; without
--from-hosts each extra would build the driver's module with DKMS in the untimed run below). The 2-host inventory is
inventories/lab as shipped, the N-host one is generated into a temporary directory from it (the same group_vars,
hosts.yml with gpu-1..N in gpu_nodes; inventories/lab is not changed). Then:
  converge  ansible-playbook site.yml once on the N hosts, untimed (the extra hosts' first run: their Nodes' labels);
  floors    the machine's busy CPU while nothing runs (N node containers up), and the CPU one `docker exec` of
            `true` and of `python3 -c pass` on gpu-1 costs (client and whole machine): what a remote task costs at
            least before Ansible's own work;
  rounds    per round, the 2-host and the N-host inventory one after the other (which goes first alternates, so a
            load change on the shared machine hits both): `ansible all -m ping`, then site.yml, which must report
            changed=0 on every host (--allow-changed records instead). Each site.yml run records wall time, CPU time
            of ansible-playbook and its children (the controller: the forks and their `docker exec` clients), and
            the whole machine's busy CPU time from /proc/stat (the node containers' Python runs under the Docker
            daemon, not under ansible-playbook; other work on the machine is counted too).
  profile   with --profile, one more run of each with ansible.posix.profile_tasks (not counted in the rounds): each
            task's time on 2 and N hosts and the extra cost per extra host.
growth = (median site.yml on N - median on 2) / median on 2; issue 24 asks for at most 20 % at the default forks
(ansible.cfg: forks = 50).

Extra Nodes disturb other users of the lab: hold its lock for as long as they exist and always scale back, e.g.
  flock /tmp/k8sgpu/lab.lock bash -c 'trap "lab/lab.sh scale 2" EXIT; ansible-playbook site.yml -i inventories/lab &&
    lab/lab.sh scale 20 --from-hosts &&
    PYTHONPATH=tests/support .venv/bin/python bench/site_scale.py --rounds 2 --profile --json bench/output/site_scale.json'
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
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_nochange import ROOT, recap, summary  # noqa: E402  pylint: disable=wrong-import-position

LAB_NAME = os.environ.get("K8SGPU_LAB_NAME", "k8sgpu-lab")
BASE_HOSTS = 2
# Runs an Ansible command in this Python and writes, at its exit, the CPU seconds of the main process (the strategy's
# loop: variables, templating and forking for every host and task, one after the other) and of its children (the
# forked workers with their `docker exec` clients) to $K8SGPU_BENCH_RUSAGE.
RUSAGE_WRAPPER = """
import atexit, os, resource, runpy, shutil, sys
out, pid = os.environ["K8SGPU_BENCH_RUSAGE"], os.getpid()
def dump():
    if os.getpid() == pid:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(out, "w") as f:
            f.write(f"{me.ru_utime + me.ru_stime} {kids.ru_utime + kids.ru_stime}")
atexit.register(dump)
prog = shutil.which(sys.argv[1])
sys.argv = [prog] + sys.argv[2:]
runpy.run_path(prog, run_name="__main__")
"""
# profile_tasks' summary line: "<task name> ---...--- 1.23s"
PROFILE_LINE = re.compile(r"^(.*\S)\s+-{3,}\s+(\d+\.\d+)s$")


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (all CPUs, /proc/stat), 0 where there is none."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run(cmd: list[str], env: dict) -> dict:
    """Run the Ansible command cmd; wall seconds, CPU seconds of cmd and its children (and of its main process and
    workers apart), the machine's busy CPU seconds, the process."""
    with tempfile.NamedTemporaryFile(prefix="k8sgpu-rusage-") as usage:
        env = dict(env, K8SGPU_BENCH_RUSAGE=usage.name)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy = machine_busy()
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", RUSAGE_WRAPPER, *cmd], cwd=ROOT, env=env, capture_output=True,
                              text=True, check=False)
        wall = time.perf_counter() - start
        busy = machine_busy() - busy
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        main_cpu, workers_cpu = (float(x) for x in (Path(usage.name).read_text().split() or [0, 0]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "main_cpu": main_cpu, "workers_cpu": workers_cpu, "busy": busy, "proc": proc}


def write_inventory(tmp: Path, hosts: int, connection: str | None = None) -> Path:
    """inventories/lab with gpu-1..hosts in gpu_nodes, under tmp; the same group_vars and host_vars (and connection,
    unless given). An extra host gets the host_vars of the lab host of its Debian suite, which lab.sh scale copies
    (gpu-3, gpu-5...: gpu-1's; gpu-4, gpu-6...: gpu-2's, such as driver_branch "535" for Debian 13)."""
    src = ROOT / "inventories" / "lab"
    dst = tmp / f"lab-{hosts}-{(connection or 'default').rsplit('.', 1)[-1]}"
    shutil.copytree(src / "group_vars", dst / "group_vars")
    shutil.copytree(src / "host_vars", dst / "host_vars")
    for i in range(BASE_HOSTS + 1, hosts + 1):
        twin = dst / "host_vars" / f"{LAB_NAME}-gpu-{2 - i % 2}.yml"
        if twin.exists():
            shutil.copyfile(twin, dst / "host_vars" / f"{LAB_NAME}-gpu-{i}.yml")
    text = (src / "hosts.yml").read_text()
    names = [f"{LAB_NAME}-gpu-{i}" for i in range(1, BASE_HOSTS + 1)]
    conn = "ansible_connection: community.docker.docker"
    if not all(n in text for n in names) or conn not in text:
        raise SystemExit(f"inventories/lab/hosts.yml no longer lists {names} with {conn}: update bench/site_scale.py")
    if connection:
        text = text.replace(conn, f"ansible_connection: {connection}")
    extra = "".join(f"        {LAB_NAME}-gpu-{i}:\n" for i in range(BASE_HOSTS + 1, hosts + 1))
    at = text.index(f"        {names[-1]}:")
    eol = text.index("\n", at) + 1
    (dst / "hosts.yml").write_text(text[:eol] + extra + text[eol:])
    return dst


def check_lab(hosts: int) -> None:
    names = [f"{LAB_NAME}-gpu-{i}" for i in range(1, hosts + 1)]
    proc = subprocess.run(["docker", "inspect", "-f", "{{.Name}} {{.State.Running}}", *names],
                          capture_output=True, text=True, check=False)
    running = {line.split()[0].lstrip("/") for line in proc.stdout.splitlines() if line.endswith(" true")}
    missing = [n for n in names if n not in running]
    if missing:
        raise SystemExit(f"GPU host containers not running: {', '.join(missing)}. Run site.yml on the lab, then "
                         f"`lab/lab.sh scale {hosts} --from-hosts` first (inside the lab's lock; scale back with "
                         "`lab/lab.sh scale 2`)")


def floors(host: str, calls: int = 10, idle_s: float = 5.0) -> dict:
    """What one GPU host costs the machine apart from Ansible: the busy CPU of the whole machine while nothing runs
    (the node containers' own systemd), and the CPU one `docker exec` costs: the client (a child of this process) and
    the whole machine, for `true` and for a bare `python3 -c pass` in the container."""
    busy = machine_busy()
    time.sleep(idle_s)
    out = {"idle_machine_cpu_pct": round(100 * (machine_busy() - busy) / (idle_s * (os.cpu_count() or 1)), 1)}
    for what, cmd in (("docker_exec_true", ["true"]), ("docker_exec_python3", ["python3", "-c", "pass"])):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy = machine_busy()
        start = time.perf_counter()
        for _call in range(calls):
            subprocess.run(["docker", "exec", "-i", host, *cmd], stdin=subprocess.DEVNULL, capture_output=True,
                           check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        client = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out[what] = {"wall_ms": round(1000 * wall / calls), "client_cpu_ms": round(1000 * client / calls),
                     "machine_cpu_ms": round(1000 * (machine_busy() - busy) / calls)}
    return out


def site_round(label: str, inv: Path | str, env: dict, args) -> dict:
    ping = run(["ansible", "all", "-i", str(inv), "-m", "ansible.builtin.ping"], env)
    if ping["proc"].returncode:
        raise SystemExit(f"{label}: ansible -m ping failed:\n{ping['proc'].stdout[-2000:]}")
    site = run(["ansible-playbook", "-i", str(inv), "site.yml"], env)
    rec = recap(site["proc"].stdout)
    if site["proc"].returncode or not rec:
        sys.stdout.write(site["proc"].stdout[-4000:])
        raise SystemExit(f"{label}: site.yml failed (rc {site['proc'].returncode})")
    changed = {h: r["changed"] for h, r in rec.items() if r["changed"]}
    if changed and not args.allow_changed:
        sys.stdout.write(site["proc"].stdout[-4000:])
        raise SystemExit(f"{label}: site.yml changed something on a run that should change nothing: {changed}")
    return {"ping": ping["wall"], "site": site["wall"], "cpu": site["cpu"], "busy": site["busy"],
            "main_cpu": site["main_cpu"], "workers_cpu": site["workers_cpu"],
            "hosts": len(rec), "task_results": sum(r["ok"] + r["skipped"] for r in rec.values()),
            "changed": changed}


def profile(inv: Path | str, env: dict) -> tuple[float, dict[str, float]]:
    env = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all")
    res = run(["ansible-playbook", "-i", str(inv), "site.yml"], env)
    if res["proc"].returncode:
        sys.stdout.write(res["proc"].stdout[-4000:])
        raise SystemExit(f"profiled site.yml on {inv} failed")
    tasks: dict[str, float] = {}
    out = res["proc"].stdout
    for line in out[out.rfind("=" * 20):].splitlines():
        m = PROFILE_LINE.match(line.strip())
        if m:
            name = m.group(1)
            while name in tasks:  # the same task name in two plays
                name += " (again)"
            tasks[name] = float(m.group(2))
    return res["wall"], tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-hosts", type=int, default=20, help="GPU hosts of the large inventory (default 20)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-converge", action="store_true", help="skip the untimed site.yml run on the N hosts")
    parser.add_argument("--allow-changed", action="store_true", help="record changed tasks instead of failing")
    parser.add_argument("--profile", action="store_true", help="one profile_tasks run of each inventory at the end")
    parser.add_argument("--variant-connection", metavar="PLUGIN",
                        help="also measure both host counts with this connection for the GPU hosts (e.g. "
                             "community.docker.docker_api), in generated inventories; reported apart")
    parser.add_argument("--variant-forks", type=int, metavar="N", action="append", default=[],
                        help="also measure both host counts with ANSIBLE_FORKS=N (repeatable); reported apart")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if args.gpu_hosts <= BASE_HOSTS:
        raise SystemExit(f"--gpu-hosts must be more than {BASE_HOSTS}")
    check_lab(args.gpu_hosts)
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    env.setdefault("K8SGPU_LAB_STATE", str(ROOT / ".lab"))
    forks = subprocess.run(["ansible-config", "dump", "--only-changed"], cwd=ROOT, env=env, capture_output=True,
                           text=True, check=False).stdout
    forks_m = re.search(r"^DEFAULT_FORKS\(.*\) = (\d+)", forks, re.M)

    with tempfile.TemporaryDirectory(prefix="k8sgpu-site-scale-") as tmp:
        big = write_inventory(Path(tmp), args.gpu_hosts)
        invs = {BASE_HOSTS: "inventories/lab", args.gpu_hosts: big}
        if not args.no_converge:
            conv = run(["ansible-playbook", "-i", str(big), "site.yml"], env)
            if conv["proc"].returncode:
                sys.stdout.write(conv["proc"].stdout[-4000:])
                raise SystemExit(f"the converging site.yml run on {args.gpu_hosts} hosts failed")
            print(f"converge on {args.gpu_hosts} GPU hosts: {conv['wall']:.1f} s (untimed in the results)", flush=True)
        floor = floors(f"{LAB_NAME}-gpu-1")
        print(f"floors with {args.gpu_hosts} GPU hosts up: {floor}", flush=True)
        sets = {(n, "default"): (inv, env) for n, inv in invs.items()}
        if args.variant_connection:
            for n in invs:
                sets[(n, args.variant_connection)] = (write_inventory(Path(tmp), n, args.variant_connection), env)
        for forks_n in args.variant_forks:
            for n, inv in invs.items():
                sets[(n, f"forks={forks_n}")] = (inv, dict(env, ANSIBLE_FORKS=str(forks_n)))
        rounds: dict[tuple, list[dict]] = {k: [] for k in sets}
        for r in range(args.rounds):
            order = list(sets) if r % 2 == 0 else list(sets)[::-1]
            for key in order:
                n, conn = key
                res = site_round(f"round {r + 1}, {n} GPU hosts ({conn})", *sets[key], args)
                rounds[key].append(res)
                print(f"round {r + 1}, {n} GPU hosts, {conn}: ping {res['ping']:.2f} s, site.yml "
                      f"{res['site']:.2f} s (CPU: controller {res['cpu']:.1f} s of which main process "
                      f"{res['main_cpu']:.1f} s; machine {res['busy']:.1f} s; {res['task_results']} task results, "
                      f"changed {res['changed'] or 0})", flush=True)
        prof = {}
        if args.profile:
            for n, inv in invs.items():
                prof[n] = profile(inv, env)
                print(f"profile_tasks on {n} GPU hosts: {prof[n][0]:.1f} s", flush=True)

    ncpu = os.cpu_count() or 1
    result = {"machine": f"{platform.node()} {ncpu} CPUs", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "forks": int(forks_m.group(1)) if forks_m else "ansible-core default (5)", "floors": floor,
              "inventories": {}}
    for (n, conn), res in rounds.items():
        wall = [x["site"] for x in res]
        key = str(n) if conn == "default" else f"{n} {conn}"
        result["inventories"][key] = {
            "gpu_hosts": n, "variant": conn if conn != "default"
            else "inventories/lab's connection (community.docker.docker), ansible.cfg's forks",
            "inventory": "inventories/lab" if (n, conn) == (BASE_HOSTS, "default")
            else f"generated: inventories/lab + gpu-3..{n}",
            "ping": summary([x["ping"] for x in res]), "site": summary(wall),
            "site_cpu_controller_s": [round(x["cpu"], 1) for x in res],
            "site_cpu_main_process_s": [round(x["main_cpu"], 1) for x in res],
            "site_cpu_workers_s": [round(x["workers_cpu"], 1) for x in res],
            "site_cpu_machine_s": [round(x["busy"], 1) for x in res],
            "machine_cpu_busy_pct": [round(100 * x["busy"] / (x["site"] * ncpu)) for x in res],
            "recap_hosts": res[0]["hosts"], "task_results": [x["task_results"] for x in res],
            "changed": [x["changed"] for x in res],
        }

    def growth(conn: str) -> tuple[float, float]:
        small, large = (statistics.median(x["site"] for x in rounds[(n, conn)]) for n in (BASE_HOSTS, args.gpu_hosts))
        return round(100 * (large - small) / small, 1), round((large - small) / (args.gpu_hosts - BASE_HOSTS), 3)

    result["growth_pct"], result["per_extra_host_s"] = growth("default")
    result["variants"] = {}
    for conn in dict.fromkeys(c for _n, c in rounds if c != "default"):
        pct, per_host = growth(conn)
        result["variants"][conn] = {"growth_pct": pct, "per_extra_host_s": per_host}
    if prof:
        (w_small, t_small), (w_large, t_large) = prof[BASE_HOSTS], prof[args.gpu_hosts]
        extra = args.gpu_hosts - BASE_HOSTS
        rows = [{"task": t, "s_small": t_small.get(t, 0.0), "s_large": t_large.get(t, 0.0),
                 "per_extra_host_ms": round(1000 * (t_large.get(t, 0.0) - t_small.get(t, 0.0)) / extra)}
                for t in dict.fromkeys([*t_large, *t_small])]
        rows.sort(key=lambda x: x["s_large"] - x["s_small"], reverse=True)
        result["profile"] = {"wall_small_s": round(w_small, 2), "wall_large_s": round(w_large, 2),
                             "tasks_by_growth": rows}
    print(json.dumps({k: v for k, v in result.items() if k != "profile"}, indent=2))
    if prof:
        print("profile_tasks, tasks that grew most (s on 2 hosts -> s on N hosts, ms per extra host):")
        for row in result["profile"]["tasks_by_growth"][:25]:
            print(f"  {row['s_small']:6.2f} -> {row['s_large']:6.2f}  {row['per_extra_host_ms']:5d} ms  {row['task']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
