"""Make the checkout importable as ansible_collections.k8sgpu.nvidia."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ansible.module_utils import basic

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

sys.path.insert(0, str(Path(__file__).resolve().parent / "plugins" / "modules"))
from module_harness import AnsibleExitJson, AnsibleFailJson  # noqa: E402


@pytest.fixture
def module_io(monkeypatch):
    """Turn exit_json/fail_json into exceptions carrying the result; collect warnings (returned)."""
    warnings = []

    def exit_json(self, **kwargs):
        raise AnsibleExitJson(kwargs)

    def fail_json(self, msg, **kwargs):
        raise AnsibleFailJson({"msg": msg, **kwargs})

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning: warnings.append(warning))
    return warnings
