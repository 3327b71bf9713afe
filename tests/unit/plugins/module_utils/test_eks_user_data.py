"""_eks_user_data and the filter eks_gpu_user_data: the user data that isolates GPUs on the EKS nodes of
playbooks/eks.yml (issue 34 item 7). The script is run here with stand-ins for nvidia-ctk and systemctl (its
logic: set, check, otherwise mask the kubelet); tests/lab/test_eks_isolation.py runs it with the real nvidia-ctk
1.20.1 on a lab node and reads the real runtime's decision."""
from __future__ import annotations

import email
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter.eks_gpu_user_data import FilterModule, eks_gpu_user_data
from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _eks_user_data as ud
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_ctk import TOOLKIT_CONFIG_PATH, config_command

ROOT = Path(__file__).resolve().parents[4]
ON = "accept-nvidia-visible-devices-as-volume-mounts = true"
OFF = "accept-nvidia-visible-devices-envvar-when-unprivileged = false"


@pytest.mark.parametrize("ami,family", [("AL2023_x86_64_NVIDIA", "al2023"), ("AL2023_ARM_64_NVIDIA", "al2023"),
                                        ("BOTTLEROCKET_x86_64_NVIDIA", "bottlerocket"),
                                        ("BOTTLEROCKET_ARM_64_NVIDIA", "bottlerocket"),
                                        ("al2023@latest", "al2023"), ("al2023@v20251120", "al2023"),
                                        ("bottlerocket@latest", "bottlerocket")])
def test_family_of_ami_types_and_karpenter_aliases(ami, family):
    assert ud.family(ami) == family


@pytest.mark.parametrize("ami,words", [("AL2023_x86_64_STANDARD", "a GPU pool needs one of"),
                                       ("AL2_x86_64_GPU", "a GPU pool needs one of"), ("CUSTOM", "AL2023_x86_64_NVIDIA"),
                                       ("al2@latest", "AL2 reached its end of support"), ("", "neither"),
                                       (None, "neither")])
def test_an_ami_without_isolating_user_data_is_refused_naming_it(ami, words):
    with pytest.raises(ud.UserDataError) as exc:
        ud.gpu_user_data(ami)
    assert repr(ami) in str(exc.value) and words in str(exc.value)


def test_al2023_user_data_is_one_mime_shell_script_part_and_stable():
    text = ud.gpu_user_data("AL2023_x86_64_NVIDIA")
    assert text == ud.gpu_user_data("al2023@latest")  # the same bytes every call: no new template version per run
    msg = email.message_from_string(text)
    assert msg.is_multipart() and msg.get_content_type() == "multipart/mixed" and msg["MIME-Version"] == "1.0"
    parts = msg.get_payload()
    assert [p.get_content_type() for p in parts] == ["text/x-shellscript"]
    assert parts[0].get_payload() == ud.isolation_script()
    assert ud.script_of(text) == ud.isolation_script()


def test_the_script_runs_the_container_toolkit_config_modules_command():
    script = ud.isolation_script()
    assert script.startswith("#!/bin/bash\n")
    cmd = shlex.join(config_command("nvidia-ctk", TOOLKIT_CONFIG_PATH, ud.ISOLATION_SETTINGS))
    assert cmd == ("nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place "
                   "--set=accept-nvidia-visible-devices-as-volume-mounts=true "
                   "--set=accept-nvidia-visible-devices-envvar-when-unprivileged=false")
    assert f"\n{cmd} || refuse" in script
    assert ud.expected_lines() == [ON, OFF]
    assert ud.DEVICE_LIST_STRATEGY == ("volume-mounts",)


def test_bottlerocket_user_data_is_toml_with_the_same_two_decisions():
    settings = tomllib.loads(ud.gpu_user_data("BOTTLEROCKET_x86_64_NVIDIA"))
    assert settings == {"settings": {"nvidia-container-runtime": {
        "visible-devices-as-volume-mounts": True, "visible-devices-envvar-when-unprivileged": False}}}


def test_filter_returns_the_text_and_names_a_refused_value():
    assert FilterModule().filters()["eks_gpu_user_data"] is eks_gpu_user_data
    assert eks_gpu_user_data("al2023@latest") == ud.gpu_user_data("al2023@latest")
    with pytest.raises(AnsibleFilterError, match=r"eks_gpu_user_data: AMI type 'AL2023_x86_64_STANDARD'"):
        eks_gpu_user_data("AL2023_x86_64_STANDARD")


