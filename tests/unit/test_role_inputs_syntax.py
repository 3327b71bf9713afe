"""k8sgpu.nvidia.role_inputs' syntax checks (module_utils/_role_inputs.py: syntax_kind(), SYNTAX): every role input
that becomes a Kubernetes name, namespace, label, annotation or taint, a host path or a proxy URL is checked in
Kubernetes' own words before the role renders anything, and no such option of any role is left without a rule."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _role_inputs as ri

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())

# What an option's name says about its value: a Kubernetes name or namespace, labels, annotations, a selector, keys
# and values of labels or taints, Secret, Node or class names, a Service, a host or controller path, a proxy. An
# option whose name ends so (or of type path) needs a syntax rule, or a reason in FREE_TEXT.
LOOKS_LIKE = re.compile(r"(namespace|_name|_names|_label|_labels|_annotations|_selector|_key|_keys|_value|_nodes|"
                        r"_secrets|_class|_service|_account|_release|_pools|_families|_dir|_root|_path|_config|"
                        r"_drop_in|_json|_proxy|_tolerations|_taints|_requirements)$")


@functools.lru_cache(maxsize=None)
def all_options():
    return tuple(_options())


def _options():
    for role in ROLES:
        specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        seen = set()
        for entry in specs.values():
            for name, spec in (entry.get("options") or {}).items():
                if name not in seen:
                    seen.add(name)
                    yield role, name, spec or {}


def test_every_name_label_path_or_proxy_option_of_every_role_has_a_syntax_rule():
    missing = []
    for role, name, spec in all_options():
        if spec.get("type", "str") in ("bool", "int", "float"):
            continue
        if not (LOOKS_LIKE.search(name) or spec.get("type") == "path"):
            continue
        if ri.syntax_kind(role, name, spec) is None and name not in ri.FREE_TEXT \
                and not name.endswith(ri.FREE_SUFFIXES):
            missing.append("%s: %s" % (role, name))
    assert not missing, "options without a syntax rule (add one to SYNTAX_BY_SUFFIX/BY_NAME, or a reason " \
                        "to FREE_TEXT): %s" % missing


def test_the_tables_name_real_options_and_real_rules():
    names = {name for _role, name, _spec in all_options()}
    assert set(ri.SYNTAX_BY_NAME) <= names, set(ri.SYNTAX_BY_NAME) - names
    assert set(ri.FREE_TEXT) <= names, set(ri.FREE_TEXT) - names
    assert all(kind is None or kind in ri.SYNTAX for kind in ri.SYNTAX_BY_NAME.values())
    assert set(ri.SYNTAX_BY_SUFFIX.values()) <= set(ri.SYNTAX)
    assert all(isinstance(reason, str) and reason for reason in ri.FREE_TEXT.values())


# The inputs the review found unchecked: 32 names and namespaces, each role's.
NAMES = [(role, name) for role, name, spec in all_options()
         if ri.syntax_kind(role, name, spec) in ("namespace", "object_name", "service_name", "subdomain")]


def test_the_names_and_namespaces_are_all_covered():
    assert len(NAMES) >= 32, NAMES
    for role in ("cluster_autoscaler", "dcgm_exporter", "device_plugin", "gke_driver_installer", "gpu_alerts",
                 "gpu_autoscaling", "gpu_dashboard", "gpu_metrics_adapter", "karpenter", "verify"):
        assert (role, role + "_namespace") in NAMES, role


HOSTILE = ["kube-system\n---\nkind: ClusterRoleBinding", "a: b", "{x}", 'a"b', "Kube-System", "-a", "a" * 254,
           "ns/evil", "", " a"]


@pytest.mark.parametrize("role,name", NAMES)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_names_and_namespaces_are_refused_naming_the_variable_and_the_rule(role, name, value):
    spec = next(s for r, n, s in all_options() if (r, n) == (role, name))
    errors = ri.syntax_errors(role, {name: spec}, {name: value})
    if value == "" and spec.get("default") in ("", None):
        assert errors == []  # the role derives the name (gpu_autoscaling_name) or leaves the setting out
        return
    assert len(errors) == 1, errors
    assert errors[0].startswith("%s is %r;" % (name, value) if len(repr(value)) <= 80 else name + " is ")
    assert "regex used for validation" in errors[0] or "no more than" in errors[0]


def test_the_reviews_namespace_is_refused_before_anything_is_rendered():
    from test_role_inputs import run
    errors = run("cluster_autoscaler", cluster_autoscaler_namespace="kube-system\n---\nkind: ClusterRoleBinding")[0]
    assert errors == ["cluster_autoscaler: cluster_autoscaler_namespace is 'kube-system\\n---\\nkind: "
                      "ClusterRoleBinding'; a namespace name: a lowercase RFC 1123 label must consist of lower case "
                      "alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. "
                      "'my-name', or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]


@pytest.mark.parametrize("role,name,value", [
    ("cluster_autoscaler", "cluster_autoscaler_namespace", "kube-system"),
    ("device_plugin", "device_plugin_name", "nvidia-device-plugin-daemonset"),
    ("verify", "verify_namespace", "a" * 63),
    ("dcgm_exporter", "dcgm_exporter_priority_class", "system-node-critical"),
    ("karpenter_gpu", "karpenter_gpu_ec2nodeclass_name", "gpu.example.com"),
    ("dcgm_exporter", "dcgm_exporter_node_affinity_label", "nvidia.com/gpu.present"),
    ("gpu_dashboard", "gpu_dashboard_labels", {"grafana_dashboard": "1", "example.com/Team": "ML_ops.a-1", "x": ""}),
    ("gpu_dashboard", "gpu_dashboard_annotations", {"Example.com/Note": "any text\nwith: {structure}"}),
    ("node_labels", "node_labels_taint_key", "nvidia.com/gpu"),
    ("node_labels", "node_labels_taint_value", "present"),
    ("node_maintenance", "node_maintenance_gpu_node_selector", "nvidia.com/gpu.present=true,!cordoned,a!=b"),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_hpa_service_account", "kube-system/horizontal-pod-autoscaler"),
    ("dcgm_exporter", "dcgm_exporter_kubelet_pod_resources_dir", "/var/lib/kubelet/pod-resources"),
    ("container_toolkit", "container_toolkit_backup_dir", "/var/backups/k8sgpu.nvidia"),
    ("gpu_alerts", "gpu_alerts_rules_file_path", "out/gpu-alerts.rules.yml"),
    ("gpu_alerts", "gpu_alerts_extra_labels", {"team": "ml ops: {x}"}),
    ("karpenter_gpu", "karpenter_gpu_extra_requirements",
     [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1", "2"]}]),
    ("device_plugin", "device_plugin_helm_release", "nvidia-device-plugin"),
    ("karpenter", "karpenter_cluster_name", "my_cluster-1"),
])
def test_well_formed_values_pass(role, name, value):
    spec = next(s for r, n, s in all_options() if (r, n) == (role, name))
    assert ri.syntax_errors(role, {name: spec}, {name: value}) == []


@pytest.mark.parametrize("role,name,value,text", [
    ("gpu_dashboard", "gpu_dashboard_labels", {"a\nb": "1"}, "gpu_dashboard_labels key 'a\\nb'"),
    ("gpu_dashboard", "gpu_dashboard_labels", {"app": "x: y"}, "gpu_dashboard_labels.app is 'x: y'; a label value"),
    ("gpu_dashboard", "gpu_dashboard_labels", {"Bad_Prefix.com/a": "1"}, "prefix part a lowercase RFC 1123 subdomain"),
    ("gpu_dashboard", "gpu_dashboard_labels", {"app": "a" * 64}, "must be no more than 63 characters"),
    ("gpu_dashboard", "gpu_dashboard_annotations", {"a b": "x"}, "an annotation key"),
    ("node_labels", "node_labels_labels", {"nvidia.com/gpu.product": "H100 80GB"}, "a label value"),
    ("node_labels", "node_labels_remove", ["ok", "bad key"], "node_labels_remove[1] is 'bad key'"),
    ("node_labels", "node_labels_taint_key", "nvidia.com/gpu\n---", "a taint key"),
    ("node_labels", "node_labels_taint_value", "a b", "a label value"),
    ("dcgm_exporter", "dcgm_exporter_node_affinity_label", "nvidia.com/gpu present", "a label key"),
    ("dcgm_exporter", "dcgm_exporter_image_pull_secrets", ["ok", "Bad"], "dcgm_exporter_image_pull_secrets[1]"),
    ("dcgm_exporter", "dcgm_exporter_name", "9exporter", "a DNS-1035 label"),
    ("gpu_autoscaling", "gpu_autoscaling_object_service", "dcgm_exporter", "a Service name"),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_hpa_service_account", "kube-system", "give namespace/name"),
    ("dcgm_exporter", "dcgm_exporter_extra_tolerations", [{"key": "a b", "operator": "Exists"}], "[0].key"),
    ("karpenter_gpu", "karpenter_gpu_taints", [{"key": "a", "value": "x\ny", "effect": "NoSchedule"}], "[0].value"),
    ("karpenter_gpu", "karpenter_gpu_extra_requirements", [{"key": "a", "operator": "In", "values": ["a: b"]}],
     "karpenter_gpu_extra_requirements[0].values[0]"),
    ("karpenter_gpu", "karpenter_gpu_instance_families", ["g5", "g6\n"], "karpenter_gpu_instance_families[1]"),
    ("gke_driver_installer", "gke_driver_installer_node_pools", ["pool: x"], "gke_driver_installer_node_pools[0]"),
    ("node_maintenance", "node_maintenance_gpu_node_selector", "a=b\nc", "a label selector"),
    ("gpu_alerts", "gpu_alerts_extra_labels", {"team-name": "x"}, "a Prometheus label name"),
    ("device_plugin", "device_plugin_helm_release", "a" * 54, "no more than 53"),
    ("karpenter", "karpenter_cluster_name", "my cluster", "an EKS cluster name"),
])
def test_malformed_values_are_refused_naming_the_variable(role, name, value, text):
    spec = next(s for r, n, s in all_options() if (r, n) == (role, name))
    errors = ri.syntax_errors(role, {name: spec}, {name: value})
    assert errors and any(text in e for e in errors), errors
    assert all(e.startswith(name) for e in errors), errors


@pytest.mark.parametrize("role,name,value,text", [
    ("dcgm_exporter", "dcgm_exporter_kubelet_pod_resources_dir", "/var/lib/../../etc", "'..' component"),
    ("dcgm_exporter", "dcgm_exporter_kubelet_pod_resources_dir", "var/lib/kubelet", "an absolute path"),
    ("dcgm_exporter", "dcgm_exporter_kubelet_pod_resources_dir", "/var/lib\n---", "newline"),
    ("dcgm_exporter", "dcgm_exporter_kubelet_pod_resources_dir", "/var//lib/", "normalised"),
    ("driver", "driver_sysfs_root", "/sys/..", "'..' component"),
    ("container_toolkit", "container_toolkit_docker_daemon_json", "/etc/docker/./daemon.json", "normalised"),
    ("preflight", "preflight_proc_root", "proc", "an absolute path"),
    ("node_maintenance", "node_maintenance_sysfs_root", "/sys/../etc", "'..' component"),
    ("gpu_alerts", "gpu_alerts_rules_file_path", "../../etc/cron.d/x", "'..' component"),
    ("karpenter", "karpenter_crds_path", "crds\n", "newline"),
])
def test_paths_are_absolute_normalised_without_dotdot(role, name, value, text):
    spec = next(s for r, n, s in all_options() if (r, n) == (role, name))
    (error,) = ri.syntax_errors(role, {name: spec}, {name: value})
    assert error.startswith(name + " is ") and text in error, error


PROXY_GOOD = ["", "DIRECT", "http://proxy.example:3128", "https://proxy.example:3128/", "http://10.0.0.1:8080",
              "http://alice:S3cret%40pw@proxy.example:3128", "http://[2001:db8::1]:3128", "http://proxy",
              "socks5h://proxy.example:1080", "http://alice@proxy.example:3128"]
PROXY_BAD = ['http://p:3128"; APT::Update::Pre-Invoke {"touch pwned";}; //', "http://p:3128\nAcquire::x 1",
             "ftp://proxy:21", "proxy.example:3128", "http://proxy.example:3128/path", "http://proxy:3128?x=1",
             "http://proxy:3128#f", "http://proxy:99999", "http://proxy:abc", "http://pro xy:3128",
             "http://a;b@proxy:3128", "http://:3128", "http://alice:pw@@proxy:3128", "http://[zz]:3128",
             "http://proxy:3128 ", "http://pro'xy:3128"]


@pytest.mark.parametrize("name", ["driver_apt_proxy", "container_toolkit_repo_proxy"])
@pytest.mark.parametrize("value", PROXY_GOOD)
def test_proxy_urls_accepted(name, value):
    role = name.split("_apt_")[0].split("_repo_")[0]
    spec = next(s for r, n, s in all_options() if (r, n) == (role, name))
    assert ri.syntax_kind(role, name, spec) == "proxy_url"
    assert ri.syntax_errors(role, {name: spec}, {name: value}) == []


@pytest.mark.parametrize("name", ["driver_apt_proxy", "container_toolkit_repo_proxy"])
@pytest.mark.parametrize("value", PROXY_BAD)
def test_proxy_urls_with_anything_else_are_refused_without_showing_the_value(name, value):
    role = name.split("_apt_")[0].split("_repo_")[0]
    spec = next(s for r, n, s in all_options() if (r, n) == (role, name))
    (error,) = ri.syntax_errors(role, {name: spec}, {name: value})
    assert error.startswith(name + " is refused (value not shown): "), error
    assert "pwned" not in error and "proxy" not in error.split(": ", 1)[1].split(";")[0]


def test_proxy_with_a_password_is_never_shown_in_a_refusal():
    (error,) = ri.syntax_errors("driver", {"driver_apt_proxy": {"type": "str", "default": ""}},
                                {"driver_apt_proxy": "http://alice:S3cretPw@proxy.example:3128/path"})
    assert "S3cretPw" not in error and "alice" not in error and "no path" in error


def literal_values():
    """(file, key, value) for every key of the lab, molecule and example inventories' YAML whose value is literal:
    "{{ }}" is templated and "${ }" is molecule's environment substitution."""
    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if "{{" not in str(value) and "${" not in str(value):
                    yield where, key, value
                yield from walk(value, where)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item, where)

    for path in sorted(list(ROOT.glob("inventories/**/*.yml")) + list(ROOT.glob("molecule/**/*.yml"))):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for doc in docs:
            yield from walk(doc, path.relative_to(ROOT))


