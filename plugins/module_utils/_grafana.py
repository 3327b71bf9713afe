# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: a Grafana dashboard file, checked before it goes into a ConfigMap (role gpu_dashboard,
filter grafana_dashboard)."""
from __future__ import annotations

import json


class DashboardError(ValueError):
    """A file that is no dashboard, or too big for a ConfigMap, with a message naming it and the fix."""


# A ConfigMap holds at most 1 MiB (etcd's request limit, less the object's other fields).
CONFIGMAP_MAX_BYTES = 1024 * 1024 - 4096


def grafana_dashboard(text: str, source: str) -> str:
    """The dashboard JSON text, checked: valid JSON, an object with panels (or rows, before Grafana 5) and a title,
    small enough for a ConfigMap. DashboardError names the source and the fix."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DashboardError(f"{source} is not valid JSON: {exc}; export the dashboard from Grafana "
                             "(Share, Export, Save to file) or download it from grafana.com") from None
    if not isinstance(data, dict) or not ("panels" in data or "rows" in data) or not data.get("title"):
        raise DashboardError(f"{source} is not a Grafana dashboard: a JSON object with a title and panels is expected")
    size = len(text.encode())
    if size > CONFIGMAP_MAX_BYTES:
        raise DashboardError(f"{source} is {size} bytes; a ConfigMap holds at most {CONFIGMAP_MAX_BYTES}: "
                             "remove panels or ship it another way")
    return text
