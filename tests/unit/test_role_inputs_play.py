"""k8sgpu.nvidia.role_inputs in real ansible-playbook runs against localhost: the roles' first task, after
ansible-core's argument spec validation. --tags with no matching tag runs only the tasks tagged always, so the
roles stop after their input checks and nothing on the host is touched."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def play(tmp_path, tasks, extra=None, check=False, hosts="localhost,", args=()):
    book = tmp_path / "play.yml"
    book.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", hosts, "-c", "local", str(book),
           "--tags", "role_inputs_none", "-e", json.dumps(extra or {})]
    if check:
        cmd.append("--check")
    cmd += list(args)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="yaml",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    # whitespace flattened: ansible-core before 2.19 wraps warnings at the terminal's width
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def role(name, **kw):
    return {"ansible.builtin.include_role": {"name": "k8sgpu.nvidia." + name, **kw}, "tags": ["always"]}


def test_misspelt_variable_warns_and_the_run_goes_on(tmp_path):
    rc, out = play(tmp_path, [role("driver")], {"driver_brnach": "550", "driver_branch": "550",
                                                "karpenter_gpu_wieght": 5}, check=True)
    assert rc == 0, out
    assert ("[WARNING]: driver: variable driver_brnach is not a variable of the role, so it has no effect; "
            "did you mean driver_branch?") in out
    assert "karpenter_gpu_wieght" not in out  # karpenter_gpu's, not the driver's
    assert "changed=0" in out


def test_nested_taint_effect_fails_at_the_role_validation(tmp_path):
    rc, out = play(tmp_path, [role("karpenter_gpu")],
                   {"karpenter_gpu_taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoScheduleX"}]})
    assert rc == 2, out
    assert ("value of effect must be one of: NoSchedule, PreferNoSchedule, NoExecute, got: NoScheduleX found in "
            "karpenter_gpu_taints") in out
    assert "Check the role's inputs" not in out  # stopped before


def test_weight_and_unquoted_taint_value_fail_at_the_first_task_naming_host_role_and_values(tmp_path):
    rc, out = play(tmp_path, [role("karpenter_gpu")],
                   {"karpenter_gpu_weight": 1000,
                    "karpenter_gpu_taints": [{"key": "nvidia.com/gpu", "value": True, "effect": "NoSchedule"}]})
    assert rc == 2, out
    assert "TASK [k8sgpu.nvidia.karpenter_gpu : Check the role's inputs]" in out
    assert "localhost: k8sgpu.nvidia.karpenter_gpu (entry point main): 2 inputs refused" in out
    assert "karpenter_gpu_weight is 1000; give a Karpenter NodePool weight from 1 to 100" in out
    assert "karpenter_gpu_taints[0].value is True (bool)" in out


def test_role_params_are_checked(tmp_path):
    rc, out = play(tmp_path, [{"ansible.builtin.include_role": {"name": "k8sgpu.nvidia.gpu_autoscaling"},
                               "vars": {"gpu_autoscaling_target_value": 150}, "tags": ["always"]}])
    assert rc == 2, out
    assert "gpu_autoscaling_target_value is 150" in out and "from 1 to 100" in out


def test_string_for_a_list_fails_before_any_template(tmp_path):
    rc, out = play(tmp_path, [role("container_toolkit")], {"container_toolkit_runtimes": "docker,containerd"})
    assert rc == 2, out
    assert "container_toolkit_runtimes is 'docker,containerd' (str)" in out and "a YAML list" in out


def test_other_entry_point_and_its_copy_inside_main(tmp_path):
    # driver's entry point plan checks with plan's spec; node_maintenance's main imports drain.yml, whose copy of the
    # task returns at once, so the warning comes once.
    rc, out = play(tmp_path, [role("driver", tasks_from="plan"), role("node_maintenance")],
                   {"driver_branch": "550", "driver_version": "535.216.03"})
    assert rc == 2, out
    assert "k8sgpu.nvidia.driver (entry point plan): 1 input refused" in out
    rc, out = play(tmp_path, [role("node_maintenance")], {"node_maintenance_drian_timeout": 5}, check=True)
    assert rc == 0, out
    assert out.count("node_maintenance_drian_timeout is not a variable") == 1, out
    assert "did you mean node_maintenance_drain_timeout?" in out


@pytest.mark.parametrize("extra", [{}, {"driver_branch": 550, "driver_hold": False}])
def test_good_inputs_pass_in_check_mode_changing_nothing(tmp_path, extra):
    rc, out = play(tmp_path, [role("driver")], extra, check=True)
    assert rc == 0, out
    assert "ok=3" in out and "changed=0" in out and "WARNING" not in out


def test_each_host_is_named_and_a_warning_comes_once(tmp_path):
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(json.dumps({"all": {"hosts": {"gpu-a": {"ansible_host": "127.0.0.1"},
                                                   "gpu-b": {"ansible_host": "127.0.0.1",
                                                             "driver_version": "550.127.05"}},
                                         "vars": {"driver_branch": "535", "driver_persistnced": False}}}))
    rc, out = play(tmp_path, [role("driver")], hosts=str(hosts))
    assert rc == 2, out
    assert "gpu-b: k8sgpu.nvidia.driver (entry point main): 1 input refused" in out
    assert "driver_version is '550.127.05' but driver_branch is '535'" in out
    assert "gpu-a: k8sgpu.nvidia.driver" not in out  # gpu-a's inputs are good
    assert out.count("variable driver_persistnced is not a variable of the role") == 1, out
    assert "did you mean driver_persistenced?" in out


def test_registered_results_and_set_facts_of_the_prefix_are_not_reported(tmp_path):
    tasks = [{"ansible.builtin.set_fact": {"driver_result": {"status": "x"}}, "tags": ["always"]},
             {"ansible.builtin.command": "true", "register": "driver_probe", "changed_when": False,
              "tags": ["always"]},
             role("driver")]
    rc, out = play(tmp_path, tasks, check=True)
    assert rc == 0, out
    assert "WARNING" not in out, out


def test_key_value_extra_vars_strings_for_numbers_and_booleans_pass(tmp_path):
    # -e key=value gives strings; the roles' tasks convert them where they use them
    rc, out = play(tmp_path, [role("driver")], check=True,
                   args=["-e", "driver_reboot_timeout=600", "-e", "driver_hold=false", "-e", "driver_branch=550"])
    assert rc == 0 and "WARNING" not in out, out


def test_misspelt_shared_variable_warns_once_for_two_roles_and_the_run_goes_on(tmp_path):
    rc, out = play(tmp_path, [role("driver"), role("verify")],
                   {"k8sgpu_kubconfig": "/tmp/kubeconfig", "driver_branch": "550"}, check=True)
    assert rc == 0, out
    warning = ("[WARNING]: variable k8sgpu_kubconfig is not a variable of the k8sgpu.nvidia collection, so it has no "
               "effect; did you mean k8sgpu_kubeconfig?")
    assert out.count(warning) == 1, out


def test_injected_namespace_fails_at_the_first_task_before_anything_is_rendered(tmp_path):
    rc, out = play(tmp_path, [role("cluster_autoscaler")],
                   {"cluster_autoscaler_namespace": "kube-system\n---\nkind: ClusterRoleBinding"})
    assert rc == 2, out
    assert "cluster_autoscaler_namespace is 'kube-system\\n---\\nkind: ClusterRoleBinding'; a namespace name" in out
    assert "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'" in out
