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
from ansible.release import __version__ as _core_version

ROOT = Path(__file__).resolve().parents[2]
CORE = tuple(int(x) for x in _core_version.split(".")[:2])


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


# Issue 35, item 3: the roles' preflight asserts no longer repeat the argument specs' choices and types, and their
# ranges and forms moved to role_inputs' rules. Each input those asserts refused is still refused before the role's
# second task, naming the variable: a choice or a type by ansible-core's validation of the argument spec, a range or
# a form by the role's first task, with every refusal of the role at once.
SPEC_REFUSED = {
    "cluster_autoscaler": {"cluster_autoscaler_state": "gone"},
    "dcgm_exporter": {"dcgm_exporter_service_monitor": "yes"},
    "device_plugin": {"device_plugin_install_method": "kustomize", "device_plugin_mig_strategy": "all",
                      "device_plugin_device_list_strategy": ["env"], "device_plugin_device_id_strategy": "serial",
                      "device_plugin_state": "gone"},
    # the four the driver's preflight repeated before issue 48
    "driver": {"driver_source": "cuda", "driver_kernel_modules": "nouveau", "driver_no_gpu": "warn",
               "driver_reboot": "later"},
    "eks_gpu_pool": {"eks_gpu_pool_state": "gone", "eks_gpu_pool_provisioner": "fargate",
                     "eks_gpu_pool_cluster_state": "absent"},
    "gke_driver_installer": {"gke_driver_installer_state": "gone", "gke_driver_installer_image_pull_policy": "Sometimes"},
    "gke_gpu_pool": {"gke_gpu_pool_state": "gone", "gke_gpu_pool_cluster_state": "absent"},
    "gpu_alerts": {"gpu_alerts_prometheus_rule": "sometimes"},
    "gpu_autoscaling": {"gpu_autoscaling_target_kind": "DaemonSet", "gpu_autoscaling_metric_type": "external",
                        "gpu_autoscaling_state": "gone"},
    "gpu_metrics_adapter": {"gpu_metrics_adapter_mode": "sidecar", "gpu_metrics_adapter_prometheus_check": "maybe",
                            "gpu_metrics_adapter_aggregation": "median"},
    "karpenter": {"karpenter_state": "gone"},
    "karpenter_gpu": {"karpenter_gpu_state": "gone", "karpenter_gpu_capacity_types": ["spot", "cheap"],
                      "karpenter_gpu_consolidation_policy": "Always"},
    "node_labels": {"node_labels_state": "gone", "node_labels_taint": "yes", "node_labels_missing": "warn"},
    "prometheus_stack": {"prometheus_stack_state": "gone"},
}


@pytest.mark.parametrize("name", sorted(SPEC_REFUSED))
def test_choices_the_preflight_repeated_fail_at_the_argument_spec_naming_each_variable(tmp_path, name):
    rc, out = play(tmp_path, [role(name)], SPEC_REFUSED[name])
    assert rc == 2, out
    assert "Validating arguments against arg spec 'main'" in out and "Validation of arguments failed" in out, out
    for variable, value in SPEC_REFUSED[name].items():
        shown = ", ".join(value) if isinstance(value, list) else value
        assert f"value of {variable} must be one " in out and shown.split(", ")[-1] in out, (variable, out)
    assert "Check the role's inputs" not in out  # stopped before the first task


