"""Faults in the middle of host.yml (issue 36): a run stopped at a named point, then a plain re-run.

Each case runs the real playbooks/host.yml (the driver with its DKMS build, then the container toolkit with Docker
and containerd) on a GPU host of the lab's recipe of its own (lab/lab.sh node --gpu-host: the gpu-host image, the PCI
bus of eight H100s, the lab's ccache), injects one fault, and re-runs host.yml with no fault. The re-run must converge
to the state of a run that had no fault, compared by a digest the test takes on the host (``state_digest``), keep
what the site put there, and leave no temporary or backup file in the runtimes' directories.

The container's processes stand for the host's: a connection cut (or a host that kills the session) is the apt and
dpkg processes killed with SIGKILL in the container; a controller killed is ansible-playbook and every one of its
workers (each in a session of its own) killed with SIGKILL (k8sgpu_testlib.faults.kill_run), which leaves the
command it started on the host running (as Docker's exec, and SSH with ControlPersist, leave it).

The digest reads what Docker and containerd run with from the daemons themselves (docker info; containerd's CRI
plugin configuration through its own API), not from their files: a runtime left on an older configuration than its
files shows (issue 51).
"""
from __future__ import annotations

import http.client
import json
import os
import shlex
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


import pytest

from ansible_output import recap
from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run
from k8sgpu_testlib.faults import DOCKER_LOADED, containerd_runtime_line, kill_run, marked_env

HOST = f"{LAB_NAME}-fault-1"
PLAYBOOK = "playbooks/host.yml"
# The files the host half manages on a Debian 12 GPU host with Docker and containerd, and the directories whose
# listing shows a temporary or backup file left beside them.
MANAGED = ("/etc/docker/daemon.json", "/etc/containerd/config.toml", "/etc/containerd/conf.d/*",
           "/etc/nvidia-container-runtime/config.toml",
           "/etc/modprobe.d/*nvidia*", "/etc/modprobe.d/*nouveau*", "/etc/apt/sources.list.d/*",
           "/etc/apt/preferences.d/*", "/etc/apt/keyrings/*", "/usr/share/keyrings/*nvidia*", "/etc/cdi/*")
WATCHED_DIRS = ("/etc/docker", "/etc/containerd", "/etc/containerd/conf.d", "/etc/nvidia-container-runtime",
                "/etc/apt/sources.list.d",
                "/etc/modprobe.d")
# The packages of the driver and the toolkit (and what DKMS needs), with their versions and holds.
PACKAGES = r"^(nvidia|libnvidia|libcuda|firmware-nvidia|dkms|gcc|linux-headers)"
# A key of the site's own in daemon.json: kept by every run.
SITE_KEY = {"log-level": "warn"}
# The converged host of the reference run, committed: where a case needs a converged host to begin from.
CONVERGED_IMAGE = f"k8sgpu-lab/{LAB_NAME}-fault-converged:{os.getpid()}"
# What the gpu-host image has before any run, read by the reference: containerd's main file (Debian's).
FRESH: dict[str, str] = {}

DIGEST = rf"""
set -u
echo '## packages'; dpkg-query -W -f='${{Package}} ${{Version}} ${{db:Status-Abbrev}}\n' | grep -E '{PACKAGES}' | sort
echo '## holds'; dpkg --get-selections | awk '$2 == "hold" {{print $1}}' | sort
echo '## unfinished'; dpkg --audit
echo '## journal'; ls /var/lib/dpkg/updates
echo '## daemon.json'; python3 -c 'import json; print(json.dumps(json.load(open("/etc/docker/daemon.json")), sort_keys=True))'
echo '## files'; for f in {' '.join(MANAGED[1:])}; do [ -f "$f" ] && sha256sum "$f"; done
echo '## listings'; for d in {' '.join(WATCHED_DIRS)}; do [ -d "$d" ] && ls -A "$d" | sed "s|^|$d/|"; done
echo '## dkms'; dkms status 2>&1 | sort
echo '## docker loaded'; {DOCKER_LOADED}
"""


def state_digest() -> str:
    """What a converged host has: package versions and holds, dpkg's unfinished work and journal (none), the content
    of every file the roles manage, the runtimes' directories (a temporary or backup file shows), DKMS's modules and
    what Docker and containerd run with, as the running daemons say."""
    return node_sh(HOST, DIGEST) + f"## containerd loaded\n{containerd_runtime_line(HOST)}\n"


