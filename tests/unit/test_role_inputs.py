"""k8sgpu.nvidia.role_inputs' checks (module_utils/_role_inputs.py), one class of input at a time, against the roles'
real argument specs (meta/argument_specs.yml) and defaults."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _role_inputs as ri
from k8sgpu_testlib.roles import is_private

ROOT = Path(__file__).resolve().parents[2]
# A private role (k8s_apply) is checked by its callers' inputs, not by role_inputs of its own.
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir() and not is_private(p.name))


def specs(role):
    return yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def defaults(role):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def run(role, entry="main", names=(), **values):
    """check() as the action plugin calls it: the role's defaults (untemplated ones) under the values given."""
    options = specs(role)[entry]["options"]
    known = {k for e in specs(role).values() for k in e.get("options") or {}}
    given = {k: v for k, v in defaults(role).items() if not (isinstance(v, str) and "{{" in v)}
    given.update(values)
    return ri.check(role, options, given, names=set(names) | set(values), known=known, sibling_roles=ROLES)


def only_error(role, **values):
    errors = run(role, **values)[0]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("role", ROLES)
def test_each_roles_defaults_pass(role):
    for entry in specs(role):
        assert run(role, entry) == ([], [])


def test_every_role_has_rules_or_nothing_to_range():
    # every rule names an option of its role's argument spec (a rule for a renamed variable would never run)
    for role, rules in ri.RULES.items():
        known = {k for e in specs(role).values() for k in e.get("options") or {}}
        assert set(rules) <= known, (role, set(rules) - known)


# Taints and tolerations: the nested argument specs, as ansible-core's role validation applies them.
def test_taint_effect_outside_the_choices_is_refused_naming_the_list():
    error = only_error("karpenter_gpu", karpenter_gpu_taints=[{"key": "nvidia.com/gpu", "value": "true",
                                                               "effect": "NoScheduleX"}])
    assert "NoSchedule, PreferNoSchedule, NoExecute" in error and "NoScheduleX" in error
    assert "karpenter_gpu_taints" in error


def test_taint_without_effect_or_with_a_misspelt_field_is_refused():
    assert "effect" in only_error("karpenter_gpu", karpenter_gpu_startup_taints=[{"key": "a"}])
    error = only_error("karpenter_gpu", karpenter_gpu_taints=[{"key": "a", "effect": "NoSchedule", "efect": "x"}])
    assert "efect" in error


def test_taint_value_true_unquoted_is_refused_as_a_boolean():
    error = only_error("karpenter_gpu", karpenter_gpu_taints=[{"key": "nvidia.com/gpu", "value": True,
                                                               "effect": "NoSchedule"}])
    assert "karpenter_gpu_taints[0].value is True (bool)" in error and "quote" in error


def test_repeated_taint_and_bad_key_are_refused():
    taints = [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"},
              {"key": "bad key", "effect": "NoExecute"}]
    errors = run("karpenter_gpu", karpenter_gpu_taints=taints)[0]
    assert any("karpenter_gpu_taints[1] repeats the taint a:NoSchedule" in e for e in errors), errors
    assert any("karpenter_gpu_taints[2].key is 'bad key'" in e for e in errors), errors


@pytest.mark.parametrize("role,var", [("device_plugin", "device_plugin_extra_tolerations"),
                                      ("dcgm_exporter", "dcgm_exporter_extra_tolerations"),
                                      ("gpu_metrics_adapter", "gpu_metrics_adapter_tolerations"),
                                      ("karpenter", "karpenter_tolerations")])
def test_toleration_effect_and_operator_outside_the_choices_are_refused(role, var):
    error = only_error(role, **{var: [{"key": "a", "effect": "Sometimes"}]})
    assert "Sometimes" in error and "NoSchedule, PreferNoSchedule, NoExecute" in error and var in error
    error = only_error(role, **{var: [{"key": "a", "operator": "Is"}]})
    assert "Exists, Equal" in error