# ---- the script's logic, with stand-ins for nvidia-ctk and systemctl ----
FAKE_CTK = """#!/bin/bash
# Stand-in for nvidia-ctk config --in-place: appends each --set=key=value as 'key = value' (FAKE_CTK_MODE: fail,
# or noop to write nothing).
echo "$@" >> "$LOG"
[ "${FAKE_CTK_MODE:-}" = fail ] && { echo "unknown flag" >&2; exit 2; }
[ "${FAKE_CTK_MODE:-}" = noop ] && exit 0
for a in "$@"; do
  case "$a" in --config-file=*) f=${a#--config-file=} ;; esac
done
for a in "$@"; do
  case "$a" in --set=*) kv=${a#--set=}; echo "${kv%%=*} = ${kv#*=}" >> "$f" ;; esac
done
"""
FAKE_SYSTEMCTL = '#!/bin/bash\necho "systemctl $*" >> "$LOG"\n'


def run_script(tmp_path: Path, mode: str | None, with_ctk: bool = True) -> tuple[subprocess.CompletedProcess, str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if with_ctk:
        (bindir / "nvidia-ctk").write_text(FAKE_CTK)
        (bindir / "nvidia-ctk").chmod(0o755)
    (bindir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bindir / "systemctl").chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text("#accept-nvidia-visible-devices-as-volume-mounts = false\n")
    log = tmp_path / "log"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "LOG": str(log), **({"FAKE_CTK_MODE": mode} if mode else {})}
    script = tmp_path / "user-data.sh"
    script.write_text(ud.isolation_script(config_path=str(config)))
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    return proc, config.read_text(), log.read_text() if log.exists() else ""


def test_script_sets_both_keys_and_leaves_the_kubelet_alone(tmp_path):
    proc, config, log = run_script(tmp_path, None)
    assert proc.returncode == 0, proc.stderr
    assert ON in config.splitlines() and OFF in config.splitlines()
    assert "systemctl" not in log
    assert f"--config-file={tmp_path / 'config.toml'} --in-place" in log
    assert "k8sgpu.nvidia GPU isolation: set in" in proc.stdout


@pytest.mark.parametrize("mode,with_ctk,why", [(None, False, "nvidia-ctk not found"),
                                               ("fail", True, "nvidia-ctk config failed on"),
                                               ("noop", True, "does not hold the isolation settings")])
def test_script_masks_the_kubelet_when_isolation_is_not_in_place(tmp_path, mode, with_ctk, why):
    proc, _config, log = run_script(tmp_path, mode, with_ctk)
    assert proc.returncode == 1
    assert why in proc.stderr and "the kubelet is masked: this node does not join the cluster" in proc.stderr
    assert "systemctl mask --runtime kubelet.service" in log


# ---- where the user data goes: the Karpenter EC2NodeClass ----
def render_ec2nodeclass(tmp_path: Path, alias: str) -> subprocess.CompletedProcess:
    role = ROOT / "roles/karpenter_gpu"
    out = tmp_path / "nodeclass.json"
    book = tmp_path / "render.yml"
    book.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(role / "defaults/main.yml"), str(role / "vars/main.yml")],
        "tasks": [{"ansible.builtin.copy": {
            "content": "{{ lookup('ansible.builtin.template', '%s') | from_yaml | to_json }}"
                       % (role / "templates/ec2nodeclass.yml.j2"),
            "dest": str(out)}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    extra = {"karpenter_gpu_cluster_name": "train", "karpenter_gpu_node_role": "train-nodes",
             "karpenter_gpu_ami_alias": alias, "ansible_python_interpreter": sys.executable}
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(book), "-e", json.dumps(extra)],
                          cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_ec2nodeclass_carries_the_isolating_user_data(tmp_path):
    proc = render_ec2nodeclass(tmp_path, "al2023@v20251120")
    assert proc.returncode == 0, proc.stdout[-3000:]
    spec = json.loads((tmp_path / "nodeclass.json").read_text())["spec"]
    assert spec["userData"] == ud.gpu_user_data("al2023@latest")
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@v20251120"}]


def test_ec2nodeclass_with_al2_is_refused(tmp_path):
    proc = render_ec2nodeclass(tmp_path, "al2@latest")
    assert proc.returncode != 0
    # where the failure is printed and how depends on the ansible-core version: 2.17's yaml callback doubles the
    # quotes of a single-quoted scalar and wraps it; other versions may write it to stderr
    output = " ".join((proc.stdout + proc.stderr).split()).replace("''", "'")
    assert "Karpenter AMI alias 'al2@latest'" in output, output[-3000:]
