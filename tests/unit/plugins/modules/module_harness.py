"""Exceptions that exit_json/fail_json raise in unit tests (fixture module_io in tests/unit/conftest.py)."""
from __future__ import annotations


class AnsibleExitJson(Exception):
    pass


class AnsibleFailJson(Exception):
    pass