def test_toleration_relations():
    var = "device_plugin_extra_tolerations"
    assert "without a key must have operator Exists" in only_error("device_plugin", **{var: [{"effect": "NoSchedule"}]})
    exists_with_value = [{"key": "a", "operator": "Exists", "value": "x"}]
    assert "Exists takes no value" in only_error("device_plugin", **{var: exists_with_value})
    seconds_without_noexecute = [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 30}]
    assert "only to effect NoExecute" in only_error("device_plugin", **{var: seconds_without_noexecute})
    assert run("device_plugin", **{var: [{"operator": "Exists"}, {"key": "a", "operator": "Equal", "value": "b",
                                                                  "effect": "NoExecute", "tolerationSeconds": 60}]}) == ([], [])


# Quantities
@pytest.mark.parametrize("good", ["500m", "1", "1Gi", "0.5", "128Mi", "1e3", 2])
def test_quantity_accepted(good):
    assert ri.quantity("x", good, {}) == []


@pytest.mark.parametrize("bad", ["1GB", "lots", "", "1 Gi", True, "-"])
def test_quantity_refused(bad):
    (message,) = ri.quantity("x", bad, {})
    assert "x is" in message and "Kubernetes quantity" in message


def test_resources_quantities_keys_and_request_over_limit():
    resources = {"requests": {"cpu": "10 m", "memory": "1Gi"}, "limits": {"memory": "512Mi"}}
    errors = run("device_plugin", device_plugin_resources=resources)[0]
    assert any("device_plugin_resources.requests.cpu is '10 m'" in e for e in errors), errors
    # a misspelt key: the argument spec's suboptions name the ones supported
    (error,) = run("device_plugin", device_plugin_resources={"limit": {}})[0]
    assert "device_plugin_resources.limit. Supported parameters include: limits, requests" in error
    assert any("requests.memory '1Gi' is more than limits.memory '512Mi'" in e for e in errors), errors
    assert ri.to_number("1Gi") == 2 ** 30 and ri.to_number("500m") == 0.5


def test_gke_cpu_request_and_karpenter_limits_and_volume_size():
    assert "gke_driver_installer_cpu_request is '150 m'" in only_error("gke_driver_installer",
                                                                       gke_driver_installer_cpu_request="150 m")
    error = only_error("karpenter_gpu", karpenter_gpu_extra_limits={"memory": "1TB"})
    assert "karpenter_gpu_extra_limits.memory is '1TB'" in error
    error = only_error("karpenter_gpu", karpenter_gpu_block_device_mappings=[{"deviceName": "/dev/xvda",
                                                                              "ebs": {"volumeSize": "200GB"}}])
    assert "karpenter_gpu_block_device_mappings[0].ebs.volumeSize is '200GB'" in error


# Durations
@pytest.mark.parametrize("good", ["30s", "5m", "1h30m", "720h", "0s", "1.5h", "300ms"])
def test_go_duration_accepted(good):
    assert ri.duration()("x", good, {}) == []


@pytest.mark.parametrize("bad", ["5 minutes", "5", "1d", "", 5, "m5"])
def test_go_duration_refused(bad):
    (message,) = ri.duration()("x", bad, {})
    assert "give a duration such as 30s" in message


def test_durations_in_roles():
    assert "karpenter_batch_max_duration is '5 min'" in only_error("karpenter", karpenter_batch_max_duration="5 min")
    assert "cluster_autoscaler_scale_down_unneeded_time" in only_error(
        "cluster_autoscaler", cluster_autoscaler_scale_down_unneeded_time="10")
    error = only_error("karpenter_gpu", karpenter_gpu_disruption_budgets=[{"nodes": "10%", "schedule": "@daily",
                                                                           "duration": "1 hour"}])
    assert "karpenter_gpu_disruption_budgets[0].duration is '1 hour'" in error


def test_gpu_autoscaling_target_of_a_utilisation_is_a_percentage():
    error = only_error("gpu_autoscaling", gpu_autoscaling_target_value=150)
    assert "gpu_autoscaling_target_value is 150" in error and "from 1 to 100" in error
    assert "above 0" in only_error("gpu_autoscaling", gpu_autoscaling_target_value=0)
    # not a quantity of the HPA's form (before 1.2.0 the role's preflight said so): refused with state present only
    assert "a quantity such as 60" in only_error("gpu_autoscaling", gpu_autoscaling_target_value="sixty")
    assert "a quantity such as 60" in only_error("gpu_autoscaling", gpu_autoscaling_target_value="1e3")
    assert run("gpu_autoscaling", gpu_autoscaling_target_value="sixty", gpu_autoscaling_state="absent") == ([], [])
    # another metric may go above 100
    assert run("gpu_autoscaling", gpu_autoscaling_metric="DCGM_FI_DEV_FB_USED", gpu_autoscaling_target_value="20G",
               names=["gpu_autoscaling_metric"]) == ([], [])
    assert run("gpu_autoscaling", gpu_autoscaling_target_value="500m") == ([], [])