def daemon_json() -> dict:
    return json.loads(node_sh(HOST, "cat /etc/docker/daemon.json"))


def start_host() -> None:
    """A GPU host as the gpu-host image has it, with a key of the site's own in daemon.json."""
    subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
    cp = run(["lab/lab.sh", "node", "--gpu-host", HOST, "bookworm"], timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    node_sh(HOST, "python3 - <<'EOF'\nimport json\np='/etc/docker/daemon.json'\nd=json.load(open(p))\n"
                  f"d.update({SITE_KEY!r})\nopen(p,'w').write(json.dumps(d, indent=2))\nEOF\nsystemctl restart docker")


def start_converged(*run_args: str) -> None:
    """The converged host of the reference run, started again (with docker run's ``run_args``), Docker running."""
    subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
    cp = run(["lab/lab.sh", "node", "--gpu-host", HOST, "bookworm", CONVERGED_IMAGE,
              *(("--", *run_args) if run_args else ())], timeout=300)
    # Docker cannot start from an empty /etc/docker on the container's overlayfs (a case writes daemon.json next).
    assert cp.returncode == 0 or "docker" in cp.stderr, cp.stderr[-2000:]
    # /var/lib/docker/runtimes of the committed image lies on a lower layer that dockerd cannot rename.
    node_sh(HOST, "rm -rf /var/lib/docker/runtimes; systemctl reset-failed; systemctl restart docker || true")


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "hosts.yml"
    path.write_text(json.dumps({"gpu_nodes": {"hosts": {HOST: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    yield path
    subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)
    subprocess.run(["docker", "rmi", CONVERGED_IMAGE], capture_output=True, check=False)


# A hang guard, not a figure: a first run with its DKMS builds took more than 900 s here on a cold machine with every
# other step of make test beside it (2026-12-06), 226 s alone.
def host_yml(inventory: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return run(["ansible-playbook", "-i", "inventories/lab", "-i", str(inventory), "-l", HOST, PLAYBOOK, *args],
               timeout=timeout)


def start_host_yml(inventory: Path, log: Path, *args: str) -> subprocess.Popen:
    """host.yml in the background, its processes marked (``proc.marker``) for kill()."""
    env, marker = marked_env({**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                              "PYTHONUNBUFFERED": "1"})
    with log.open("w") as out:
        proc = subprocess.Popen(["ansible-playbook", "-i", "inventories/lab", "-i", str(inventory), "-l", HOST,
                                 PLAYBOOK, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    proc.marker = marker  # type: ignore[attr-defined]
    return proc


def reach_over_ssh(tmp_path: Path) -> Path:
    """An inventory that reaches HOST over SSH (root, a key made here, the host's sshd started), as a site's does."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k8sgpu-lab", "-f", str(key)], check=True)
    node_sh(HOST, f"install -d -m 0700 /root/.ssh && echo {shlex.quote(key.with_suffix('.pub').read_text().strip())}"
                  " >/root/.ssh/authorized_keys && chmod 0600 /root/.ssh/authorized_keys && systemctl start ssh")
    address = subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                              HOST], check=True, capture_output=True, text=True).stdout.strip()
    path = tmp_path / "hosts-ssh.yml"
    path.write_text(json.dumps({"gpu_nodes": {"hosts": {HOST: {
        "ansible_connection": "ansible.builtin.ssh", "ansible_host": address, "ansible_user": "root",
        "ansible_ssh_private_key_file": str(key), "ansible_python_interpreter": "/usr/bin/python3",
        # The lab's host is made fresh for each case: its host key is new each time.
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}}}}))
    return path


def kill(proc: subprocess.Popen) -> None:
    """The controller killed: ansible-playbook and each of its workers (SIGKILL)."""
    kill_run(proc, proc.marker)  # type: ignore[attr-defined]


def wait_in_log(proc: subprocess.Popen, log: Path, text: str, timeout: float = 600) -> None:
    """Wait until the run's output shows ``text`` (a task's banner: the task before it has ended)."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if proc.poll() is not None:
            raise AssertionError(f"host.yml ended (rc {proc.returncode}) before {text!r}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            kill(proc)
            raise AssertionError(f"no {text!r} within {timeout} s: {log.read_text()[-3000:]}")
        time.sleep(0.02)


def wait_on_host(proc: subprocess.Popen, condition: str, what: str, log: Path, timeout: float = 600) -> None:
    """Wait until the shell ``condition`` holds on the host, the run still going."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"host.yml ended (rc {proc.returncode}) before {what}: {log.read_text()[-3000:]}")
        if subprocess.run(["docker", "exec", HOST, "sh", "-c", condition], capture_output=True,
                          check=False).returncode == 0:
            return
        time.sleep(0.5)
    kill(proc)
    raise AssertionError(f"no {what} on {HOST} within {timeout} s: {log.read_text()[-3000:]}")


def changed(cp: subprocess.CompletedProcess) -> int:
    return recap(cp.stdout).get(HOST, {}).get("changed", -1)


# The re-runs' wall times, one JSON line per case, for docs/reliability.md (a record, not a check).
FIGURES = LAB_STATE / "fault-figures.jsonl"


def converge(inventory: Path, case: str = "", *args: str) -> str:
    """A plain re-run, then another that must change nothing; the host's digest."""
    started = time.monotonic()
    cp = host_yml(inventory, *args)
    took = time.monotonic() - started
    assert cp.returncode == 0, cp.stdout[-4000:]
    with FIGURES.open("a") as out:
        out.write(json.dumps({"case": case or os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                              "rerun_s": round(took, 1), "changed": changed(cp)}) + "\n")
    again = host_yml(inventory)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-4000:]
    return state_digest()


@pytest.fixture(scope="module")
def reference(inventory):
    """The digest of a run that had no fault, from a host as the gpu-host image has it."""
    start_host()
    FRESH["containerd"] = node_sh(HOST, "cat /etc/containerd/config.toml")
    digest = converge(inventory, case="reference: host.yml with no fault on a fresh host")
    assert "## unfinished\n## journal\n" in digest, digest
    assert "nvidia-open-kernel-dkms" in digest
    assert daemon_json()["log-level"] == "warn"
    cp = subprocess.run(["docker", "commit", HOST, CONVERGED_IMAGE], capture_output=True, text=True, check=False)
    assert cp.returncode == 0, cp.stderr
    return digest


def diff(expected: str, got: str) -> str:
    a, b = expected.splitlines(), got.splitlines()
    return "\n".join([f"- {x}" for x in a if x not in b] + [f"+ {x}" for x in b if x not in a])


def cut_while_unpacking(inventory: Path, tmp_path: Path, packages: str, what: str, *args: str) -> None:
    """On a fresh host, host.yml (with ``args``) stopped by its connection cut (apt and dpkg killed) once dpkg has
    unpacked one of ``packages`` (dpkg-query patterns); the run must fail naming the host and the step."""
    start_host()
    log = tmp_path / "faulted.log"
    proc = start_host_yml(inventory, log, *args)
    # apt and dpkg are stopped (SIGSTOP) before each look at dpkg's database and killed while stopped when one of
    # ``packages`` is unpacked, else let go on: dpkg cannot configure that package between the look and the kill.
    apt = "'^/usr/bin/(apt-get|dpkg)( |$)'"
    wait_on_host(proc, f"pkill -STOP -f {apt}; "
                       f"if dpkg-query -W -f='${{Package}} ${{db:Status-Status}}\\n' {packages} 2>/dev/null "
                       f"| grep -q ' unpacked$'; then pkill -KILL -f {apt}; else pkill -CONT -f {apt}; exit 1; fi",
                 f"dpkg unpacking {what} packages", log)
    proc.wait(timeout=300)
    text = log.read_text()
    assert proc.returncode != 0, text[-3000:]
    # The faulted run names the host and the step.
    assert f"fatal: [{HOST}]" in text and "Install the driver packages with apt" in text, text[-3000:]


def test_connection_cut_while_another_branch_unpacks_then_a_run_of_the_default_branch(inventory, reference, tmp_path):
    """Today's code fails the re-run: apt refuses with "dpkg was interrupted, you must manually run 'dpkg
    --configure -a'", and would have configured (built) the other branch's half-installed packages."""
    # Debian 12 packages its 470 branch as nvidia-tesla-470-*.
    cut_while_unpacking(inventory, tmp_path, "'nvidia-tesla-470-*'", "the 470 branch's", "-e", "driver_branch=470")
    left = node_sh(HOST, "dpkg --audit; ls /var/lib/dpkg/updates")
    unfinished = node_sh(HOST, "dpkg-query -W -f='${Package} ${db:Status-Status}\\n' "
                               "| grep -v -e ' installed$' -e not-installed || true")
    assert "nvidia-tesla-470" in unfinished, left
    assert node_sh(HOST, "ls /var/lib/dpkg/updates").strip(), "the fault left no interrupted dpkg run"

    digest = converge(inventory, "connection cut while the 470 branch unpacks; re-run of the default branch")
    assert digest == reference, diff(reference, digest)
    assert "470" not in node_sh(HOST, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\\n' "
                                      "| grep -v not-installed | grep -E 'nvidia|libcuda' || true")
    assert daemon_json()["log-level"] == "warn"


def test_connection_cut_while_the_runs_own_branch_unpacks(inventory, reference, tmp_path):
    """The same cut on a fresh host while dpkg unpacks the packages of the branch the run asks for (the default): the
    re-run finishes them (dpkg --configure -a, then apt for what was not unpacked yet) rather than removing them, and
    converges."""
    cut_while_unpacking(inventory, tmp_path, "'nvidia-*' 'libnvidia-*'", "the default branch's")
    unfinished = node_sh(HOST, "dpkg-query -W -f='${Package} ${db:Status-Status}\\n' "
                               "| grep -v -e ' installed$' -e not-installed -e config-files || true")
    assert "nvidia" in unfinished and "tesla" not in unfinished, unfinished

    digest = converge(inventory, "connection cut while the default branch unpacks; re-run")
    assert digest == reference, diff(reference, digest)
    assert daemon_json()["log-level"] == "warn"


def test_controller_killed_during_the_dkms_build(inventory, reference, tmp_path):
    """The host's apt and DKMS go on after the controller dies; the re-run waits for dpkg's lock and converges."""
    start_host()
    log = tmp_path / "faulted.log"
    proc = start_host_yml(inventory, log)
    # DKMS compiling the open kernel module (the nvidia-open-kernel-dkms postinst).
    wait_on_host(proc, "pgrep -x cc1 >/dev/null", "the DKMS build", log)
    kill(proc)
    assert node_sh(HOST, "pgrep -f 'dkms' >/dev/null && echo running", check=False).strip() == "running"

    # The re-run waits for the host's apt, whose DKMS build takes 2-6 min here (2 CPUs shared with the other tests):
    # longer than the 300 s the roles wait for dpkg's lock by default.
    digest = converge(inventory, "controller killed during the DKMS build", "-e", "driver_apt_lock_timeout=1200",
                      "-e", "container_toolkit_apt_lock_timeout=1200")
    assert digest == reference, diff(reference, digest)
    assert daemon_json()["log-level"] == "warn"


def test_no_space_left_when_daemon_json_is_written(inventory, reference):
    """The converged host, its /etc/docker a full 64 KiB tmpfs, and daemon.json as a site wrote it without nvidia as
    the default runtime: the run fails naming the file, which is left as it was, with no temporary file beside it
    and no backup made; with space again the re-run converges."""
    start_converged("--tmpfs", "/etc/docker:size=64k")
    site = {"storage-driver": "vfs", **SITE_KEY}
    backups = "ls /var/backups/k8sgpu.nvidia/etc/docker 2>/dev/null || true"
    node_sh(HOST, f"printf '%s\\n' '{json.dumps(site, indent=2)}' >/etc/docker/daemon.json; "
                  "systemctl reset-failed; systemctl restart docker; "
                  "dd if=/dev/zero of=/etc/docker/.k8sgpu-filler bs=4k 2>/dev/null || true; "
                  "[ $(df --output=avail /etc/docker | tail -n 1) -eq 0 ]")
    before, backups_before = node_sh(HOST, "cat /etc/docker/daemon.json"), node_sh(HOST, backups)

    faulted = host_yml(inventory)
    assert faulted.returncode != 0, faulted.stdout[-3000:]
    assert f"fatal: [{HOST}]" in faulted.stdout, faulted.stdout[-3000:]
    assert "Could not write /etc/docker/daemon.json: No space left on device." in faulted.stdout, faulted.stdout[-3000:]
    assert node_sh(HOST, "cat /etc/docker/daemon.json") == before
    assert node_sh(HOST, "ls -A /etc/docker").split() == [".k8sgpu-filler", "daemon.json", "key.json"]
    assert node_sh(HOST, backups) == backups_before
    assert node_sh(HOST, "docker info -f '{{.DefaultRuntime}}'").strip() == "runc"

    node_sh(HOST, "rm /etc/docker/.k8sgpu-filler")
    digest = converge(inventory, "no space left when daemon.json is written")
    assert digest == reference, diff(reference, digest)
    assert daemon_json()["log-level"] == "warn"


class _Relay(BaseHTTPRequestHandler):
    """An apt proxy in front of the lab's: everything relayed, the headers announcing each body's whole length. The
    first .deb whose path holds ``match`` is faulted after half its body: ``cut`` closes the connection there (every
    such .deb then), ``stall`` holds the rest until the test sets ``release`` (the server's ``stalled`` is set
    when it starts holding)."""
    protocol_version = "HTTP/1.0"
    upstream: tuple[str, int] = ("127.0.0.1", 3142)
    mode = "cut"
    match = ".deb"
    faulted: list[str] = []
    stalled: threading.Event
    release: threading.Event

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        # A request for the lab proxy's own repositories (the toolkit's) goes to it as to a server, not as a proxy.
        target = urlsplit(self.path)
        local = target.netloc == "%s:%d" % self.upstream
        request = (target.path + (f"?{target.query}" if target.query else "")) if local else self.path
        conn.request("GET", request, headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
        resp = conn.getresponse()
        body = resp.read()
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        path = urlsplit(self.path).path
        if path.endswith(".deb") and self.match in path and len(body) > 1 and (self.mode == "cut" or not self.faulted):
            self.faulted.append(self.path)
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if self.mode == "cut":
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.stalled.set()
            self.release.wait(timeout=300)
            self.wfile.write(body[len(body) // 2:])
            return
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


class Relay:
    """_Relay serving on the lab proxy's address, on a port of its own, for the duration of a with block."""

    def __init__(self, mode: str, match: str = ".deb") -> None:
        lab_proxy = urlsplit((LAB_STATE / "apt-proxy-url").read_text().strip())
        self.handler = type("Relay", (_Relay,), {
            "upstream": (lab_proxy.hostname, lab_proxy.port), "mode": mode, "match": match, "faulted": [],
            "stalled": threading.Event(), "release": threading.Event()})
        self.server = ThreadingHTTPServer((lab_proxy.hostname, 0), self.handler)
        self.url = f"http://{lab_proxy.hostname}:{self.server.server_address[1]}"
        self.host = lab_proxy.hostname

    def __enter__(self) -> Relay:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.handler.release.set()
        self.server.shutdown()
        self.server.server_close()

    def wait_stalled(self, proc: subprocess.Popen, log: Path, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not self.handler.stalled.wait(timeout=0.5):
            if proc.poll() is not None:
                raise AssertionError(f"host.yml ended (rc {proc.returncode}) before apt fetched a .deb with "
                                     f"{self.handler.match!r}: {log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                kill(proc)
                raise AssertionError(f"apt fetched no .deb with {self.handler.match!r} within {timeout} s")


def test_apt_proxy_failing_in_the_middle_of_a_download(inventory, reference):
    """The converged host without nvidia-persistenced (removed by hand, apt's cache emptied): the run that installs
    it again goes through a proxy that cuts the .deb in the middle; it fails naming the host, the step and the
    package apt could not fetch, and leaves dpkg as it was. With the lab's proxy the re-run converges."""
    start_converged()
    node_sh(HOST, "apt-get purge -y -q --allow-change-held-packages nvidia-persistenced >/dev/null && apt-get clean")
    with Relay("cut") as relay:
        faulted = host_yml(inventory, "-e", f"k8sgpu_apt_proxy={relay.url}")
    assert relay.handler.faulted, "apt fetched no .deb through the failing proxy"
    out = faulted.stdout
    assert faulted.returncode != 0, out[-3000:]
    assert f"fatal: [{HOST}]" in out and f"{HOST}: installing nvidia-driver" in out, out[-3000:]
    assert "nvidia-persistenced" in out and "Failed to fetch" in out, out[-3000:]
    assert node_sh(HOST, "dpkg --audit; ls /var/lib/dpkg/updates") == ""

    digest = converge(inventory, "apt proxy failing in the middle of a download")
    assert digest == reference, diff(reference, digest)


DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"


@pytest.mark.parametrize("full, written_before, listings", [
    # The drop-in is written first (to conf.d, with room), then the main file's imports entry cannot be.
    ("/etc/containerd", f"['{DROP_IN}']", {"/etc/containerd": [".k8sgpu-filler", "conf.d", "config.toml"],
                                           "/etc/containerd/conf.d": ["99-nvidia.toml"]}),
    # The drop-in cannot be written: nothing is.
    ("/etc/containerd/conf.d", "none", {"/etc/containerd": ["conf.d", "config.toml"],
                                        "/etc/containerd/conf.d": [".k8sgpu-filler"]}),
], ids=["config.toml", "drop-in"])
def test_no_space_left_when_containerds_files_are_written(inventory, reference, full, written_before, listings):
    """The converged host, /etc/containerd and its conf.d each a tmpfs, the first holding containerd's config.toml as
    the gpu-host image has it (before any run), one of them full: the run fails naming the file it could not write
    and those written before it; config.toml is left as it was, with no temporary file beside either and no backup
    made, and containerd's default runtime is still runc (nothing imports a drop-in written alone). With space again
    the re-run converges."""
    size = {d: "64k" if d == full else "1m" for d in listings}
    start_converged(*[a for d in listings for a in ("--tmpfs", f"{d}:size={size[d]}")])
    backups = "ls /var/backups/k8sgpu.nvidia/etc/containerd 2>/dev/null || true"
    node_sh(HOST, f"printf '%s' {shlex.quote(FRESH['containerd'])} >/etc/containerd/config.toml; "
                  "systemctl restart containerd; "
                  f"dd if=/dev/zero of={full}/.k8sgpu-filler bs=4k 2>/dev/null || true; "
                  f"[ $(df --output=avail {full} | tail -n 1) -eq 0 ]")
    before, backups_before = node_sh(HOST, "cat /etc/containerd/config.toml"), node_sh(HOST, backups)

    faulted = host_yml(inventory)
    out = faulted.stdout
    assert faulted.returncode != 0, out[-3000:]
    # A loop's task (one item per runtime) fails naming the host and the item.
    assert f"failed: [{HOST}] (item=containerd)" in out and "Add the nvidia runtime to containerd" in out, out[-3000:]
    path = "/etc/containerd/config.toml" if full == "/etc/containerd" else DROP_IN
    assert f"Could not write {path}: No space left on device." in out, out[-3000:]
    assert f"Files written before it: {written_before}." in out, out[-3000:]
    assert node_sh(HOST, "cat /etc/containerd/config.toml") == before
    for directory, names in listings.items():
        assert node_sh(HOST, f"ls -A {directory}").split() == names
    assert node_sh(HOST, backups) == backups_before
    assert 'default_runtime_name = "runc"' in node_sh(HOST, "containerd config dump")

    node_sh(HOST, f"rm {full}/.k8sgpu-filler")
    digest = converge(inventory, f"no space left when containerd's {path} is written")
    assert digest == reference, diff(reference, digest)


def test_controller_killed_during_the_toolkits_package_install(inventory, reference, tmp_path):
    """The converged host without the toolkit's packages (purged, apt's cache emptied): ansible-playbook killed while
    apt on the host fetches nvidia-container-toolkit (a proxy holds the .deb half-sent). apt goes on there once the
    proxy lets the rest through; the re-run waits for dpkg's lock and converges."""
    start_converged()
    node_sh(HOST, "apt-get purge -y -q --allow-change-held-packages nvidia-container-toolkit "
                  "nvidia-container-toolkit-base >/dev/null && apt-get clean")
    log = tmp_path / "faulted.log"
    with Relay("stall", match="nvidia-container-toolkit") as relay:
        # The lab's toolkit repository is served by its apt proxy and fetched without one (DIRECT): through the relay.
        proc = start_host_yml(inventory, log, "-e", f"container_toolkit_repo_proxy={relay.url}")
        relay.wait_stalled(proc, log)
        assert "Install the toolkit packages with apt" in log.read_text(), log.read_text()[-3000:]
        kill(proc)
        relay.handler.release.set()
        # apt, on its own now, fetches the rest and installs.
        node_sh(HOST, "while pgrep -x apt-get >/dev/null; do sleep 0.5; done", timeout=300)
    assert "nvidia-container-toolkit" in relay.handler.faulted[0]

    digest = converge(inventory, "controller killed during the toolkit's package install")
    assert digest == reference, diff(reference, digest)
    assert daemon_json()["log-level"] == "warn"


def docker_loaded() -> str:
    """Docker's default runtime as the running dockerd has it."""
    return node_sh(HOST, "docker info -f '{{.DefaultRuntime}}'").strip()


def test_controller_killed_between_the_daemon_json_write_and_dockers_restart(inventory, reference, tmp_path):
    """The converged host, daemon.json as a site wrote it (no nvidia runtime) and Docker restarted with it: host.yml
    killed (ansible-playbook and its workers) once the toolkit has written daemon.json, before the restart handler.
    The re-run restarts Docker (its daemon started before the file's last change) and converges. Today's code decided
    restarts from the run's own changes: the re-run changed nothing and left Docker on runc for good."""
    start_converged()
    site = {"storage-driver": "vfs", **SITE_KEY}
    node_sh(HOST, f"printf '%s\\n' '{json.dumps(site, indent=2)}' >/etc/docker/daemon.json; "
                  "systemctl reset-failed; systemctl restart docker")
    assert docker_loaded() == "runc"
    log = tmp_path / "faulted.log"
    proc = start_host_yml(inventory, log)
    # The next task's banner: the daemon.json task has ended; the handler runs after three more.
    wait_in_log(proc, log, "TASK [k8sgpu.nvidia.container_toolkit : Add the nvidia runtime to containerd and CRI-O")
    kill(proc)
    assert "RUNNING HANDLER" not in log.read_text()
    assert daemon_json()["default-runtime"] == "nvidia"
    assert docker_loaded() == "runc"

    digest = converge(inventory, "controller killed between the daemon.json write and Docker's restart")
    assert digest == reference, diff(reference, digest)
    assert daemon_json()["log-level"] == "warn"


def test_controller_killed_between_containerds_drop_in_write_and_its_restart(inventory, reference, tmp_path):
    """The converged host, containerd's config.toml as the gpu-host image has it (before any run) and no drop-in,
    containerd restarted with them: host.yml killed once the toolkit has written the drop-in and the imports entry,
    before the restart handler. containerd runs runc as its default (its own CRI answer) until the re-run restarts
    it; today's re-run changed nothing and left it so."""
    start_converged()
    node_sh(HOST, f"printf '%s' {shlex.quote(FRESH['containerd'])} >/etc/containerd/config.toml; rm {DROP_IN}; "
                  "systemctl restart containerd")
    assert containerd_runtime_line(HOST).startswith("default=runc "), containerd_runtime_line(HOST)
    log = tmp_path / "faulted.log"
    proc = start_host_yml(inventory, log)
    wait_in_log(proc, log, "TASK [k8sgpu.nvidia.container_toolkit : Set GPU isolation in the NVIDIA runtime's")
    kill(proc)
    assert "RUNNING HANDLER" not in log.read_text()
    assert "nvidia" in node_sh(HOST, f"cat {DROP_IN}") and "conf.d" in node_sh(HOST, "cat /etc/containerd/config.toml")
    assert containerd_runtime_line(HOST).startswith("default=runc "), containerd_runtime_line(HOST)

    digest = converge(inventory, "controller killed between containerd's drop-in write and its restart")
    assert digest == reference, diff(reference, digest)


def test_host_frozen_longer_than_the_bound_during_the_toolkits_install(inventory, reference, tmp_path):
    """The converged host without the toolkit's packages: while apt fetches nvidia-container-toolkit (a proxy holds
    the .deb half-sent) the host is frozen (docker pause) for longer than the bound the run sets
    (container_toolkit_apt_lock_timeout 5 + container_toolkit_apt_timeout 20 = 25 s). The run fails within the
    bound, naming the host, the step and the variables; thawed, the re-run converges. Today's code had no bound: the
    run waited as long as the host stayed frozen.

    The run reaches the host over SSH, as a site's does: community.docker's docker connection (5.x) waits for its
    `docker exec` to end after the task's timeout (subprocess.Popen's __exit__), and on a frozen container that is
    never; ansible-core's ssh connection ends its ssh at the timeout."""
    start_converged()
    ssh_inventory = reach_over_ssh(tmp_path)
    node_sh(HOST, "apt-get purge -y -q --allow-change-held-packages nvidia-container-toolkit "
                  "nvidia-container-toolkit-base >/dev/null && apt-get clean")
    log = tmp_path / "faulted.log"
    with Relay("stall", match="nvidia-container-toolkit") as relay:
        proc = start_host_yml(ssh_inventory, log, "-e", f"container_toolkit_repo_proxy={relay.url}",
                              "-e", "container_toolkit_apt_lock_timeout=5", "-e", "container_toolkit_apt_timeout=20")
        relay.wait_stalled(proc, log)
        subprocess.run(["docker", "pause", HOST], check=True, capture_output=True)
        paused = time.monotonic()
        try:
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
            took = time.monotonic() - paused
            ended = proc.poll() is not None
        finally:
            if proc.poll() is None:
                kill(proc)
            subprocess.run(["docker", "unpause", HOST], check=True, capture_output=True)
            relay.handler.release.set()
    text = log.read_text()
    assert ended, f"the run still waited on the frozen host after {took:.0f} s: {text[-3000:]}"
    # The bound runs from the apt task's start, before the freeze; the rescue's message and the recap take a moment.
    assert proc.returncode != 0 and took < 30, (took, text[-3000:])
    assert f"fatal: [{HOST}]" in text and f"{HOST}: could not install" in text, text[-3000:]
    assert "Step 'Install the toolkit packages with apt' did not end within 25 s" in text, text[-3000:]
    assert "(container_toolkit_apt_lock_timeout + container_toolkit_apt_timeout)" in text, text[-3000:]
    # apt, on its own now, fetches the rest and installs.
    node_sh(HOST, "while pgrep -x apt-get >/dev/null; do sleep 0.5; done", timeout=300)

    digest = converge(inventory, "host frozen longer than the bound during the toolkit's install")
    assert digest == reference, diff(reference, digest)


def test_connection_cut_and_host_frozen_in_the_middle_of_a_download(inventory, reference, tmp_path):
    """The converged host without nvidia-persistenced: while apt fetches it (a proxy holds the .deb half-sent), the
    host's network is cut (iptables drops everything to and from the proxy's address), the rest of the .deb is sent
    into the cut, and the host is frozen (docker pause: the controller's connection to it stalls too) for 10 s, then
    thawed and its network restored. TCP resends what was lost; the run finishes, and a second run changes nothing."""
    start_converged()
    node_sh(HOST, "apt-get purge -y -q --allow-change-held-packages nvidia-persistenced >/dev/null && apt-get clean")
    log = tmp_path / "faulted.log"
    with Relay("stall", match="nvidia-persistenced") as relay:
        proc = start_host_yml(inventory, log, "-e", f"k8sgpu_apt_proxy={relay.url}")
        relay.wait_stalled(proc, log)
        rules = (f"INPUT -s {relay.host} -j DROP", f"OUTPUT -d {relay.host} -j DROP")
        node_sh(HOST, "; ".join(f"iptables -I {rule}" for rule in rules))
        relay.handler.release.set()
        subprocess.run(["docker", "pause", HOST], check=True, capture_output=True)
        time.sleep(10)
        subprocess.run(["docker", "unpause", HOST], check=True, capture_output=True)
        time.sleep(2)
        node_sh(HOST, "; ".join(f"iptables -D {rule}" for rule in rules))
        proc.wait(timeout=600)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert recap(text).get(HOST, {}).get("changed", 0) > 0, text[-3000:]
    assert node_sh(HOST, f"iptables -S | grep -c -F '{relay.host}/32' || true").strip() == "0"

    digest = converge(inventory, "network cut and host frozen in the middle of a download")
    assert digest == reference, diff(reference, digest)
