"""Every role's meta/argument_specs.yml documents exactly its defaults/main.yml."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k8sgpu_testlib.roles import variable_prefix

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def test_there_are_roles():
    assert ROLES, "no roles found under roles/"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_and_argument_specs_match(role: Path):
    defaults = _load(role / "defaults" / "main.yml")
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
    documented: dict = {}
    for entry in specs.values():
        documented.update(entry.get("options", {}))
    assert sorted(defaults) == sorted(documented), (
        f"{role.name}: defaults/main.yml and meta/argument_specs.yml differ: "
        f"only in defaults {sorted(set(defaults) - set(documented))}, "
        f"only in specs {sorted(set(documented) - set(defaults))}"
    )
    prefix = variable_prefix(role.name)
    assert all(k.startswith(prefix) for k in defaults), f"{role.name}: public variables must start with {prefix}"
    for name, value in defaults.items():
        spec = documented[name]
        assert spec.get("description"), f"{role.name}.{name} has no description"
        if isinstance(value, str) and "{{" in value:
            continue  # templated defaults are documented by their rendered fallback
        assert spec.get("default") == value, f"{role.name}.{name}: argument_specs default {spec.get('default')!r} != {value!r}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_internal_vars_are_prefixed(role: Path):
    vars_file = role / "vars" / "main.yml"
    if not vars_file.exists():
        pytest.skip("no vars/main.yml")
    for name in _load(vars_file):
        prefix = "_" + variable_prefix(role.name)
        assert name.startswith(prefix), f"{role.name}: internal variable {name} must start with {prefix}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_hold_values_and_at_most_a_pointer(role: Path):
    """Each variable is described once, in meta/argument_specs.yml (issue 48 item 2): defaults/main.yml has no
    description of its own: comments only above the first variable (a pointer there), three lines at most."""
    path = role / "defaults" / "main.yml"
    if not path.is_file():
        pytest.skip("no defaults/main.yml")
    lines = path.read_text().splitlines()
    first = next((i for i, line in enumerate(lines) if line and line[0].isalpha()), len(lines))
    pointer = [line for line in lines[:first] if line.lstrip().startswith("#")]
    below = [line for line in lines[first:] if line.lstrip().startswith("#")]
    assert not below and len(pointer) <= 3, (
        f"{role.name}/defaults/main.yml: describe the variables in meta/argument_specs.yml, not here: {below or pointer}")
