"""module_utils/_grafana.py: a dashboard file checked for a ConfigMap."""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _grafana as m


def test_grafana_dashboard_checks_json_shape_and_size():
    good = '{"title": "GPUs", "panels": []}'
    assert m.grafana_dashboard(good, "a.json") == good
    with pytest.raises(m.DashboardError, match=r"b.json is not valid JSON: Expecting value: line 1 column 11"):
        m.grafana_dashboard('{"title": ', "b.json")
    with pytest.raises(m.DashboardError, match="c.json is not a Grafana dashboard"):
        m.grafana_dashboard('{"panels": []}', "c.json")
    with pytest.raises(m.DashboardError, match="d.json is .* bytes; a ConfigMap holds at most"):
        m.grafana_dashboard('{"title": "x", "panels": [], "pad": "' + "x" * m.CONFIGMAP_MAX_BYTES + '"}', "d.json")