def test_gpu_autoscaling_scaling_rules():
    error = only_error("gpu_autoscaling", gpu_autoscaling_scale_up={"selectPolicy": "Biggest"})
    assert "Max, Min, Disabled" in error
    error = only_error("gpu_autoscaling", gpu_autoscaling_scale_down={"policies": [{"type": "Pods", "value": 1,
                                                                                    "periodSeconds": 3600}]})
    assert "gpu_autoscaling_scale_down.policies[0].periodSeconds is 3600" in error and "from 1 to 1800" in error
    error = only_error("gpu_autoscaling", gpu_autoscaling_scale_up={"policies": [{"type": "Pods", "value": 1}]})
    assert "periodSeconds" in error


@pytest.mark.parametrize("value,ok", [(0, True), (1, True), (100, True), (1000, False), (-1, False), ("50", True),
                                      (1.5, False)])
def test_karpenter_weight(value, ok):
    errors = ri.weight("karpenter_gpu_weight", value, {})
    assert (errors == []) is ok, errors
    if not ok:
        assert "from 1 to 100" in errors[0] and repr(value) in errors[0]


def test_karpenter_weight_in_the_role():
    assert "karpenter_gpu_weight is 1000" in only_error("karpenter_gpu", karpenter_gpu_weight=1000)


@pytest.mark.parametrize("value,ok", [(1, True), ("25%", True), ("100%", True), (0, True), ("0%", True),
                                      ("150%", False), (-1, False), ("half", False), (True, False)])
def test_karpenter_pdb_max_unavailable(value, ok):
    errors = run("karpenter", karpenter_pdb_max_unavailable=value)[0]
    assert (errors == []) is ok, errors


def test_disruption_budget_nodes_percentage_and_reasons():
    error = only_error("karpenter_gpu", karpenter_gpu_disruption_budgets=[{"nodes": "110%"}])
    assert "karpenter_gpu_disruption_budgets[0].nodes is '110%'" in error
    error = only_error("karpenter_gpu", karpenter_gpu_disruption_budgets=[{"nodes": "10%", "reasons": ["Bored"]}])
    assert "Underutilized, Empty, Drifted" in error
    assert run("karpenter_gpu", karpenter_gpu_disruption_budgets=[{"nodes": 0, "schedule": "@daily",
                                                                   "duration": "10m"}]) == ([], [])


@pytest.mark.parametrize("role,var,value,text", [
    ("gpu_metrics_adapter", "gpu_metrics_adapter_external_port", 70000, "a port from 1 to 65535"),
    ("karpenter", "karpenter_replicas", 0, "a whole number 1 or more"),
    ("gpu_alerts", "gpu_alerts_gpu_temp_celsius", -5, "degrees Celsius"),
    ("cluster_autoscaler", "cluster_autoscaler_scale_down_utilization_threshold", "1.5", "a fraction from 0 to 1"),
    ("karpenter", "karpenter_vm_memory_overhead_percent", "7.5%", "a fraction from 0 to 1"),
    ("device_plugin", "device_plugin_wait_timeout", 0, "seconds 1 or more"),
    ("verify", "verify_run_as_user", -1, "0 or more"),
    ("driver", "driver_reboot_timeout", 0, "seconds 1 or more"),
])
def test_ranges(role, var, value, text):
    error = only_error(role, **{var: value})
    assert "%s is %r" % (var, value) in error and text in error


def test_settings_the_roles_check_themselves_are_left_to_them():
    # the filter gpu_alert_rules, whose messages the lab tests assert (test_gpu_alerts)
    assert run("gpu_alerts", gpu_alerts_gpu_temp_for="5 minutes", gpu_alerts_framebuffer_percent=150) == ([], [])


