"""Benchmark: the host roles (driver + container_toolkit) against a plain apt-get, side by side in one run.

  (ours)  ansible-playbook with k8sgpu.nvidia.driver and k8sgpu.nvidia.container_toolkit on N fresh nodes
          (forks = N), then the same playbook again (the idempotent re-run: wall time and changed count)
  (apt)   on N other fresh nodes, in parallel, the guide's shell steps: add the same package sources and
          keys, apt-get update, apt-get install of the same package set, nvidia-ctk runtime configure
          --runtime=docker --set-as-default, systemctl restart docker

Run against the lab (make lab): .venv/bin/python bench/host_roles.py --nodes 3
Fresh nodes are the lab's Debian 12 image with systemd and Debian's docker.io installed beforehand (not
timed), on the lab network, with apt going through the lab's apt-cacher-ng whose cache is warmed first (a
throwaway node installs the package set once, not timed), so both sides fetch from the same warm cache.
Both sides build the NVIDIA kernel module with DKMS for the Debian kernel: most of the time is that build.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))  # ansible_output is the lab tests' module, not yet k8sgpu_testlib's
from ansible_output import recap  # noqa: E402
LAB_STATE = Path(os.environ.get("K8SGPU_LAB_STATE", ROOT / ".lab"))
IMAGE = "k8sgpu-lab/debian:bookworm"
NETWORK = "k8sgpu-lab"
PACKAGES = ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced", "gcc",
            "linux-headers-amd64", "nvidia-container-toolkit=1.20.1-1", "nvidia-container-toolkit-base=1.20.1-1"]
SYSTEMD_FLAGS = ["--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--security-opt", "seccomp=unconfined",
                 "--security-opt", "apparmor=unconfined", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                 "--tmpfs", "/tmp", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro", "-e", "container=docker"]

PLAYBOOK = """
- name: Host roles
  hosts: all
  gather_facts: false
  roles:
    - role: k8sgpu.nvidia.driver
    - role: k8sgpu.nvidia.container_toolkit
"""

# The guide's steps, with the same sources the roles add (Debian non-free, the toolkit mirror).
APT_SCRIPT = r"""
set -euo pipefail
echo 'Acquire::http::Proxy "{proxy}";' > /etc/apt/apt.conf.d/90proxy
cat > /etc/apt/sources.list.d/nvidia-debian.sources <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
mkdir -p /etc/apt/keyrings
curl -fsSL --noproxy '*' {mirror}/gpgkey -o /etc/apt/keyrings/nvidia-container-toolkit.asc
echo 'Acquire::http::Proxy::{mirror_host} "DIRECT";' > /etc/apt/apt.conf.d/91mirror
cat > /etc/apt/sources.list.d/nvidia-container-toolkit.sources <<EOF
Types: deb
URIs: {mirror}/stable/deb/amd64
Suites: /
Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc
EOF
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {download_only} {packages} >/tmp/apt.log 2>&1
[ -z "{download_only}" ] || exit 0
nvidia-ctk runtime configure --runtime=docker --set-as-default >/dev/null 2>&1
systemctl restart docker
"""


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def must(cmd: list[str], **kw) -> str:
    cp = sh(cmd, **kw)
    if cp.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd[:6])}... failed (exit {cp.returncode}):\n{cp.stdout[-2000:]}{cp.stderr[-2000:]}")
    return cp.stdout


def _container_cpu_ns(name: str) -> int:
    """CPU time a node container has used so far (its cgroup: v1 cpuacct or v2 cpu.stat), in ns."""
    cid = must(["docker", "inspect", "-f", "{{.Id}}", name]).strip()
    for path in (f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage",
                 f"/sys/fs/cgroup/docker/{cid}/cpu.stat", f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpuacct.usage"):
            return int(text)
        return int(re.search(r"usage_usec (\d+)", text).group(1)) * 1000
    sys.exit(f"bench: no cgroup CPU accounting found for {name}")


class CpuMeter:
    """CPU seconds spent while a side runs: in its node containers, in this process's children (the
    controller: ansible-playbook and its forks, or the docker exec clients), and on the whole machine."""

    def __init__(self, nodes: list[str]):
        self.nodes = nodes

    @staticmethod
    def _machine_busy_s() -> float:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def _sample(self) -> tuple[float, float, float]:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (sum(_container_cpu_ns(n) for n in self.nodes) / 1e9, kids.ru_utime + kids.ru_stime,
                self._machine_busy_s())

    def __enter__(self) -> "CpuMeter":
        self.start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        end = self._sample()
        nodes, controller, machine = (round(b - a, 1) for a, b in zip(self.start, end))
        self.result = {"nodes_cpu_s": nodes, "controller_cpu_s": controller,
                       "other_cpu_s": round(machine - nodes - controller, 1), "machine_cpu_s": machine}


def start_node(name: str) -> None:
    sh(["docker", "rm", "-f", name])
    must(["docker", "run", "-d", "--name", name, "--hostname", name, "--network", NETWORK,
          "--label", "k8sgpu.bench=host-roles", *SYSTEMD_FLAGS, IMAGE, "/lib/systemd/systemd"])
    for _attempt in range(60):
        state = sh(["docker", "exec", name, "systemctl", "is-system-running"]).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    sys.exit(f"bench: {name} did not boot")


def prepare_node(name: str, proxy: str) -> None:
    """Untimed: systemd up, apt through the lab proxy, Debian's docker.io installed and running."""
    start_node(name)
    must(["docker", "exec", name, "bash", "-c",
          f"echo 'Acquire::http::Proxy \"{proxy}\";' > /etc/apt/apt.conf.d/90proxy && apt-get update -qq && "
          "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null "
          "&& systemctl is-active docker"])


