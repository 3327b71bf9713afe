"""Every shell block of README.md, run as a user runs them, in the README's order (issue 47 item 3): the README cannot
go wrong silently.

The user starts in an empty directory with ansible-core on PATH and nothing else: HOME is the test's own (so
`~/.ansible/collections` is empty at the start), no ansible.cfg, and the tarball `ansible-galaxy
collection build` makes from this checkout in the current directory, as a user who downloaded or built it. Each
block runs with `bash -euo pipefail` there; the blocks share the directory and HOME, as a user's terminal does:

- Install: the tarball's install lines, then `pip install -r` of the shipped requirements files. pip is the user's
  environment's: a scratch venv that sees .venv's packages (a .pth file), so requirements .venv satisfies are not
  installed again and nothing is ever installed into .venv (make requirements-install installs each file from
  nothing, with two pips).
- Quick start: `$EDITOR` is a stand-in that checks it was given the example files and writes the lab's inventory
  (tests/lab's hosts, the lab's group_vars, the GPU health stand-ins' variables); then `k8sgpu.nvidia.site` from the
  installed collection against the lab's GPU hosts and Nodes. The file's name puts it right after test_site.py, whose
  hosts are converged then: the run is a no-change run (about 20 s), not the DKMS builds of a fresh host.
- Rolling upgrades: marked. On the lab's GPU hosts the driver is installed but cannot load (no GPU), so the window's
  check (driver loaded, vectorAdd) fails by design; test_fleet_limits.py and test_upgrade.py roll changes through the
  same window on hosts where it can pass.
- The Event-Driven Ansible recipe: the rulebook venv by the README's commands (HOME is $K8SGPU_CACHE/readme-home-<key>,
  emptied at the start but for `~/venv-rulebook`, which those commands built in an earlier run: keyed by
  requirements-eda.txt's hash and the Python version, built from pip's cache the first time, 14-21 s),
  ansible.eda from ../shared's tarball where the README installs it from Galaxy (the marked block), then the
  README's ansible-rulebook line in the background; an alert posted as Alertmanager posts it (the README's receiver,
  port 5000) for a GPU host whose kernel log has an Xid 79 (the stand-ins of k8sgpu_testlib.gpu_health_lab): its
  Node tainted by the health playbook the rulebook ran; the fault cleared and the alert resolved: the Node back.
  The chain with real Prometheus and Alertmanager is test_gpu_health_eda.py's.
- The cloud section: the example inventories copied; the playbooks need a GCP project and an AWS account (marked).

A shell block marked `*Not run in CI: <why>*` is not run (its reason is printed); any other shell block is run, and
the test fails on one it has no way to run. Role READMEs' shell blocks are read too (none of them can run here:
each is marked there or listed in ROLE_BLOCKS_NOT_RUN with the reason). Time alone on a converged lab: see
docs/development.md.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ansible_output import recap
from conftest import GPU_NODES, LAB_CACHE, LAB_STATE, ROOT, node_sh
from k8sgpu_testlib import readme
from k8sgpu_testlib.gpu_health_lab import (HDIR, SHARED, TAINT, XID_79, install_standins, missing,
                                           remove_standins, restore, snapshot, state)

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "-")

GPU1 = GPU_NODES[0]
EDA_PORT = 5000  # the rulebook's default, the README's receiver
# Role READMEs cannot be edited from here: their shell blocks that cannot run, until the role README marks them.
ROLE_BLOCKS_NOT_RUN: dict = {}
# What a marked block is replaced with, where later blocks need its effect: the block's command -> argv.
GALAXY_STAND_INS = {
    "ansible-galaxy collection install ansible.eda": lambda: [
        "ansible-galaxy", "collection", "install", str(sorted((SHARED / "collections").glob("ansible-eda-*.tar.gz"))[-1])],
}

EDITOR = """#!/bin/sh
# The user's edit of the two example files: the lab's hosts and settings.
set -eu
[ "$#" -eq 2 ] || { echo "editor: expected hosts.yml and group_vars/all.yml, got: $*" >&2; exit 2; }
grep -q 'gpu-h100-01.example.net' "$1" || { echo "editor: $1 is not the example's hosts.yml" >&2; exit 2; }
grep -q '^k8sgpu_kubeconfig:' "$2" || { echo "editor: $2 is not the example's group_vars/all.yml" >&2; exit 2; }
cp {site}/hosts.yml "$1"
cp {site}/all.yml "$2"
"""


def lab_inventory(standin_vars: Path) -> tuple[str, str]:
    """The lab's inventory as the two example files would be edited for it: hosts (the lab's host_vars inline) and
    the lab's group_vars with the GPU health stand-ins' variables."""
    hosts = yaml.safe_load((ROOT / "inventories/lab/hosts.yml").read_text())
    gpu = hosts["all"]["children"]["gpu_nodes"]["hosts"]
    for path in (ROOT / "inventories/lab/host_vars").glob("*.yml"):
        gpu[path.stem] = {**(gpu.get(path.stem) or {}), **yaml.safe_load(path.read_text())}
    settings: dict = {}
    for path in sorted((ROOT / "inventories/lab/group_vars/all").glob("*.yml")):
        settings.update(yaml.safe_load(path.read_text()))
    settings.update(json.loads(standin_vars.read_text()))
    return yaml.safe_dump(hosts, sort_keys=False), yaml.safe_dump(settings, sort_keys=False)


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def post(url: str, payload: dict) -> None:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (loopback)
        resp.read()


def alertmanager_payload(status: str, node: str) -> dict:
    """A notification as Alertmanager's webhook sends it (version 4) for the gpu_alerts role's GPUXidError."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    labels = {"alertname": "GPUXidError", "node": node, "gpu": "0", "severity": "critical"}
    return {
        "version": "4", "groupKey": '{}/{alertname=~"GPUXidError"}:{alertname="GPUXidError", node="%s"}' % node,
        "status": status, "receiver": "k8sgpu-gpu-health", "groupLabels": {"alertname": "GPUXidError", "node": node},
        "commonLabels": labels, "commonAnnotations": {}, "externalURL": "http://127.0.0.1:9093",
        "alerts": [{"status": status, "labels": labels, "annotations": {"summary": "XID 79"}, "startsAt": now,
                    "endsAt": now if status == "resolved" else "0001-01-01T00:00:00Z",
                    "generatorURL": "http://127.0.0.1:9090/graph", "fingerprint": "0123456789abcdef"}],
    }


