"""Runs of the role on the converged instance: check mode, and faults (a runtime that does not start with the
new configuration, a daemon.json that is not JSON)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
ROOT = SCENARIO.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "lab"))
from ansible_output import recap  # noqa: E402


def lab_key_fingerprint() -> str:
    """The fingerprint of the lab's toolkit repository key, from its copy in the lab's cache."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.k8sgpu.nvidia.plugins.filter.openpgp_fingerprints import openpgp_fingerprints  # noqa: E402

    cache = Path(os.environ.get("K8SGPU_CACHE", Path.home() / ".cache/k8sgpu-lab"))
    mirror = os.environ["K8SGPU_LAB_TOOLKIT_MIRROR"].split("/k8sgpu-mirror/", 1)[1]
    return openpgp_fingerprints((cache / "mirror" / mirror / "gpgkey").read_text())[0]


def play(host, *flags: str, **extra_vars) -> subprocess.CompletedProcess:
    """Apply the role to this instance only, as a user would, with extra variables."""
    name = host.backend.get_hostname()
    extra = {
        "container_toolkit_repo_url": os.environ["K8SGPU_LAB_TOOLKIT_MIRROR"],
        "container_toolkit_repo_proxy": "DIRECT",
        # The lab's key is served over http: pinned (issue 19).
        "container_toolkit_repo_key_fingerprint": lab_key_fingerprint(),
        **extra_vars,
    }
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    return subprocess.run(
        ["ansible-playbook", "-i", f"{name},", "-c", "community.docker.docker", str(SCENARIO / "faults.yml"),
         "-e", json.dumps(extra), *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )


def daemon_json(host) -> bytes:
    return host.check_output("base64 -w0 /etc/docker/daemon.json").encode()


def test_check_mode_on_the_converged_host_reports_no_change(host):
    before = daemon_json(host)
    cp = play(host, "--check", "--diff")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out
    assert recap(out)[host.backend.get_hostname()]["changed"] == 0, out
    assert daemon_json(host) == before


def test_docker_that_does_not_start_gets_its_previous_daemon_json_back(host):
    before = daemon_json(host)
    cp = play(host, container_toolkit_docker_settings={"k8sgpu-no-such-option": True})
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0, out
    assert "docker.service did not start with the NVIDIA runtime configuration in /etc/docker/daemon.json" in out, out
    assert "The previous configuration was restored and docker.service runs again with it." in out, out
    assert "k8sgpu-no-such-option" in out  # dockerd's own complaint, from the journal
    assert daemon_json(host) == before
    assert host.service("docker").is_running
    assert host.check_output("docker info --format '{{.DefaultRuntime}}'") == "nvidia"


def test_daemon_json_that_is_not_json_fails_and_stays_untouched(host):
    original = host.check_output("cat /etc/docker/daemon.json")
    broken = '{"log-driver": "json-file",\n  "storage-driver": vfs\n}\n'
    host.check_output(f"printf '%s' '{broken}' > /etc/docker/daemon.json")
    try:
        before = daemon_json(host)
        cp = play(host)
        out = cp.stdout + cp.stderr
        assert cp.returncode != 0, out
        assert "/etc/docker/daemon.json is not valid JSON" in out, out
        assert "line 2" in out
        assert daemon_json(host) == before
        assert host.service("docker").is_running  # not restarted with a broken file
    finally:
        host.check_output(f"cat > /etc/docker/daemon.json <<'EOF'\n{original}\nEOF")
