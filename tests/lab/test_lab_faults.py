"""lab/lab.sh up fails clearly, and leaves nothing started behind, on bad conditions."""
from __future__ import annotations

import fcntl
import os
import select
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT

LAB = str(ROOT / "lab" / "lab.sh")


def _lab(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {
        **os.environ,
        # A lab of its own, so the running one is not touched.
        "K8SGPU_LAB_NAME": "k8sgpu-faulttest",
        "K8SGPU_LAB_STATE": str(tmp_path / "state"),
        **env,
    }
    return subprocess.run([LAB, *args], env=full_env, capture_output=True, text=True, timeout=600, check=False)


def _docker_names(kind: str) -> str:
    return subprocess.run(["docker", kind, "ls", "--format", "{{.Name}}" if kind == "network" else "{{.Names}}"],
                          capture_output=True, text=True, check=True).stdout


def _listen(low: int = 20000, high: int = 32767) -> socket.socket:
    """A listening socket on a free port apt-cacher-ng could use (it needs one below 32768)."""
    for port in range(low, high):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        s.listen()
        return s
    raise RuntimeError("no free port")


def _free_port() -> int:
    with _listen() as s:
        return s.getsockname()[1]


def test_taken_apt_proxy_port(tmp_path):
    with _listen() as s:
        port = s.getsockname()[1]
        res = _lab(tmp_path, "up", K8SGPU_LAB_APT_PROXY_PORT=str(port))
    assert res.returncode != 0
    assert f"port {port} (apt proxy) is taken by" in res.stderr, res.stderr
    assert "set K8SGPU_LAB_APT_PROXY_PORT" in res.stderr
    # The network this run created was removed again.
    assert "k8sgpu-faulttest" not in _docker_names("network")


def test_taken_apiserver_port(tmp_path):
    with _listen(33000, 60000) as s:
        port = s.getsockname()[1]
        res = _lab(tmp_path, "up", K8SGPU_LAB_APISERVER_PORT=str(port), K8SGPU_LAB_APT_PROXY_PORT=str(_free_port()))
    assert res.returncode != 0
    assert f"port {port} (kube-apiserver) is taken by" in res.stderr, res.stderr[-3000:]
    # Node containers, network and apt proxy started by this run are gone.
    assert "k8sgpu-faulttest" not in _docker_names("container")
    assert "k8sgpu-faulttest" not in _docker_names("network")
    pid_file = tmp_path / "state" / "apt-cacher-ng.pid"
    assert not pid_file.exists()


def test_apt_proxy_port_out_of_range(tmp_path):
    res = _lab(tmp_path, "up", K8SGPU_LAB_APT_PROXY_PORT="40000")
    assert res.returncode != 0
    assert "apt-cacher-ng needs a port between 1 and 32767" in res.stderr, res.stderr


def test_short_disk(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        res = _lab(tmp_path, "up", K8SGPU_CACHE=str(small))
    finally:
        subprocess.run(["umount", str(small)], check=False)
    assert res.returncode != 0
    assert f"MiB free under {small}" in res.stderr and "set K8SGPU_CACHE" in res.stderr, res.stderr


def test_go_build_failure_shows_the_go_error(tmp_path):
    env = {**os.environ, "K8SGPU_CACHE": str(tmp_path / "cache"), "ETCD_VERSION": "v3.6.999",
           "GOMODCACHE_LAB": str(tmp_path / "gomod"), "GOCACHE_LAB": str(tmp_path / "gocache")}
    res = subprocess.run([str(ROOT / "lab" / "build-binaries.sh"), "etcd"], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)  # Go makes its module cache read-only
    assert res.returncode != 0
    assert "building etcd v3.6.999 (go mod tidy) failed" in res.stderr, res.stderr
    # The Go tool's own message is shown, not just "failed".
    assert "v3.6.999" in res.stderr.split("----- last 40 lines")[1]


def test_docker_engine_that_cannot_start(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    dockerd = fake / "dockerd"
    dockerd.write_text("#!/bin/sh\necho 'failed to start daemon: pid file found, ensure docker is not running' >&2\nexit 1\n")
    dockerd.chmod(0o755)
    res = _lab(tmp_path, "up", PATH=f"{fake}:{os.environ['PATH']}", DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert res.returncode != 0
    assert "the Docker engine could not be started" in res.stderr, res.stderr
    assert "pid file found" in res.stderr  # dockerd's own error is shown


# lab/build-binaries.sh locks per target: `lab.sh up` (the lab group) never waits for a build of what only tests use,
# and a second build of one target waits for the first. A scratch cache where every lab target is present (empty
# programs: the script only checks for them), under made-up versions so nothing real is touched.
FAKE_VERSIONS = {"K8S_VERSION": "v1.99.0", "ETCD_VERSION": "v3.99.0", "KWOK_VERSION": "v0.99.0",
                 "NVIDIA_CTK_VERSION": "v1.99.0"}


def _scratch_cache(tmp_path: Path) -> dict:
    env = {**os.environ, **FAKE_VERSIONS, "K8SGPU_CACHE": str(tmp_path / "cache")}
    where = f"source {ROOT}/lab/lib.sh; k8s_bin_dir; etcd_bin_dir; kwok_bin_dir; toolkit_repo_dir"
    dirs = subprocess.run(["bash", "-c", where], env=env, capture_output=True, text=True, check=True).stdout.split()
    k8s, etcd, kwok, toolkit = map(Path, dirs)
    files = [k8s / b for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")]
    files += [etcd / "etcd", kwok / "kwok", kwok / "kwokctl"]
    files += [toolkit / "libnvidia-container/stable/deb/amd64/InRelease"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    return env


def _hold(cache: Path, target: str):
    """The lock a running build of `target` holds (flock: another open of the file conflicts)."""
    fh = open(cache / f".build-{target}.lock", "w", encoding="utf-8")  # pylint: disable=consider-using-with
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def _builder(env: dict, *targets: str) -> subprocess.Popen:
    return subprocess.Popen([str(ROOT / "lab" / "build-binaries.sh"), *targets], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_lab_group_does_not_wait_for_the_tests_builds(tmp_path):
    env = _scratch_cache(tmp_path)
    cache = Path(env["K8SGPU_CACHE"])
    held = [_hold(cache, t) for t in ("crio-config", "prometheus", "adapter", "karpenter")]
    try:
        with _builder(env, "lab") as proc:
            err = proc.communicate(timeout=60)[1]
    finally:
        for fh in held:
            fh.close()
    assert proc.returncode == 0, err
    for what in ("kwok v0.99.0: cached", "etcd v3.99.0: cached", "kubernetes v1.99.0: cached",
                 "toolkit repository: cached"):
        assert what in err, err
    assert "waiting" not in err and "prometheus" not in err, err


def _output_until(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    """proc's stderr up to the first line that contains text; fails after timeout s or at the end of its output.
    Read from the pipe's descriptor (select, os.read), so the rest stays for communicate()."""
    fd, seen = proc.stderr.fileno(), b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(left, 0))[0]
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"{proc.args}: nothing with {text!r} in its output after {timeout} s: {seen.decode()}")
        seen += chunk
    return seen.decode()


def test_a_second_build_of_a_target_waits_for_the_first(tmp_path):
    env = _scratch_cache(tmp_path)
    cache = Path(env["K8SGPU_CACHE"])
    fh = _hold(cache, "etcd")
    try:
        with _builder(env, "etcd") as waiting:
            # It says it waits (was: a fixed 2 s sleep, which a loaded machine could outrun).
            said = _output_until(waiting, "waiting for it")
            # Another target is not held up by it.
            other = subprocess.run([str(ROOT / "lab" / "build-binaries.sh"), "kwok"], env=env, capture_output=True,
                                   text=True, timeout=60, check=False)
            assert other.returncode == 0 and "kwok v0.99.0: cached" in other.stderr, other.stderr
            assert waiting.poll() is None, "build-binaries.sh etcd did not wait for the running build of etcd"
            fh.close()
            err = said + waiting.communicate(timeout=60)[1]
    finally:
        fh.close()
    assert waiting.returncode == 0, err
    assert "etcd: another build of it is running" in err and "waiting for it" in err, err
    assert err.index("waiting for it") < err.index("etcd v3.99.0: cached"), err


def test_unknown_build_target_names_the_targets(tmp_path):
    env = _scratch_cache(tmp_path)
    res = subprocess.run([str(ROOT / "lab" / "build-binaries.sh"), "prometheus-adapter"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode != 0
    assert "unknown target 'prometheus-adapter'" in res.stderr, res.stderr
    assert "extras: helm alertmanager crio-config prometheus adapter karpenter" in res.stderr, res.stderr


def test_lab_sh_lock_is_not_held_by_the_daemons_it_starts(tmp_path):
    # lab.sh up/images run one at a time per state directory; the daemons they leave running (dockerd, apt-cacher-ng,
    # the control plane) must not inherit the lock, or the next `make lab` would wait for as long as the lab runs.
    fake = tmp_path / "bin"
    fake.mkdir()
    left = tmp_path / "left.pid"
    dockerd = fake / "dockerd"
    # A "dockerd" that leaves a process behind (as dockerd leaves containerd), then fails.
    dockerd.write_text(f"#!/bin/sh\nsetsid sleep 30 >/dev/null 2>&1 </dev/null &\necho $! >>{left}\nsleep 1\nexit 1\n")
    dockerd.chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    first = subprocess.Popen([LAB, "images"], env={**os.environ, "K8SGPU_LAB_NAME": "k8sgpu-faulttest",
                                                   "K8SGPU_LAB_STATE": str(tmp_path / "state"), **env},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = tmp_path / "state" / "lab-sh.lock"
    try:
        # Until the first holds lab.sh's lock (was: a fixed 0.5 s sleep, which a loaded machine could outrun).
        deadline = time.monotonic() + 60
        while not (lock.exists() and subprocess.run(["flock", "-n", str(lock), "true"], check=False).returncode):
            assert first.poll() is None and time.monotonic() < deadline, "the first lab.sh images never took its lock"
            time.sleep(0.05)
        second = _lab(tmp_path, "images", **env)  # waits for the first, then fails the same way
        assert "another lab.sh up/images is running" in second.stderr, second.stderr
        assert "the Docker engine could not be started" in second.stderr, second.stderr
        assert first.wait(timeout=60) != 0
        pids = [int(p) for p in left.read_text(encoding="utf-8").split()]
        assert pids and all(Path(f"/proc/{p}").exists() for p in pids), "the fake dockerd's processes should still run"
        held = [f"{pid}: {os.readlink(fd)}" for pid in pids for fd in Path(f"/proc/{pid}/fd").iterdir()
                if os.readlink(fd).startswith(str(tmp_path / "state"))]
        assert not held, f"processes lab.sh left running hold its files open (the lock among them): {held}"
        free = subprocess.run(["flock", "-n", str(lock), "true"], check=False)
        assert free.returncode == 0, f"{lock} is still held after lab.sh ended"
    finally:
        first.kill()
        for pid in left.read_text(encoding="utf-8").split() if left.exists() else []:
            subprocess.run(["kill", pid], check=False)