# node_maintenance's settings (before 1.2.0 the filter maintenance_settings in the role's settings.yml), in the words
# tests/lab/test_maintenance_safety.py reads; -e gives strings.
@pytest.mark.parametrize("var,good,bad,text", [
    ("node_maintenance_max_unavailable", [1, "3", "25%", "100%", " 2 "], [0, "0", "0%", "101%", "-1", "x", True],
     "it must be a number of GPU Nodes out of service at once (1 or more) or a percentage (1% to 100%)"),
    ("node_maintenance_drain_retry_delay", [1, "0.5", 2.5], [0, "0", -1, "soon"], "it must be a number of seconds more than 0"),
    ("node_maintenance_drain_timeout", [1, "600"], [0, "1.5", -3], "it must be a whole number of seconds, 1 or more"),
    ("node_maintenance_wait_timeout", [1], [0], "it must be a whole number of seconds, 1 or more"),
    ("node_maintenance_reboot_timeout", [1800], [0], "it must be a whole number of seconds, 1 or more"),
    ("node_maintenance_expected_gpus", [0, "8"], [-1, "1.5"], "it must be a whole number of GPUs, 0 or more"),
])
def test_node_maintenance_settings(var, good, bad, text):
    for value in good:
        assert run("node_maintenance", **{var: value}) == ([], []), (var, value)
    for value in bad:
        errors = run("node_maintenance", **{var: value})[0]
        assert len(errors) == 1 and var in errors[0], (var, value, errors)
        if "argument '" not in errors[0]:  # not a type the argument spec refused first
            assert f"{var} is {value}: {text}" in errors[0], errors


def test_node_maintenance_retry_delay_message_of_the_lab_test():
    assert only_error("node_maintenance", node_maintenance_drain_retry_delay="0") == (
        "node_maintenance: node_maintenance_drain_retry_delay is 0: it must be a number of seconds more than 0")


