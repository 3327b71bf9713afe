from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._custom_metrics import (
    apiservice_state,
    prometheus_url_parts,
    served_metrics,
    service_proxy_path,
    unavailable_message,
)

# As the API server's aggregator writes it when the adapter behind the Service does not answer.
UNAVAILABLE = {
    "metadata": {"name": "v1beta1.custom.metrics.k8s.io"},
    "spec": {"group": "custom.metrics.k8s.io", "version": "v1beta1",
             "service": {"name": "prometheus-adapter", "namespace": "gpu-monitoring", "port": 443}},
    "status": {"conditions": [{"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck",
                               "message": "failing or missing response from https://10.96.0.12:443/apis/"
                                          "custom.metrics.k8s.io/v1beta1: connection refused"}]},
}


def test_unavailable_apiservice_names_reason_message_and_service():
    state = apiservice_state("v1beta1.custom.metrics.k8s.io", UNAVAILABLE)
    assert state == {"name": "v1beta1.custom.metrics.k8s.io", "exists": True, "available": False,
                     "reason": "FailedDiscoveryCheck", "message": UNAVAILABLE["status"]["conditions"][0]["message"],
                     "service": "gpu-monitoring/prometheus-adapter:443"}
    msg = unavailable_message(state)
    assert "is not Available (FailedDiscoveryCheck: failing or missing response" in msg
    assert "Service gpu-monitoring/prometheus-adapter:443" in msg


def test_absent_apiservice_points_to_the_adapter_role():
    state = apiservice_state("v1beta2.custom.metrics.k8s.io", None)
    assert not state["exists"] and not state["available"]
    assert "does not exist" in unavailable_message(state) and "gpu_metrics_adapter" in unavailable_message(state)


def test_available_apiservice():
    obj = {**UNAVAILABLE, "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Passed"}]}}
    assert apiservice_state("x", obj)["available"]


def test_served_metrics_from_discovery():
    doc = {"resources": [{"name": "pods/DCGM_FI_DEV_GPU_UTIL"}, {"name": "namespaces/DCGM_FI_DEV_GPU_UTIL"},
                         {"name": "services/DCGM_FI_DEV_GPU_UTIL_AVG"}, {"name": "odd"}]}
    assert served_metrics(doc) == {"DCGM_FI_DEV_GPU_UTIL": ["namespaces", "pods"],
                                   "DCGM_FI_DEV_GPU_UTIL_AVG": ["services"]}
    assert served_metrics(None) == {}


def test_prometheus_url_parts_and_service_proxy():
    parts = prometheus_url_parts("http://prometheus-operated.monitoring.svc.cluster.local:9090/")
    assert parts["service"] == {"name": "prometheus-operated", "namespace": "monitoring"} and parts["port"] == 9090
    assert service_proxy_path(parts, "/api/v1/status/buildinfo") == (
        "/api/v1/namespaces/monitoring/services/http:prometheus-operated:9090/proxy/api/v1/status/buildinfo")
    assert prometheus_url_parts("https://prom.example.net/p")["service"] is None
    with pytest.raises(ValueError, match="not an http"):
        prometheus_url_parts("prometheus:9090")