# variable -> (bad value, words of the message after "<variable> is <value>"); all of a role's in one run.
RULES_REFUSED = {
    "cluster_autoscaler": {
        "cluster_autoscaler_irsa_role_arn": ("arn:aws:iam::1:role/x", "an IAM role ARN"),
    },
    "dcgm_exporter": {
        "dcgm_exporter_image_digest": ("sha256:xyz", "give sha256:<64 hex>"),
        "dcgm_exporter_version": ("4.5 latest", "an image tag"),
        "dcgm_exporter_port": (70000, "a port from 1 to 65535"),
        "dcgm_exporter_collect_interval_ms": (50, "a number of milliseconds 100 or more"),
        "dcgm_exporter_probe_initial_delay": (-1, "a whole number 0 or more"),
        "dcgm_exporter_probe_period": (0, "seconds 1 or more"),
        "dcgm_exporter_probe_timeout": (0, "seconds 1 or more"),
        "dcgm_exporter_probe_failure_threshold": (0, "a whole number 1 or more"),
        "dcgm_exporter_scrape_interval": ("15 s", "a Prometheus duration"),
        "dcgm_exporter_namespace": ("DCGM", "a namespace name"),
        "dcgm_exporter_name": ("d" * 53, "at most 52 characters"),
    },
    "device_plugin": {
        "device_plugin_time_slicing_replicas": (-1, "a whole number 0 or more"),
        "device_plugin_image_digest": ("latest", "an image digest"),
    },
    "gke_driver_installer": {
        "gke_driver_installer_image_type": ("WINDOWS_LTSC_CONTAINERD", "COS* or UBUNTU*"),
        "gke_driver_installer_cos_digest": ("sha256:1", "an image digest"),
        "gke_driver_installer_ubuntu_digest": ("1234", "an image digest"),
        "gke_driver_installer_pause_digest": ("latest", "an image digest"),
        "gke_driver_installer_node_pools": ("gpu-a", "a YAML list"),
    },
    "gpu_alerts": {
        "gpu_alerts_namespace": ("gpu monitoring", "a namespace name"),
        "gpu_alerts_name": ("GPU-alerts", "a name the role gives its objects"),
    },
    "gpu_autoscaling": {
        "gpu_autoscaling_min_replicas": (0, "a whole number 1 or more"),
        "gpu_autoscaling_target_value": ("sixty", "a quantity such as 60"),
    },
    "gpu_dashboard": {
        "gpu_dashboard_namespace": ("Monitoring", "a namespace name"),
        "gpu_dashboard_extra[0].name": ([{"name": "GPU board", "path": "/tmp/a.json"},
                                         {"name": "b", "path": ""}, {"name": "c", "path": "/tmp/c d.json"}],
                                        "a Kubernetes object name"),
        "gpu_dashboard_extra[1].path": (None, "give the dashboard's JSON file"),
        "gpu_dashboard_extra[2].path": (None, "a ConfigMap key"),
    },
    "gpu_metrics_adapter": {
        "gpu_metrics_adapter_image_digest": ("latest", "an image digest"),
        "gpu_metrics_adapter_prometheus_url": ("prometheus:9090", "http(s)://host[:port][/path]"),
        "gpu_metrics_adapter_hpa_service_account": ("horizontal-pod-autoscaler", "a namespace/name"),
        "gpu_metrics_adapter_relist_interval": ("1m30s", "a duration of one unit"),
        "gpu_metrics_adapter_cert_renew_before_days": (-1, "days 0 or more"),
    },
    "karpenter": {
        "karpenter_version": ("v1.14.1", "a Karpenter release such as 1.14.1"),
        "karpenter_image_digest": ("latest", "an image digest"),
        "karpenter_irsa_role_arn": ("role/karpenter", "an IAM role ARN"),
    },
    "karpenter_gpu": {
        "karpenter_gpu_instance_families": ([], "at least one instance family"),
        "karpenter_gpu_capacity_types": ([], "at least one of spot, on-demand and reserved"),
        "karpenter_gpu_gpu_limit": (0, "a whole number of GPUs 1 or more"),
        "karpenter_gpu_consolidate_after": ("5 min", "or Never"),
        "karpenter_gpu_expire_after": ("30d", "or Never"),
        "karpenter_gpu_termination_grace_period": ("1d", "or '' for none"),
        "karpenter_gpu_ami_alias": ("al2", "an AMI alias family@version"),
        "karpenter_gpu_subnet_selector_terms": ([], "at least one subnet selector term"),
        "karpenter_gpu_security_group_selector_terms": ([], "at least one security group selector term"),
    },
    "node_maintenance": {
        "node_maintenance_max_unavailable": ("0", "a percentage (1% to 100%)"),
        "node_maintenance_drain_retry_delay": ("0", "it must be a number of seconds more than 0"),
        "node_maintenance_wait_timeout": (0, "a whole number of seconds, 1 or more"),
    },
    "prometheus_stack": {
        "prometheus_stack_chart_repo_url": ("ftp://charts.example", "http://, https:// or oci://"),
        "prometheus_stack_grafana_dashboard_labels": ({"a": "1", "b": "1"}, "exactly one label"),
        "prometheus_stack_values": ("a=b", "a YAML mapping"),
        "prometheus_stack_wait_timeout": ("10 minutes", "a Go duration"),
        "prometheus_stack_gpu_alert_receiver.name": ({"name": "null"}, "a name other than"),
    },
}