# Issue 35, item 3: the ranges and forms the roles' preflight asserts checked before 1.2.0, here with the same
# accepted values (tests/unit/test_role_inputs_play.py runs them in real role starts).
@pytest.mark.parametrize("role,var,good,bad", [
    ("dcgm_exporter", "dcgm_exporter_port", [1, 9400, 65535, "9400"], [0, 65536, "http"]),
    ("dcgm_exporter", "dcgm_exporter_collect_interval_ms", [100, 30000], [99, 0]),
    ("dcgm_exporter", "dcgm_exporter_probe_initial_delay", [0, 45], [-1]),
    ("dcgm_exporter", "dcgm_exporter_probe_period", [1], [0]),
    ("dcgm_exporter", "dcgm_exporter_probe_timeout", [1], [0]),
    ("dcgm_exporter", "dcgm_exporter_probe_failure_threshold", [1], [0]),
    ("dcgm_exporter", "dcgm_exporter_scrape_interval", ["15s", "1m30s", "500ms"], ["15", "1.5s", "1d", "15 s", ""]),
    ("dcgm_exporter", "dcgm_exporter_version", ["4.5.3-4.8.2-ubuntu22.04", "latest", "_x"],
     ["-x", "a b", "x" * 129, "4.5\n"]),
    ("dcgm_exporter", "dcgm_exporter_name", ["d" * 52], ["d" * 53]),
    ("dcgm_exporter", "dcgm_exporter_image_digest", ["", "sha256:" + "0" * 64],
     ["sha256:" + "A" * 64, "sha256:" + "0" * 63, "latest", "sha256:" + "0" * 64 + "\n"]),
    ("device_plugin", "device_plugin_time_slicing_replicas", [0, 4], [-1]),
    ("gke_driver_installer", "gke_driver_installer_image_type", ["COS_CONTAINERD", "ubuntu_containerd", "COS"],
     ["WINDOWS_LTSC_CONTAINERD", "", "containerd_cos"]),
    ("gpu_autoscaling", "gpu_autoscaling_min_replicas", [1, 3], [0, -2]),
    ("gpu_autoscaling", "gpu_autoscaling_target_value", [60, "60", "2.5", "500m"], ["sixty", "1Gi", "60%", True]),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_prometheus_url", ["http://p:9090", "https://p.monitoring.svc/x"],
     ["p:9090", "http://:9090", "ftp://p"]),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_relist_interval", ["1m", "30s", "500ms"], ["1m30s", "1", "1d"]),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_cert_renew_before_days", [0, 30], [-1]),
    ("karpenter", "karpenter_version", ["1.14.1"], ["v1.14.1", "1.14", "latest"]),
    ("karpenter", "karpenter_irsa_role_arn", ["", "arn:aws:iam::111122223333:role/karpenter",
                                              "arn:aws-cn:iam::111122223333:role/path/k8s@x"],
     ["role/karpenter", "arn:aws:iam::1111:role/x", "arn:aws:iam::111122223333:user/x",
      "arn:aws:iam::111122223333:role/a\nb"]),
    ("cluster_autoscaler", "cluster_autoscaler_irsa_role_arn", ["arn:aws:iam::111122223333:role/ca"], ["ca"]),
    ("karpenter_gpu", "karpenter_gpu_instance_families", [["g6"]], [[]]),
    ("karpenter_gpu", "karpenter_gpu_capacity_types", [["spot"], ["reserved", "on-demand"]], [[]]),
    ("karpenter_gpu", "karpenter_gpu_gpu_limit", [1, 64], [0, -1]),
    ("karpenter_gpu", "karpenter_gpu_consolidate_after", ["Never", "30s", "1h30m"], ["1d", "never", "5 m", ""]),
    ("karpenter_gpu", "karpenter_gpu_expire_after", ["720h", "Never"], ["30d"]),
    ("karpenter_gpu", "karpenter_gpu_termination_grace_period", ["", "48h"], ["Never", "1.5h"]),
    ("karpenter_gpu", "karpenter_gpu_node_class", [{}, {"group": "g", "kind": "K", "name": "n"}],
     [{"name": "n"}, {"group": "g", "kind": "K", "name": "n", "x": 1}]),
    ("karpenter_gpu", "karpenter_gpu_ami_alias", ["al2023@latest", "bottlerocket@v1.2.3", "al2023@v20251120"],
     ["al2", "al2023", "al2@latest", "al2023@20251120"]),
    ("karpenter_gpu", "karpenter_gpu_subnet_selector_terms", [[{"id": "subnet-1"}]], [[]]),
    ("prometheus_stack", "prometheus_stack_chart_repo_url", ["https://c", "oci://r/c", "http://c"], ["ftp://c", "c"]),
    ("prometheus_stack", "prometheus_stack_grafana_dashboard_labels", [{"a": "1"}], [{}, {"a": "1", "b": "2"}]),
    ("prometheus_stack", "prometheus_stack_wait_timeout", ["10m", "1h30m", "1.5h"], ["10", "10 m", "Never"]),
    ("prometheus_stack", "prometheus_stack_gpu_alert_receiver", [{}, {"name": "team"}], [{"name": "null"}]),
    # a chart in Go's module cache (capitals written '!x', a version after '@'); kubernetes.core.helm splits its
    # command line as a shell would
    ("device_plugin", "device_plugin_helm_chart_ref",
     ["nvdp/nvidia-device-plugin", "oci://r/c", "/root/go/pkg/mod/github.com/!n!v!i!d!i!a/k8s-device-plugin@v0.19.3/d"],
     ["/a b/c", "a'b", 'a"b', "a\\b", "a\nb"]),
    # '' drops the pin (documented); the preflight then refuses it with an http:// key URL
    ("container_toolkit", "container_toolkit_repo_key_fingerprint",
     ["", "C95B321B61E88C1809C4F759DDCAE044F796ECB0", "0xc95b 321b 61e8 8c18 09c4 f759 ddca e044 f796 ecb0"],
     ["C95B", "not-a-fingerprint"]),
])
def test_ranges_and_forms_moved_from_the_preflight(role, var, good, bad):
    for value in good:
        assert run(role, **{var: value}) == ([], []), (var, value)
    for value in bad:
        errors = run(role, **{var: value})[0]
        assert len(errors) == 1 and var in errors[0], (var, value, errors)