def test_the_lab_and_example_inventories_pass():
    """The values the lab, molecule and example inventories give pass the syntax checks (the real roles accept
    them): each option found in their YAML with a literal value."""
    options = {}
    for role, name, spec in all_options():
        options.setdefault(name, (role, spec))
    bad = []
    for where, key, value in literal_values():
        if key in options:
            role, spec = options[key]
            bad.extend("%s: %s" % (where, e) for e in ri.syntax_errors(role, {key: spec}, {key: value}))
    assert not bad, bad


# Free-form mappings and lists of objects passed through as they are, each with the reason it has no suboptions.
FREE_MAPS = {
    "karpenter_gpu_ec2_tags": "AWS tags: any keys and values",
    "karpenter_feature_gates": "Karpenter's feature gates, name to true/false, passed through",
    "device_plugin_helm_values": "Helm values of the chart, merged over the role's",
    "prometheus_stack_values": "Helm values of the chart, merged over the role's",
    "karpenter_gpu_node_class": "another node class's group, kind and name (rule node_class_ref)",
    "container_toolkit_docker_settings": "daemon.json settings (container_toolkit role, helper H1)",
    "container_toolkit_config_settings": "config.toml settings (container_toolkit role, helper H1)",
    "_k8s_apply_objects": "Kubernetes objects (private role k8s_apply, helper H5)",
    "_k8s_apply_removed": "Kubernetes object references (private role k8s_apply, helper H5)",
    "_k8s_apply_resource": "one Kubernetes object (private role k8s_apply, helper H5)",
    "eks_gpu_pool_cluster": "options of the module eks_cluster, checked by its argument spec before any AWS call",
    "eks_gpu_pool_nodegroup": "options of the module eks_nodegroup, checked by its argument spec before any AWS call",
    "gke_gpu_pool_cluster": "options of the module gke_cluster, checked by its argument spec before any API call",
    "gke_gpu_pool_node_pool": "options of the module gke_node_pool, checked by its argument spec before any API call",
}


