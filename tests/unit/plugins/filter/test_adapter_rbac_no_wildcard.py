"""Issue 34.6: the metrics adapter's RBAC never widens. A rule that would need a wildcard (resource, API group, verb)
or a grant on Secrets is refused, naming the rule (index, seriesQuery) and the fix; 1.0.0 widened to */*."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._adapter_rbac_rules import adapter_rbac_rules
from ansible_collections.k8sgpu.nvidia.plugins.filter._gpu_adapter_rules import gpu_adapter_rules


def _rbac(*extra):
    return adapter_rbac_rules(gpu_adapter_rules("dcgm-exporter", extra_rules=list(extra)))


def _no_wildcard_no_secret(rbac):
    for rules in rbac.values():
        for rule in rules:
            for key in ("apiGroups", "resources", "verbs"):
                assert not any("*" in v for v in rule[key]), rule
            if rule["apiGroups"] != ["custom.metrics.k8s.io"]:
                assert "secrets" not in rule["resources"], rule


@pytest.mark.parametrize("rule,words", [
    # 1.0.0: adapter ClusterRole */* (every Secret readable) and metrics reader custom.metrics.k8s.io/*.
    ({"seriesQuery": 'up{namespace!=""}', "resources": {"template": "<<.Resource>>"}, "name": {"as": "up"}},
     ["rules[2]", "up{namespace!=\"\"}", "resources.template", "resources.overrides"]),
    ({"seriesQuery": "s1", "resources": {"overrides": {"secret": {"resource": "secret"}}}, "name": {"as": "s1"}},
     ["rules[2]", "'s1'", "Secret"]),
    ({"seriesQuery": "s2", "resources": {"overrides": {"x": {"resource": "Secrets", "group": "core"}}},
      "name": {"as": "s2"}}, ["rules[2]", "Secret"]),
    ({"seriesQuery": "s3", "resources": {"overrides": {"x": "secrets."}}, "name": {"as": "s3"}}, ["rules[2]", "Secret"]),
    ({"seriesQuery": "w1", "resources": {"overrides": {"x": {"resource": "*"}}}, "name": {"as": "w1"}},
     ["rules[2]", "wildcard", "resources.overrides"]),
    ({"seriesQuery": "w2", "resources": {"overrides": {"x": {"resource": "pod", "group": "*"}}}, "name": {"as": "w2"}},
     ["rules[2]", "wildcard"]),
    ({"seriesQuery": "w3", "resources": {"overrides": {"x": {"resource": "pods/exec"}}}, "name": {"as": "w3"}},
     ["rules[2]", "subresource"]),
    ({"seriesQuery": "c1", "resources": {"overrides": {"pod": {"resource": "pod"}}},
      "name": {"matches": "^(.*)_total$", "as": "${1}_rate"}}, ["rules[2]", "name.as", "literal"]),
])
def test_a_rule_that_would_widen_or_reach_secrets_is_refused_naming_it(rule, words):
    with pytest.raises(AnsibleFilterError) as err:
        _rbac(rule)
    for word in words:
        assert word in str(err.value)


def test_explicit_overrides_stay_listed_and_never_wild():
    extra = {"seriesQuery": 'DCGM_FI_DEV_FB_USED{exported_namespace!=""}',
             "resources": {"overrides": {"exported_namespace": {"resource": "namespace"},
                                         "deploy": {"group": "apps", "resource": "deployment"},
                                         "node": "node"}},
             "name": {"as": "FB_USED"}}
    rbac = _rbac(extra)
    _no_wildcard_no_secret(rbac)
    assert {"apiGroups": [""], "resources": ["namespaces", "nodes", "pods", "services"],
            "verbs": ["get", "list", "watch"]} in rbac["adapter"]
    assert "deployments.apps/FB_USED" in rbac["metrics_reader"][0]["resources"]


def test_the_default_rules_have_no_wildcard():
    _no_wildcard_no_secret(adapter_rbac_rules(gpu_adapter_rules("dcgm-exporter")))
