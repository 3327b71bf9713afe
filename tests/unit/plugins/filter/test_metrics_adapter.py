from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._adapter_helm_values import adapter_helm_values
from ansible_collections.k8sgpu.nvidia.plugins.filter._gpu_adapter_rules import gpu_adapter_rules


def test_rules_map_the_exporters_renamed_pod_labels_and_the_object_metric():
    rules = gpu_adapter_rules("dcgm-exporter")["rules"]
    pods, obj = rules
    # honorLabels false: the pod's namespace/pod arrive as exported_*; the target's own are the exporter pod's.
    assert pods["resources"]["overrides"] == {"exported_namespace": {"resource": "namespace"},
                                              "exported_pod": {"resource": "pod"}}
    assert pods["seriesQuery"] == 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_pod!=""}'
    assert pods["name"] == {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": "DCGM_FI_DEV_GPU_UTIL"}
    assert obj["name"]["as"] == "DCGM_FI_DEV_GPU_UTIL_AVG"
    assert obj["resources"]["overrides"]["service"] == {"resource": "service"}
    assert 'service="dcgm-exporter"' in obj["seriesQuery"]
    assert pods["metricsQuery"] == "avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})"


def test_aggregation_and_extra_rules():
    extra = [{"seriesQuery": "x", "name": {"as": "x"}}]
    config = gpu_adapter_rules("gpu-exporter", "DCGM_FI_DEV_FB_USED", "max", "FB_MAX", extra)
    assert config["rules"][0]["metricsQuery"].startswith("max by")
    assert config["rules"][1]["name"]["as"] == "FB_MAX" and 'service="gpu-exporter"' in config["rules"][1]["seriesQuery"]
    assert config["rules"][2] == extra[0]


@pytest.mark.parametrize("args,word", [
    (("",), "exporter_service"),
    (("svc", "bad-name"), "metric"),
    (("svc", "M", "median"), "aggregation"),
    (("svc", "M", "avg", "O", {"a": 1}), "extra_rules"),
])
def test_bad_input_is_named(args, word):
    with pytest.raises(AnsibleFilterError, match=word):
        gpu_adapter_rules(*args)


def test_helm_values_split_the_url():
    config = gpu_adapter_rules("dcgm-exporter")
    values = adapter_helm_values(config, "http://prometheus-operated.monitoring.svc:9090/prom/")
    assert values["prometheus"] == {"url": "http://prometheus-operated.monitoring.svc", "port": 9090, "path": "/prom"}
    assert values["rules"] == {"default": False, "custom": config["rules"]}
    assert adapter_helm_values(config, "https://prom.example")["prometheus"]["port"] == 443
    with pytest.raises(AnsibleFilterError, match="not an http"):
        adapter_helm_values(config, "prometheus:9090")