def test_every_mapping_or_list_of_mappings_has_suboptions_or_a_rule_for_its_keys():
    missing = []
    for role, name, spec in all_options():
        kind = spec.get("type", "str")
        if not (kind == "dict" or (kind == "list" and spec.get("elements") == "dict")):
            continue
        if spec.get("options") or name in FREE_MAPS:
            continue
        if ri.syntax_kind(role, name, spec) is not None or name in ri.RULES.get(role, {}):
            continue
        missing.append("%s: %s" % (role, name))
    assert not missing, missing


@pytest.mark.parametrize("role,name,value,text", [
    ("karpenter_gpu", "karpenter_gpu_extra_requirements", [{"key": "a", "operator": "Inn", "values": ["x"]}],
     "value of operator must be one of: In, NotIn, Exists, DoesNotExist, Gt, Lt, got: Inn"),
    ("karpenter_gpu", "karpenter_gpu_block_device_mappings", [{"deviceName": "/dev/xvda", "ebs": {"volumSize": "1Gi"}}],
     "volumSize"),
    ("karpenter", "karpenter_extra_env", [{"nmae": "A", "value": "1"}], "nmae"),
    ("gpu_dashboard", "gpu_dashboard_extra", [{"name": "x"}], "path"),
    ("dcgm_exporter", "dcgm_exporter_extra_counters", [{"field": "DCGM_FI_DEV_X", "type": "gauges"}],
     "gauge, counter, histogram, summary, label"),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_extra_rules", [{"seriesQuery": "x"}], "metricsQuery"),
    ("cluster_autoscaler", "cluster_autoscaler_resources", {"request": {"cpu": "1"}}, "request"),
])
def test_suboptions_refuse_misspelt_or_missing_fields(role, name, value, text):
    from test_role_inputs import run
    errors = run(role, **{name: value})[0]
    assert any(text in e and name in e for e in errors), errors