def wait(what: str, probe, timeout: float, log: Path | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if probe():
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-6000:] if log and log.exists() else ""
    pytest.fail(f"{what}: not within {timeout} s\n{tail}")


def home_dir() -> Path:
    key = hashlib.sha256((ROOT / "requirements-eda.txt").read_bytes() + sys.version.encode()).hexdigest()[:12]
    return LAB_CACHE / f"readme-home-{key}"


class User:
    """The user's terminal: a scratch HOME, an empty working directory, PATH with ansible-core."""

    def __init__(self, base: Path, standin_vars: Path):
        # HOME is fresh but for ~/venv-rulebook: the venv the README's own two commands built in an earlier run of
        # this test, for this requirements-eda.txt and this Python (a first run, or a new file, builds it with them
        # from pip's cache); `python3 -m venv` on it and the pip install then find it done, as for a user who runs
        # them again. The caller holds home_lock() (two runs at once would share it, and port 5000).
        self.home, self.work, self.venv = home_dir(), base / "work", base / "venv"
        self.home.mkdir(parents=True, exist_ok=True)
        for child in self.home.iterdir():
            if child.name == "venv-rulebook":
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        for path in (self.work, base / "site"):
            path.mkdir()
        # The user's Python environment: sees .venv's packages, installs into itself only.
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        purelib = Path(sysconfig.get_path("purelib"))
        mine = Path(subprocess.run([str(self.venv / "bin/python"), "-c",
                                    "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        (mine / "k8sgpu-user-env.pth").write_text(f"{purelib}\n")
        hosts, settings = lab_inventory(standin_vars)
        (base / "site/hosts.yml").write_text(hosts)
        (base / "site/all.yml").write_text(settings)
        editor = base / "editor"
        editor.write_text(EDITOR.replace("{site}", str(base / "site")))
        editor.chmod(0o755)
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_", "VIRTUAL_ENV"))}
        self.env = {
            **keep, "HOME": str(self.home), "EDITOR": str(editor),
            "PATH": f"{self.venv / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            # pip's cache is the machine's (HOME moved); the lab's inventory reads these two.
            "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache/pip")),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
            "K8SGPU_LAB_STATE": str(LAB_STATE), "K8SGPU_CACHE": str(LAB_CACHE),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
        }

    def run(self, script: str, timeout: int = 900) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, script: str, log: Path) -> subprocess.Popen:
        with log.open("wb") as out:
            return subprocess.Popen(["bash", "-euo", "pipefail", "-c", f"exec {script.strip()}"], cwd=self.work,
                                    env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def commands(block: readme.Block) -> list[str]:
    """The block's command lines (continuations joined, comments dropped)."""
    text = block.body.replace("\\\n", " ")
    return [line.split(" #")[0].strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]


def descendants(pid: int) -> dict[int, str]:
    """The processes below pid, with their start times (from /proc): ansible-runner starts ansible-playbook in a
    session of its own, which a process group does not reach."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        if (st := _stat(int(entry.name))) is not None:
            children.setdefault(st[0], []).append((int(entry.name), st[1]))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child, started in children.get(todo.pop(), []):
            found[child] = started
            todo.append(child)
    return found


def signal_ours(pids: dict[int, str], sig: int) -> None:
    """Send sig to each of these processes that is still the one we started (same start time: not a reused pid)."""
    for pid, started in pids.items():
        if (st := _stat(pid)) is not None and st[1] == started:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def stop(proc: subprocess.Popen) -> None:
    """The background block and every process it started, each by its id."""
    pids = descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
    signal_ours(pids, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    end = time.monotonic() + 20
    while time.monotonic() < end and any((_stat(p) or (0, ""))[1] == t for p, t in pids.items()):
        time.sleep(0.2)
    signal_ours(pids, signal.SIGKILL)


def eda_end_to_end(user: User, block: readme.Block, core, log: Path) -> str:
    """The README's ansible-rulebook line, in the background; an alert for an unhealthy GPU host and its resolution."""
    assert port_free(EDA_PORT), f"127.0.0.1:{EDA_PORT} is taken: the README's rulebook listens there"
    before = snapshot(core, GPU1)
    proc = user.start(block.body, log)
    try:
        wait("ansible-rulebook's Alertmanager source on 127.0.0.1:5000",
             lambda: proc.poll() is None and not port_free(EDA_PORT), 120, log)
        assert proc.poll() is None, log.read_text()[-4000:]
        # The GPU falls off the bus: the driver's kernel-log line (the host's health read), then Alertmanager's post.
        node_sh(GPU1, f"echo \"{XID_79}\" > {HDIR}/kernel.log")
        post(f"http://127.0.0.1:{EDA_PORT}/alerts", alertmanager_payload("firing", GPU1))
        wait(f"{GPU1}'s Node tainted {TAINT} and recorded by the playbook the rulebook ran",
             lambda: (state(core, GPU1)[1].get(TAINT) == "needs_reboot:NoSchedule"
                      and (state(core, GPU1)[2] or {}).get("state") == "tainted"), 300, log)
        assert state(core, GPU1)[2]["policy"] == "report" and not state(core, GPU1)[0], state(core, GPU1)
        # Cleared (what a reboot does) and resolved: the next run reads it healthy and returns the Node.
        node_sh(GPU1, f": > {HDIR}/kernel.log")
        post(f"http://127.0.0.1:{EDA_PORT}/alerts", alertmanager_payload("resolved", GPU1))
        wait(f"{GPU1}'s Node back in service (taint removed, recorded returned)",
             lambda: TAINT not in state(core, GPU1)[1] and (state(core, GPU1)[2] or {}).get("state") == "returned",
             300, log)
        wait("the second playbook run to end", lambda: log.read_text(errors="replace").count("PLAY RECAP") >= 2, 120,
             log)
        assert proc.poll() is None, "ansible-rulebook keeps listening: " + log.read_text()[-3000:]
    finally:
        stop(proc)
        node_sh(GPU1, f": > {HDIR}/kernel.log", check=False)
        restore(core, GPU1, before)
    return log.read_text(errors="replace")


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    vars_file = install_standins(tmp_path_factory.mktemp("readme-standins"))
    try:
        yield vars_file
    finally:
        remove_standins()


def test_every_readme_shell_block_runs_as_a_user_runs_it(tmp_path, standins, core):
    found = readme.blocks(ROOT / "README.md")
    shell = [b for b in found if b.shell]
    lock = home_dir().with_suffix(".lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the test's process ends or the file is closed
    user = User(tmp_path, standins)
    # The tarball in the user's directory, as downloaded or built.
    built = user.run(f"ansible-galaxy collection build {ROOT}")
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = next(user.work.glob("k8sgpu-nvidia-*.tar.gz"))
    with tarfile.open(tarball) as tar:
        shipped = set(tar.getnames())
    # The unit test's reading of build_ignore (tests/unit/test_readme.py) is what ansible-galaxy ships.
    linked = {p for t in readme.links((ROOT / "README.md").read_text()) if (p := readme.repository_path(t))}
    assert not {p for p in linked if p not in shipped and not any(n.startswith(p + "/") for n in shipped)}, linked
    # (The tarball may hold more: files of the working tree git does not track.)
    computed = {p for p in readme.tarball_files() if (ROOT / p).is_file()}
    assert computed - shipped == set(), sorted(computed - shipped)[:20]

    ran, not_run, seen = [], [], set()
    for block in shell:
        cmds = commands(block)
        if block.not_run:
            not_run.append(f"{block.where()}: {block.not_run}")
            for cmd in cmds:
                if cmd in GALAXY_STAND_INS:
                    res = subprocess.run(GALAXY_STAND_INS[cmd](), cwd=user.work, env=user.env, capture_output=True,
                                         text=True, check=False)
                    assert res.returncode == 0, f"{block.where()}'s stand-in: {res.stdout}{res.stderr}"
            continue
        start = time.monotonic()
        if any(c.startswith("~/venv-rulebook/bin/ansible-rulebook") for c in cmds):
            assert len(cmds) == 1, f"{block.where()}: the rulebook's block runs it alone (it keeps listening)"
            out = eda_end_to_end(user, block, core, tmp_path / "rulebook.log")
            stats = [recap(part) for part in out.split("PLAY RECAP")[1:]]
            seen.add("eda")
        else:
            res = user.run(block.body)
            assert res.returncode == 0, f"{block.where()} failed:\n{block.body}\n{res.stdout[-5000:]}{res.stderr[-3000:]}"
            out = res.stdout
            stats = recap(out)
            if "ansible-playbook k8sgpu.nvidia.site -i inventories/site" in cmds:
                seen.add("site")
                # The example's bare-metal inventory alone (not the GKE and EKS ones), edited for the lab.
                listed = sorted(str(p.relative_to(user.work)) for p in (user.work / "inventories/site").rglob("*"))
                assert listed == ["inventories/site/group_vars", "inventories/site/group_vars/all.yml",
                                  "inventories/site/hosts.yml"], listed
                assert set(stats) == {*GPU_NODES, "localhost"}, stats
            if any("collection install" in c and ".tar.gz" in c for c in cmds):
                seen.add("install")
                assert (user.home / ".ansible/collections/ansible_collections/k8sgpu/nvidia/MANIFEST.json").is_file()
            if any(c.startswith("pip install -r") for c in cmds):
                seen.add("requirements")
            if stats:
                assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in stats.values()), out[-4000:]
        recaps = stats if isinstance(stats, list) else [stats]
        changed = sum(host["changed"] for one in recaps for host in one.values())
        ran.append(f"{block.where()} ({time.monotonic() - start:.1f} s{f', changed={changed}' if stats else ''}): "
                   f"{cmds[0][:80]}")
    print("\nREADME blocks run:\n  " + "\n  ".join(ran) + "\nnot run (marked):\n  " + "\n  ".join(not_run))
    # The steps a user goes through are all there, in order; a README that lost one fails here.
    assert seen == {"install", "requirements", "site", "eda"}, seen
    assert any("GCP" in n for n in not_run) and any("galaxy.ansible.com" in n for n in not_run), not_run


def test_role_readme_shell_blocks_are_marked_or_listed():
    unlisted = []
    for path in sorted((ROOT / "roles").glob("*/README.md")):
        for block in readme.blocks(path):
            if not block.shell or block.not_run:
                continue
            if not any(path.relative_to(ROOT).as_posix() == where and text in block.body
                       for (where, text) in ROLE_BLOCKS_NOT_RUN):
                unlisted.append(f"{block.where()}: {block.body.strip()[:100]}")
    assert not unlisted, ("role README shell blocks that nothing runs: mark them `*Not run in CI: <why>*` or run "
                          "them here:\n" + "\n".join(unlisted))
    # Each listed block still exists (a stale entry would hide nothing, but say something false).
    for (where, text), _why in ROLE_BLOCKS_NOT_RUN.items():
        assert text in (ROOT / where).read_text(), (where, text)