def apt_node(name: str, proxy: str, mirror: str, download_only: bool = False) -> float:
    host = re.sub(r"^https?://([^:/]+).*", r"\1", mirror)
    script = APT_SCRIPT.format(proxy=proxy, mirror=mirror, mirror_host=host, packages=" ".join(PACKAGES),
                               download_only="--download-only" if download_only else "")
    t0 = time.monotonic()
    must(["docker", "exec", "-i", name, "bash"], input=script)
    return time.monotonic() - t0


def run_roles(names: list[str], proxy: str, mirror: str, playbook: Path) -> tuple[float, dict, str]:
    inv = ",".join(names) + ","
    extra = {"k8sgpu_apt_proxy": proxy, "driver_no_gpu": "install", "container_toolkit_repo_url": mirror,
             "container_toolkit_repo_proxy": "DIRECT",
             # The lab serves its key over http: pinned by the fingerprint of the lab's own copy, as
             # inventories/lab does (container_toolkit refuses an http:// key URL without one).
             "container_toolkit_repo_key_fingerprint":
                 "{{ lookup('ansible.builtin.file', lookup('ansible.builtin.env', 'K8SGPU_CACHE', "
                 "default=lookup('ansible.builtin.env', 'HOME') ~ '/.cache/k8sgpu-lab') ~ '/mirror/' "
                 "~ (container_toolkit_repo_url.split('/k8sgpu-mirror/') | last) ~ '/gpgkey') "
                 "| k8sgpu.nvidia.openpgp_fingerprints | first }}"}
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks", "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "25",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    t0 = time.monotonic()
    cp = sh(["ansible-playbook", "-i", inv, "-c", "community.docker.docker", "-f", str(len(names)),
             str(playbook), "-e", json.dumps(extra)], cwd=ROOT, env=env)
    wall = time.monotonic() - t0
    if cp.returncode != 0:
        sys.exit(f"bench: the roles failed:\n{cp.stdout[-4000:]}{cp.stderr[-2000:]}")
    return wall, recap(cp.stdout), cp.stdout


def driver_apt_get_s(name: str) -> int:
    """How long the apt-get run that installed the driver took on a node (apt's history.log, 1 s steps):
    the same packages on both sides (the apt module adds only dpkg's conffile options, a lock timeout and
    exact versions), so a difference here is not the roles' own tasks."""
    log = must(["docker", "exec", name, "cat", "/var/log/apt/history.log"])
    for block in log.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.strip().splitlines() if ": " in line)
        if "nvidia-driver" in fields.get("Commandline", "") and "End-Date" in fields:
            start, end = (time.mktime(time.strptime(fields[k].replace("  ", " "), "%Y-%m-%d %H:%M:%S"))
                          for k in ("Start-Date", "End-Date"))
            return int(end - start)
    sys.exit(f"bench: no driver install in {name}'s apt history")


