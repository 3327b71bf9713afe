"""The fault suite's shared parts (tests/lab/test_faults_host.py, test_faults_k8s.py; issue 51 item 2).

* A controller killed as it dies on a site: ansible-playbook and every one of its workers. Each worker calls
  os.setsid() (ansible-core's WorkerProcess), so killing ansible-playbook's process group leaves the workers, and the
  connection commands they started, running; the run started here carries a marker in its environment
  (``MARKER``) that every process it forks inherits, and ``kill_run`` kills each process that has it.
* What each runtime runs with, read from the running daemon, not from its files: Docker's ``docker info`` (default
  runtime, runtimes) and containerd's CRI plugin configuration as containerd itself reports it (the CRI
  ``RuntimeService/Status`` call with ``verbose``, whose ``info["config"]`` is the loaded configuration), over the
  node container's containerd socket.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

MARKER = "K8SGPU_FAULT_RUN"


def marked_env(env: dict | None = None) -> tuple[dict, str]:
    """``env`` (default os.environ) with a fresh marker; the marker."""
    marker = uuid.uuid4().hex
    return {**(os.environ if env is None else env), MARKER: marker}, marker


def marked_pids(marker: str) -> list[int]:
    """The processes whose environment holds MARKER=marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as env:
                if needle in env.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_run(proc: subprocess.Popen, marker: str, timeout: float = 30) -> list[int]:
    """SIGKILL ansible-playbook (``proc``) and every process of its run (workers, connection commands); waits until
    none is left. Returns the pids killed."""
    killed = []
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in marked_pids(marker) if p != os.getpid()]
        if proc.poll() is None and proc.pid not in pids:
            pids.append(proc.pid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        proc.poll()
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of the run {marker} still alive after SIGKILL: {pids}")
        time.sleep(0.1)
    proc.wait(timeout=timeout)
    return sorted(set(killed))


# ---------------------------------------------------------------- containerd's loaded configuration (CRI)

def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes):
    """(field number, value) of a protobuf message: ints for varints, bytes for the rest."""
    i = 0
    while i < len(data):
        tag, i = _varint(data, i)
        kind = tag & 7
        if kind == 0:
            value, i = _varint(data, i)
        elif kind == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif kind == 1:
            value, i = data[i:i + 8], i + 8
        elif kind == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {kind}")
        yield tag >> 3, value


def containerd_loaded_config(container: str, timeout: float = 10) -> dict:
    """The CRI plugin configuration containerd in node container ``container`` runs with (its own answer).

    StatusRequest{verbose: true} is the bytes 08 01; StatusResponse's field 2 is the map info, whose "config" is the
    CRI plugin's configuration as JSON (containerd.defaultRuntimeName, containerd.runtimes, enableCDI, ...).
    """
    import grpc  # in the development venv through google-cloud-container (grpcio)

    pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", container], capture_output=True, text=True,
                         check=True).stdout.strip()
    channel = grpc.insecure_channel(f"unix:///proc/{pid}/root/run/containerd/containerd.sock")
    try:
        reply = channel.unary_unary("/runtime.v1.RuntimeService/Status")(b"\x08\x01", timeout=timeout)
    finally:
        channel.close()
    info = {}
    for number, value in _fields(reply):
        if number == 2:
            entry = dict(_fields(value))
            info[entry[1].decode()] = entry[2].decode()
    return json.loads(info["config"])


def containerd_runtime_line(container: str) -> str:
    """containerd's default runtime and each runtime's type and binary, as the running daemon has them."""
    config = containerd_loaded_config(container)["containerd"]
    runtimes = " ".join(f"{name}={spec.get('runtimeType', '')}:{(spec.get('options') or {}).get('BinaryName', '')}"
                        for name, spec in sorted((config.get("runtimes") or {}).items()))
    return f"default={config.get('defaultRuntimeName', '')} {runtimes}"


DOCKER_LOADED = "docker info -f '{{.DefaultRuntime}} {{range $n, $r := .Runtimes}}{{$n}}={{$r.Path}} {{end}}'"
