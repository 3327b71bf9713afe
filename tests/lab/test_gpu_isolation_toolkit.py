"""GPU isolation and the toolkit's repository credentials on a real node (issue 19, items 1, 2 and 6).

One fresh node container of the lab's recipe (lab/lab.sh node, Debian 12, systemd) with containerd installed, and a
kwok Node of the same name, both removed at the end. The toolkit comes from the lab's NVIDIA repository (built from
NVIDIA's sources, served over http by the lab's apt-cacher-ng), its key pinned by the fingerprint of the lab's key.

1. The host is converged as the role did before GPU isolation (the isolation tasks skipped by their tag): the
   toolkit's config.toml is what its postinst wrote, envvar requests accepted.
2. node_maintenance's plan (upgrade.yml's and host.yml's first step with k8sgpu_drain_before_restart) must report the
   config.toml change as a reason to drain, and change nothing on the host.
3. The role with its defaults then sets the two keys through nvidia-ctk (real nvidia-ctk 1.20), backs the file up,
   restarts containerd (the handler), and changes nothing on a second run; the plan then needs no window.
4. Item 6: a proxy with user:password@ goes to auth.conf.d (0600), not to apt.conf.d nor into the output; a wrong
   fingerprint fails naming both; an http:// key URL without a fingerprint is refused naming the fix.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from ansible_output import recap
from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run

sys.path.insert(0, str(ROOT / "lab"))
sys.path.insert(0, str(ROOT / "collections"))
from topology import node as kwok_node  # noqa: E402  # pylint: disable=wrong-import-position
from ansible_collections.k8sgpu.nvidia.plugins.filter.openpgp_fingerprints import openpgp_fingerprints  # noqa: E402

HOST = f"{LAB_NAME}-isolation-1"
CONFIG = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_OFF = "accept-nvidia-visible-devices-envvar-when-unprivileged = false"
MOUNTS_ON = "accept-nvidia-visible-devices-as-volume-mounts = true"
CACHE = Path(os.environ.get("K8SGPU_CACHE", Path.home() / ".cache/k8sgpu-lab"))
PLAN = ROOT / "tests/lab/playbooks/maintenance_plan.yml"
ROLE = """\
- name: The container_toolkit role
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - k8sgpu.nvidia.container_toolkit
"""


def sh(cmd: str, check: bool = True) -> str:
    return node_sh(HOST, cmd, check)


def lab_key() -> str:
    mirror_url = (LAB_STATE / "toolkit-mirror-url").read_text().strip()
    key = CACHE / "mirror" / mirror_url.split("/k8sgpu-mirror/", 1)[1] / "gpgkey"
    assert key.is_file(), f"{key}: the lab's toolkit repository is missing (make lab builds it)"
    return key.read_text()


@pytest.fixture(scope="module")
def inv(tmp_path_factory, core: client.CoreV1Api):
    inv_dir = tmp_path_factory.mktemp("isolation-inventory")
    fingerprint = openpgp_fingerprints(lab_key())[0]
    try:
        cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", HOST, "bookworm"], capture_output=True, text=True,
                            check=False)
        assert cp.returncode == 0, cp.stderr
        proxy = (LAB_STATE / "apt-proxy-url").read_text().strip()
        sh(f"echo 'Acquire::http::Proxy \"{proxy}\";' > /etc/apt/apt.conf.d/90lab-proxy")
        sh("apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
           "containerd && systemctl is-active containerd")
        try:
            core.delete_node(HOST)  # left by an interrupted run
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        core.create_node(kwok_node(HOST, {}, [], {"nvidia.com/gpu": "8"}))
        (inv_dir / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
        (inv_dir / "hosts.yml").write_text(json.dumps({"all": {"children": {
            "gpu_nodes": {"hosts": {HOST: {"k8sgpu_node_name": HOST}},
                          "vars": {"ansible_connection": "community.docker.docker",
                                   "ansible_python_interpreter": "/usr/bin/python3",
                                   "container_toolkit_repo_key_fingerprint": fingerprint,
                                   "container_toolkit_runtimes": ["containerd"]}},
            "k8s_control_plane": {"hosts": {"localhost": {
                "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        }}}))
        (inv_dir / "plan.yml").write_text(PLAN.read_text(encoding="utf-8"))
        (inv_dir / "role.yml").write_text(ROLE)
        yield inv_dir
    finally:
        try:
            core.delete_node(HOST)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        subprocess.run(["docker", "rm", "-f", HOST], capture_output=True, check=False)


def play(inv: Path, book: str, *args: str) -> subprocess.CompletedProcess:
    return run(["ansible-playbook", "-i", str(inv / "hosts.yml"), str(inv / book), *args],
               env_extra={"K8SGPU_LAB_STATE": str(LAB_STATE)})


def containerd_started() -> str:
    return sh("systemctl show -p ExecMainStartTimestampMonotonic --value containerd").strip()


@pytest.fixture(scope="module")
def old_site(inv):
    """The host as the role left it before GPU isolation: the isolation tasks skipped by their tag."""
    cp = play(inv, "role.yml", "--skip-tags", "container_toolkit_isolation")
    assert cp.returncode == 0, cp.stdout[-5000:] + cp.stderr[-2000:]
    text = sh(f"cat {CONFIG}")
    assert ENVVAR_OFF not in text and MOUNTS_ON not in text, text  # the postinst's file, NVIDIA's defaults
    return text


def test_plan_reports_the_isolation_change_and_changes_nothing(inv, old_site):
    before = sh(f"stat -c '%s %Y %a' {CONFIG}; sha256sum {CONFIG}; ls -R /var/backups 2>/dev/null || true")
    started = containerd_started()
    plan_file = inv / "plan.json"
    cp = play(inv, "plan.yml", "-e", f"plan_file={plan_file}")
    assert cp.returncode == 0, cp.stdout[-5000:] + cp.stderr[-2000:]
    plan = json.loads(plan_file.read_text())
    assert plan["needed"] is True, plan
    assert plan["reasons"] == [f"container toolkit: {CONFIG} would change"], plan
    assert f"maintenance needed: container toolkit: {CONFIG} would change" in " ".join(cp.stdout.split())
    assert sh(f"stat -c '%s %Y %a' {CONFIG}; sha256sum {CONFIG}; ls -R /var/backups 2>/dev/null || true") == before
    assert containerd_started() == started


def test_role_sets_isolation_through_nvidia_ctk_and_restarts_the_runtime(inv, old_site):
    started = containerd_started()
    cp = play(inv, "role.yml", "--diff")
    out = cp.stdout
    assert cp.returncode == 0, out[-5000:] + cp.stderr[-2000:]
    text = sh(f"cat {CONFIG}")
    assert f"\n{ENVVAR_OFF}\n" in f"\n{text}" and f"\n{MOUNTS_ON}\n" in f"\n{text}", text
    # nvidia-ctk's own layout: the postinst's other lines kept as they were.
    assert [ln for ln in text.splitlines() if "accept-nvidia" not in ln] == \
        [ln for ln in old_site.splitlines() if "accept-nvidia" not in ln]
    assert f"-#{ENVVAR_OFF.replace('false', 'true')}" in out or f"-{ENVVAR_OFF.replace('false', 'true')}" in out, out
    assert f"+{ENVVAR_OFF}" in out, out[-4000:]
    backups = sh(f"ls /var/backups/k8sgpu.nvidia{CONFIG}.*").split()
    assert len(backups) == 1 and sh(f"cat {backups[0]}") == old_site
    assert "GPU isolation: on (" + CONFIG + " changed)" in " ".join(out.split())
    assert containerd_started() != started, "the handler did not restart containerd"
    # Idempotent, and the plan then needs no maintenance window.
    again = play(inv, "role.yml")
    assert again.returncode == 0 and recap(again.stdout)[HOST]["changed"] == 0, again.stdout[-4000:]
    plan_file = inv / "plan-after.json"
    cp = play(inv, "plan.yml", "-e", f"plan_file={plan_file}")
    assert cp.returncode == 0 and json.loads(plan_file.read_text()) == {"needed": False, "reasons": []}


def test_isolation_off_is_the_old_behaviour(inv, old_site):
    cp = play(inv, "role.yml", "-e", "container_toolkit_isolate_gpus=false")
    assert cp.returncode == 0, cp.stdout[-4000:]
    text = sh(f"cat {CONFIG}")
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = true" in text and MOUNTS_ON in text, text
    assert "GPU isolation: OFF" in cp.stdout
    back = play(inv, "role.yml")
    assert back.returncode == 0 and ENVVAR_OFF in sh(f"cat {CONFIG}")


def test_proxy_credentials_go_to_auth_conf_only(inv, old_site):
    gateway = (LAB_STATE / "apt-proxy-url").read_text().strip().split("//", 1)[1]
    extra = {"container_toolkit_repo_proxy": f"http://k8sgpu%40lab:s3cret-pw@{gateway}",
             "container_toolkit_repo_key": lab_key()}
    cp = play(inv, "role.yml", "--diff", "-vvv", "-e", json.dumps(extra))
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out[-5000:]
    assert "s3cret-pw" not in out
    proxy_file = "/etc/apt/apt.conf.d/90k8sgpu-nvidia-container-toolkit-proxy"
    auth_file = "/etc/apt/auth.conf.d/90k8sgpu-nvidia-container-toolkit-proxy.conf"
    assert "s3cret" not in sh(f"cat {proxy_file}") and f'"http://{gateway}";' in sh(f"cat {proxy_file}")
    assert sh(f"stat -c '%a %U' {proxy_file}").split() == ["644", "root"]
    assert sh(f"stat -c '%a %U' {auth_file}").split() == ["600", "root"]
    assert sh(f"cat {auth_file}").splitlines() == [f"machine http://{gateway}", "login k8sgpu@lab",
                                                   "password s3cret-pw"]
    # apt itself reads the proxy without the password (apt-config shows what apt.conf.d gives it).
    assert "s3cret" not in sh("apt-config dump | grep -i proxy || true")
    # Back to the lab's DIRECT: the credentials go, the proxy file says DIRECT.
    cp = play(inv, "role.yml", "-e", json.dumps({"container_toolkit_repo_key": lab_key()}))
    assert cp.returncode == 0
    assert "No such file" in sh(f"ls {auth_file} 2>&1 || true")
    assert '"DIRECT";' in sh(f"cat {proxy_file}")


def test_a_key_with_another_fingerprint_fails_naming_both(inv, old_site):
    wrong = "0123 4567 89AB CDEF 0123  4567 89AB CDEF 0123 4567"
    keyring = sh("sha256sum /etc/apt/keyrings/nvidia-container-toolkit.asc")
    cp = play(inv, "role.yml", "-e", f"container_toolkit_repo_key_fingerprint='{wrong}'")
    out = " ".join(cp.stdout.split())
    assert cp.returncode != 0
    assert f"has the fingerprint(s) {openpgp_fingerprints(lab_key())[0]}, not {wrong.replace(' ', '')}" in out, out
    assert sh("sha256sum /etc/apt/keyrings/nvidia-container-toolkit.asc") == keyring


def test_http_key_url_without_fingerprint_is_refused(inv, old_site):
    cp = play(inv, "role.yml", "-e", "container_toolkit_repo_key_fingerprint=''")
    out = " ".join(cp.stdout.split())
    assert cp.returncode != 0
    assert "is plain http://" in out and "Set container_toolkit_repo_key_fingerprint" in out, out[-3000:]