def check_node(name: str) -> None:
    """Both sides must end the same: driver module built by DKMS, toolkit installed, nvidia Docker's default."""
    out = must(["docker", "exec", name, "bash", "-c",
                "dkms status; dpkg-query -W -f='${Version}\\n' nvidia-container-toolkit; "
                "docker info --format '{{.DefaultRuntime}}'"])
    if "installed" not in out or "1.20.1-1" not in out or not out.strip().endswith("nvidia"):
        sys.exit(f"bench: {name} did not end configured:\n{out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the node containers running")
    ap.add_argument("--ours-first", action="store_true", help="run the roles before the plain apt-get side")
    args = ap.parse_args()
    proxy = (LAB_STATE / "apt-proxy-url").read_text().strip()
    mirror = (LAB_STATE / "toolkit-mirror-url").read_text().strip()
    ours = [f"k8sgpu-bench-role-{i}" for i in range(1, args.nodes + 1)]
    apt = [f"k8sgpu-bench-apt-{i}" for i in range(1, args.nodes + 1)]
    warm = "k8sgpu-bench-warm"
    out_dir = ROOT / "bench" / "output"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"bench: warming the apt cache on {warm} (not timed)", flush=True)
        prepare_node(warm, proxy)
        apt_node(warm, proxy, mirror, download_only=True)
        sh(["docker", "rm", "-f", warm])
        print(f"bench: starting {2 * args.nodes} fresh nodes with docker.io (not timed)", flush=True)
        with ThreadPoolExecutor(len(ours + apt)) as pool:
            list(pool.map(lambda n: prepare_node(n, proxy), ours + apt))

        with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=ROOT / "bench", delete=False) as f:
            f.write(PLAYBOOK)
            playbook = Path(f.name)
        try:
            cpu = {}

            def plain() -> tuple[float, list[float]]:
                print("bench: (apt) plain apt-get on", ", ".join(apt), flush=True)
                t0 = time.monotonic()
                with CpuMeter(apt) as meter, ThreadPoolExecutor(len(apt)) as pool:
                    per = list(pool.map(lambda n: apt_node(n, proxy, mirror), apt))
                cpu["apt"] = meter.result
                return time.monotonic() - t0, per

            def roles() -> tuple[float, dict, str]:
                print("bench: (ours) host roles on", ", ".join(ours), flush=True)
                with CpuMeter(ours) as meter:
                    out = run_roles(ours, proxy, mirror, playbook)
                cpu["ours"] = meter.result
                return out

            if args.ours_first:
                ours_wall, ours_recap, ours_out = roles()
                apt_wall, per_node = plain()
            else:
                apt_wall, per_node = plain()
                ours_wall, ours_recap, ours_out = roles()
            print("bench: (ours) idempotent re-run", flush=True)
            rerun_wall, rerun_recap, rerun_out = run_roles(ours, proxy, mirror, playbook)
        finally:
            playbook.unlink()
        for n in ours + apt:
            check_node(n)
        (out_dir / "host_roles.log").write_text(ours_out + "\n\n===== re-run =====\n\n" + rerun_out)
        result = {
            "nodes": args.nodes,
            "order": "ours first" if args.ours_first else "apt-get first",
            "apt_wall_s": round(apt_wall, 1),
            "apt_per_node_s": [round(x, 1) for x in per_node],
            "ours_wall_s": round(ours_wall, 1),
            "ratio": round(ours_wall / apt_wall, 3),
            "ours_changed": {h: r["changed"] for h, r in ours_recap.items()},
            "driver_apt_get_s": {"apt": [driver_apt_get_s(n) for n in apt], "ours": [driver_apt_get_s(n) for n in ours]},
            "cpu_s": cpu,
            "rerun_wall_s": round(rerun_wall, 1),
            "rerun_changed": {h: r["changed"] for h, r in rerun_recap.items()},
            "machine": f"{platform.node()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        }
        (out_dir / "host_roles.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        if not args.keep:
            sh(["docker", "rm", "-f", warm, *ours, *apt])


if __name__ == "__main__":
    main()