def _given(cases):
    """The variables to set: a dotted or indexed path is a check inside the variable set by its first entry."""
    out = {}
    for path, (value, _words) in cases.items():
        base = path.split(".")[0].split("[")[0]
        if base not in out or value is not None:
            out[base] = value
    return out


@pytest.mark.parametrize("name", sorted(RULES_REFUSED))
def test_ranges_and_forms_the_preflight_checked_fail_at_the_first_task_naming_each_variable(tmp_path, name):
    cases = RULES_REFUSED[name]
    rc, out = play(tmp_path, [role(name)], _given(cases))
    assert rc == 2, out
    assert f"TASK [k8sgpu.nvidia.{name} : Check the role's inputs]" in out, out
    head = f"localhost: k8sgpu.nvidia.{name} (entry point main): {len(cases)} input"
    assert head in out, out
    # the task's msg, as written (ansible-core 2.17's callback also prints the list of messages, YAML-quoted, first)
    msg = out[out.index(head):]
    for path, (_value, words) in cases.items():
        message = msg.split(f"{name}: {path} ", 1)
        assert len(message) == 2, (path, out)
        assert words in message[1].split(f" {name}: ", 1)[0], (path, words, message[1][:400])


@pytest.mark.parametrize("name,extra,words", [
    # a typed option left empty (name: with nothing after it): ansible-core's validation refuses it
    ("karpenter", {"karpenter_extra_env": None}, [None]),
    ("karpenter_gpu", {"karpenter_gpu_gpu_limit": None, "karpenter_gpu_instance_families": None}, [None, None]),
    ("prometheus_stack", {"prometheus_stack_values": None}, [None]),
    ("gke_driver_installer", {"gke_driver_installer_node_pools": None}, [None]),
    # a string or raw one: the rule (ansible-core 2.17's validation refuses None for a string itself)
    ("prometheus_stack", {"prometheus_stack_wait_timeout": None}, ["prometheus_stack_wait_timeout is None; give a Go duration"]),
    ("gpu_autoscaling", {"gpu_autoscaling_target_value": None}, ["gpu_autoscaling_target_value is None; give a quantity"]),
])
def test_an_empty_value_the_preflight_refused_is_refused_naming_it(tmp_path, name, extra, words):
    rc, out = play(tmp_path, [role(name)], extra)
    assert rc == 2, out
    raw = {"gpu_autoscaling_target_value"}
    for var, rule in zip(extra, words):
        if rule is None or (CORE < (2, 19) and var not in raw):
            # ansible-core's own words: 2.19 "is of type NoneType", 2.17 "is of type <class 'NoneType'> and we were
            # unable to convert"
            text = f"argument '{var}' is of type " + ("NoneType" if CORE >= (2, 19) else "<class 'NoneType'>")
        else:
            text = rule
        assert text in out, (text, out)


def test_checks_of_the_role_own_node_class_and_of_state_present_only_follow_the_state(tmp_path):
    # the EC2NodeClass's AMI alias is not read with another node class; the HPA's settings not with state absent
    rc, out = play(tmp_path, [role("karpenter_gpu"), role("gpu_autoscaling"), role("gpu_metrics_adapter")],
                   {"karpenter_gpu_ami_alias": "al2", "karpenter_gpu_subnet_selector_terms": [],
                    "karpenter_gpu_node_class": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                                 "name": "default"},
                    "gpu_autoscaling_state": "absent", "gpu_autoscaling_min_replicas": 0,
                    "gpu_autoscaling_target_value": "sixty",
                    "gpu_metrics_adapter_state": "absent", "gpu_metrics_adapter_relist_interval": "1m30s"},
                   check=True)
    assert rc == 0, out
    assert "changed=0" in out


def test_a_shared_variable_with_a_syntax_is_checked_by_the_roles_first_task(tmp_path):
    """Issue 46: shared k8sgpu_* variables with a declared syntax (module_utils/_role_inputs.py SHARED_SYNTAX) are
    checked by every role's first task, before anything is touched."""
    rc, out = play(tmp_path, [role("node_labels")], {"k8sgpu_node_name": "gpu-1\n---\nkind: Secret"}, check=True)
    assert rc != 0, out
    assert "node_labels: k8sgpu_node_name is 'gpu-1\\n---\\nkind: Secret'; a Kubernetes object name" in out, out