def test_a_local_chart_needs_no_repository_url():
    assert run("prometheus_stack", prometheus_stack_chart_ref="./charts/kube-prometheus-stack",
               prometheus_stack_chart_repo_url="") == ([], [])
    assert "http://, https:// or oci://" in only_error("prometheus_stack", prometheus_stack_chart_repo_url="")


# None for a typed option is refused by ansible-core's role validation (tests/unit/test_role_inputs_play.py); the rules
# of string and raw options refuse it themselves, as the preflight did.
@pytest.mark.parametrize("role,var", [("karpenter", "karpenter_version"),
                                      ("dcgm_exporter", "dcgm_exporter_scrape_interval"),
                                      ("gke_driver_installer", "gke_driver_installer_image_type"),
                                      ("gpu_autoscaling", "gpu_autoscaling_target_value"),
                                      ("prometheus_stack", "prometheus_stack_chart_repo_url"),
                                      ("prometheus_stack", "prometheus_stack_grafana_dashboard_labels"),
                                      ("karpenter_gpu", "karpenter_gpu_node_class")])
def test_an_empty_value_is_refused_where_the_preflight_refused_it(role, var):
    error = only_error(role, **{var: None})
    assert error.startswith("%s: %s is " % (role, var)) and ("None" in error), error


def test_no_task_repeats_a_choice_or_a_type_of_the_argument_spec():
    # an assert condition '<option> in [...]' or '<option> is mapping|sequence|string' on an option with choices or a
    # type is what the argument spec checks already
    repeated = []
    for role in sorted(ROLES):  # no role exempt (issue 48 item 2)
        if not (ROOT / "roles" / role / "meta" / "argument_specs.yml").is_file():
            continue  # a role being written; test_role_specs asks for its argument spec
        options = {k: v for e in specs(role).values() for k, v in (e.get("options") or {}).items()}
        for path in (ROOT / "roles" / role / "tasks").glob("*.yml"):
            for task in yaml.safe_load(path.read_text()) or []:
                for inner in [task] + list(task.get("block") or []):
                    that = (inner.get("ansible.builtin.assert") or {}).get("that") or []
                    for condition in [that] if isinstance(that, str) else that:
                        for name, spec in options.items():
                            if (re.search(r"\b%s in \[" % name, condition) and spec.get("choices")) or \
                                    re.search(r"\b%s (\| type_debug|is (mapping|sequence|string))" % name, condition):
                                repeated.append("%s: %s" % (path.relative_to(ROOT), condition))
    assert not repeated, repeated


def test_cluster_autoscaler_expander():
    assert run("cluster_autoscaler", cluster_autoscaler_expander="priority,least-waste") == ([], [])
    assert "least-waste" in only_error("cluster_autoscaler", cluster_autoscaler_expander="cheapest")


# The driver's branch and version
def test_driver_version_of_another_branch_is_refused():
    error = only_error("driver", driver_branch="550", driver_version="535.216.03")
    assert error == ("driver: driver_version is '535.216.03' but driver_branch is '550'; give a version of the 550 "
                     "branch (550.*), or another driver_branch, or '' for the newest of the branch")


@pytest.mark.parametrize("branch,version", [("550", "550.127.05"), ("535", "535"), ("535", "535.261"), ("", "535.1"),
                                            ("535", "535.216.01-1~deb12u1"), ("535", ""), (550, "550.54.15")])
def test_driver_version_of_the_branch_is_accepted(branch, version):
    assert run("driver", driver_branch=branch, driver_version=version) == ([], [])


def test_driver_version_format():
    assert "driver version or its prefix" in only_error("driver", driver_version="latest")
    assert "55.1" in only_error("driver", driver_branch="550", driver_version="55.1")  # not a prefix of the branch


# Values the argument spec would convert: the role reads them as given
def test_string_for_a_list_is_refused():
    error = only_error("container_toolkit", container_toolkit_runtimes="docker,containerd")
    assert error == ("container_toolkit: container_toolkit_runtimes is 'docker,containerd' (str); the role reads it "
                     "as given, so give a YAML list (for example [a, b]), not a string")


def test_string_for_a_number_or_a_bool_is_accepted():
    # what -e key=value and INI inventories give; the roles' tasks convert them (| int, | bool)
    assert run("driver", driver_reboot_timeout="600", driver_hold="yes") == ([], [])
    assert run("node_maintenance", node_maintenance_wait_timeout="3") == ([], [])


