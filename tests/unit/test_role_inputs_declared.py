"""Issue 46 item 1: every input has a declared syntax, by construction. Every option of every role's argument specs
and every shared k8sgpu_* variable has one of: a type that is not a string (bool, int, float), choices, a syntax rule
(module_utils/_role_inputs.py SYNTAX, chosen by syntax_kind()), a range or form rule (RULES), free text rendered only
as data (FREE_TEXT, with the reason), a pass-through option (PASS_THROUGH, with what it grants; docs/security.md lists
the same names) or a role's own check (CHECKED_BY, with where). A new option without one fails here."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _role_inputs as ri

ROOT = Path(__file__).resolve().parents[2]


def _options():
    for path in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        role = path.parent.parent.name
        seen = set()
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                if name not in seen:
                    seen.add(name)
                    yield role, name, spec or {}


OPTIONS = list(_options())


def test_every_option_of_every_role_has_a_declared_syntax():
    missing = ["%s: %s (%s)" % (role, name, spec.get("type", "str")) for role, name, spec in OPTIONS
               if ri.declared_kind(role, name, spec) is None]
    assert not missing, ("options without a declared syntax: give each a rule in module_utils/_role_inputs.py "
                         "(SYNTAX_BY_NAME/SUFFIX, RULES), or a reason in FREE_TEXT, PASS_THROUGH or CHECKED_BY: %s"
                         % missing)
    assert len(OPTIONS) > 400, len(OPTIONS)


def test_every_shared_variable_has_a_declared_syntax():
    missing = sorted(set(ri.SHARED_VARIABLES) - set(ri.SHARED_SYNTAX))
    assert not missing, "shared variables without a kind in SHARED_SYNTAX: %s" % missing
    assert set(ri.SHARED_SYNTAX) <= set(ri.SHARED_VARIABLES)
    for name, kind in ri.SHARED_SYNTAX.items():
        assert kind in ri.SHARED_KINDS or kind in ri.SYNTAX, (name, kind)


def test_the_tables_name_real_options():
    names = {name for _role, name, _spec in OPTIONS}
    for table in (ri.FREE_TEXT, ri.PASS_THROUGH, ri.CHECKED_BY, ri.SYNTAX_BY_NAME):
        assert set(table) <= names, set(table) - names
    assert all(isinstance(v, str) and v for v in list(ri.PASS_THROUGH.values()) + list(ri.CHECKED_BY.values()))


def test_docs_security_lists_every_pass_through_option():
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Pass-through options", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_]+)`", section, re.M))
    assert listed == set(ri.PASS_THROUGH), (set(ri.PASS_THROUGH) ^ listed)


# Hostile values by kind: each refused by the option's rule, naming the option.
@pytest.mark.parametrize("role,name,value", [
    ("container_toolkit", "container_toolkit_repo_url", "https://mirror.example/nvidia\nTrusted: yes"),
    ("container_toolkit", "container_toolkit_repo_url", "http://user:pw@mirror.example/nvidia"),  # https: accepted
    ("container_toolkit", "container_toolkit_repo_url", "ftp://mirror.example/nvidia"),
    ("driver", "driver_mirror_url", "http://deb.example/debian\nTrusted: yes"),
    ("driver", "driver_mirror_url", "http://deb.example/debian Trusted"),
    ("device_plugin", "device_plugin_helm_repo_url", "file:///etc/shadow"),
    ("gpu_alerts", "gpu_alerts_runbook_url", "javascript:alert(1)"),
    ("verify", "verify_image", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd\n---"),
    ("verify", "verify_image", "Evil Image"),
    ("cluster_autoscaler", "cluster_autoscaler_image", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0@md5:x"),
    ("dcgm_exporter", "dcgm_exporter_image_registry", "nvcr.io/nvidia k8s"),
    ("device_plugin", "device_plugin_version", "v0.19.3\nkind: Secret"),
    ("container_toolkit", "container_toolkit_version", "1.20.1; rm -rf /"),
    ("container_toolkit", "container_toolkit_packages", ["nvidia-container-toolkit", "evil package"]),
    ("container_toolkit", "container_toolkit_repo_key_fingerprint", "C95B321B61E88C1809C4F759DDCAE044F796ECB0\n"),
    ("gpu_autoscaling", "gpu_autoscaling_metric", "up or vector(1)"),
    ("cluster_autoscaler", "cluster_autoscaler_aws_region", "eu-west-1\n"),
    ("driver", "driver_branch", "550\nTrusted: yes"),
    ("karpenter", "karpenter_feature_gates", {"SpotToSpotConsolidation": "yes"}),
    ("karpenter_gpu", "karpenter_gpu_ec2_tags", {"aws:cloudformation": "x"}),
    ("gpu_metrics_adapter", "gpu_metrics_adapter_ca_bundle", "not a certificate"),
    ("prometheus_stack", "prometheus_stack_grafana_dashboard_namespaces", ["monitoring", "Bad NS"]),
])
def test_hostile_values_of_the_new_kinds_are_refused_naming_the_option(role, name, value):
    spec = next(s for r, n, s in OPTIONS if (r, n) == (role, name))
    errors = ri.syntax_errors(role, {name: spec}, {name: value})
    assert errors, (name, value)
    assert all(e.startswith(name) for e in errors), errors
    assert not any("pw@" in e for e in errors), errors  # a URL's credentials are never repeated


@pytest.mark.parametrize("role,name,value", [
    ("container_toolkit", "container_toolkit_repo_url", "https://nvidia.github.io/libnvidia-container"),
    ("container_toolkit", "container_toolkit_repo_url", "file:///srv/mirror/libnvidia-container"),
    ("container_toolkit", "container_toolkit_repo_url", "http://10.0.0.5:3142/nvidia.github.io/libnvidia-container"),
    ("driver", "driver_mirror_url", "http://deb.debian.org/debian"),
    ("device_plugin", "device_plugin_helm_repo_url", "oci://registry.example/charts"),
    ("verify", "verify_image", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"),
    ("verify", "verify_image", "nvcr.io/nvidia/k8s/cuda-sample@sha256:" + "a" * 64),
    ("cluster_autoscaler", "cluster_autoscaler_image",
     "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0@sha256:" + "0" * 64),
    ("container_toolkit", "container_toolkit_gpu_check_image", "localhost:5000/ubuntu:24.04"),
    ("container_toolkit", "container_toolkit_version", "1.20.1-1"),
    ("container_toolkit", "container_toolkit_repo_key_fingerprint", "C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0"),
    ("driver", "driver_branch", 550),
    ("driver", "driver_branch", "535"),
    ("gke_driver_installer", "gke_driver_installer_pause_image", "registry.k8s.io/pause"),
    ("karpenter", "karpenter_feature_gates", {"SpotToSpotConsolidation": True}),
    ("karpenter", "karpenter_cluster_endpoint", "https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com"),
    ("cluster_autoscaler", "cluster_autoscaler_kubernetes_version", "1.33"),
    ("gpu_health", "gpu_health_since", "2026-12-07T06:00:00Z"),
    ("karpenter_gpu", "karpenter_gpu_ec2_tags", {"team": "ml", "cost-centre": "4711"}),
])
def test_well_formed_values_of_the_new_kinds_pass(role, name, value):
    spec = next(s for r, n, s in OPTIONS if (r, n) == (role, name))
    assert ri.syntax_errors(role, {name: spec}, {name: value}) == []


def test_every_default_passes_its_own_rule():
    """No default of any role is refused by the rule its option now has (templated defaults left out)."""
    bad = []
    for role, name, spec in OPTIONS:
        default = spec.get("default")
        if default is None or "{{" in str(default):
            continue
        bad += ri.syntax_errors(role, {name: spec}, {name: default})
    assert not bad, bad


# Issue 46's lows: quantities and numbers that are not finite, or negative where a resource is meant.
@pytest.mark.parametrize("role,name,value", [
    ("device_plugin", "device_plugin_resources", {"limits": {"cpu": "NaN"}}),
    ("device_plugin", "device_plugin_resources", {"limits": {"cpu": "1e400"}}),
    ("device_plugin", "device_plugin_resources", {"limits": {"memory": "-1"}}),
    ("device_plugin", "device_plugin_resources", {"limits": {"memory": float("nan")}}),
    ("gke_driver_installer", "gke_driver_installer_cpu_request", "1e400"),
    ("cluster_autoscaler", "cluster_autoscaler_scale_down_utilization_threshold", "NaN"),
    ("verify", "verify_timeout", "1e400"),
    ("verify", "verify_timeout", float("inf")),
    ("verify", "verify_timeout", float("nan")),
    ("verify", "verify_timeout", 10 ** 400),
    ("verify", "verify_timeout", -1),
    ("karpenter_gpu", "karpenter_gpu_weight", float("inf")),
    ("gpu_alerts", "gpu_alerts_gpu_temp_celsius", float("nan")),
    ("karpenter_gpu", "karpenter_gpu_extra_limits", {"memory": "1e400"}),
])
def test_numbers_that_are_not_finite_or_negative_are_refused_with_a_message(role, name, value):
    from test_role_inputs import run
    errors = run(role, **{name: value})[0]
    assert errors and all(name in e for e in errors), errors


def test_no_overflow_error_from_an_infinite_integer():
    options = {"verify_timeout": {"type": "int", "default": 300}}
    errors, _warnings = ri.check("verify", options, {"verify_timeout": math.inf}, rules={})
    assert errors == ["verify: verify_timeout is inf; give a finite number from -%d to %d (NaN, infinities and "
                      "numbers past 64 bits are refused)" % (ri.NUMBER_LIMIT, ri.NUMBER_LIMIT)]


def test_the_shared_variables_of_the_inventories_pass_and_hostile_ones_are_refused():
    from test_role_inputs_syntax import literal_values
    bad = ["%s: %s" % (where, e) for where, key, value in literal_values() if key in ri.SHARED_SYNTAX
           for e in ri.shared_syntax_errors({key: value})]
    assert not bad, bad
    errors = ri.shared_syntax_errors({"k8sgpu_node_name": "gpu-1\n---", "k8sgpu_aws_region": "eu-west-1; x",
                                      "k8sgpu_apt_proxy": "http://p:3128\nAcquire::x 1", "k8sgpu_install_driver": "x"})
    assert [e.split(" ", 1)[0] for e in errors] == ["k8sgpu_apt_proxy", "k8sgpu_aws_region", "k8sgpu_node_name"], errors