def test_string_for_a_mapping_is_refused():
    assert "a YAML mapping" in only_error("verify", verify_node_selector="gpu=true")


def test_number_for_a_string_is_accepted():
    # driver_branch: 550 unquoted reads the same
    assert run("driver", driver_branch=550) == ([], [])
    assert run("verify", verify_node_devices=[0, 1]) == ([], [])


def test_list_elements_converted_are_named_by_index():
    error = only_error("container_toolkit", container_toolkit_packages=["nvidia-container-toolkit", True])
    assert "container_toolkit_packages[1] is True (bool)" in error


def test_unconvertible_value_is_the_argument_spec_message():
    error = only_error("driver", driver_reboot_timeout="soon")
    assert "driver_reboot_timeout" in error and "int" in error


# Unknown variables
def test_misspelt_variable_warns_with_the_closest_name():
    errors, warnings = run("driver", names=["driver_brnach"])
    assert errors == []
    assert warnings == ["driver: variable driver_brnach is not a variable of the role, so it has no effect; "
                        "did you mean driver_branch?"]


def test_unknown_variable_without_a_close_one_lists_the_variables():
    (warning,) = ri.unknown_variables("verify", ["verify_zzzzzzzzzzzzzzzzzzzzz"], ["verify_image", "verify_timeout"])
    assert "the role's variables are verify_image, verify_timeout" in warning


def test_variable_of_another_entry_point_is_known():
    # preflight's main and cluster share their options; node_maintenance's drain knows main's too
    assert run("node_maintenance", "drain", names=["node_maintenance_step"]) == ([], [])


def test_longer_prefix_of_another_role_is_not_unknown():
    # karpenter_gpu_* belongs to karpenter_gpu, gke_driver_installer_* is not driver_*
    warnings = run("karpenter", names=["karpenter_gpu_weight", "karpenter_gpu_wieght", "karpenter_replcas"])[1]
    assert warnings == ["karpenter: variable karpenter_replcas is not a variable of the role, so it has no effect; "
                        "did you mean karpenter_replicas?"]
    warnings = run("karpenter_gpu", names=["karpenter_gpu_wieght", "karpenter_replcas"])[1]
    assert len(warnings) == 1 and "karpenter_gpu_wieght" in warnings[0] and "karpenter_gpu_weight" in warnings[0]
    assert run("driver", names=["gke_driver_installer_driver_version"])[1] == []


def test_registered_results_and_internal_variables_are_not_user_variables():
    assert run("driver", names=["_driver_decisions", "__driver_x"])[1] == []
    assert ri.unknown_variables("driver", ["driver_result"], ["driver_branch"], ignore={"driver_result"}) == []


def test_prefix_of_the_fqcn():
    assert ri.role_prefix("k8sgpu.nvidia.karpenter_gpu") == "karpenter_gpu_"


def test_string_for_a_list_even_from_a_template_is_refused():
    options = specs("container_toolkit")["main"]["options"]
    errors = ri.check("container_toolkit", options, {"container_toolkit_runtimes": "docker"})[0]
    assert len(errors) == 1 and "a YAML list" in errors[0]


def test_unquoted_decimal_for_a_string_is_refused():
    # YAML reads pause_tag: 3.10 as the number 3.1
    error = only_error("gke_driver_installer", gke_driver_installer_pause_tag=3.1)
    assert "gke_driver_installer_pause_tag is 3.1 (float)" in error and "quote it" in error


def test_a_value_that_may_hold_a_secret_is_not_shown():
    error = only_error("driver", driver_apt_proxy=["http://user:pass@proxy:3128"])
    assert "driver_apt_proxy is (a list, value not shown)" in error and "pass@" not in error


@pytest.mark.parametrize("role", ROLES)
def test_each_entry_point_starts_with_the_check(role):
    for entry in specs(role):
        tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / (entry + ".yml")).read_text())
        first = tasks[0]
        assert "k8sgpu.nvidia.role_inputs" in first, (role, entry, first)
        assert first.get("tags") == ["always"], (role, entry, first)
