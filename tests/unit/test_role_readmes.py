"""Each role's README lists the collection's modules, filters and roles it uses (issue 35), in step with its files.

A role uses what its tasks, handlers, templates, vars and defaults name by FQCN (k8sgpu.nvidia.<name>; YAML comment
lines left out): a name of plugins/modules or plugins/action is a module, of plugins/filter a filter, and a role it
runs with include_role or import_role a role. The README's "## Modules and filters" section lists each of them, as
`k8sgpu.nvidia.<name>`, in its "- modules:", "- filters:" and "- roles:" items, and nothing else.

Its "## Variables" table is generated from the role's meta/argument_specs.yml (issue 48 item 2), and its links are
absolute (issue 47 item 4).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import role_readmes  # tests/support, on pytest's pythonpath

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
SECTION = "## Modules and filters"
PARTS = ("modules", "filters", "roles")
_FQCN = re.compile(r"k8sgpu\.nvidia\.([a-z_][a-z0-9_]*)")
_INCLUDED = re.compile(r"(?:include|import)_role:\s*\n\s*name:\s*k8sgpu\.nvidia\.([a-z_][a-z0-9_]*)")


def _stems(folder: str) -> set[str]:
    return {p.stem for p in (ROOT / "plugins" / folder).glob("*.py") if not p.name.startswith("__")}


def role_uses(role: str) -> dict[str, list[str]]:
    """{"modules": [...], "filters": [...], "roles": [...]}: what the role's files name by FQCN, sorted."""
    text = ""
    for sub in ("tasks", "handlers", "templates", "vars", "defaults"):
        for path in sorted((ROOT / "roles" / role / sub).rglob("*")):
            if not path.is_file():
                continue
            lines = path.read_text().splitlines()
            if path.suffix in (".yml", ".yaml"):
                lines = [line for line in lines if not line.lstrip().startswith("#")]
            text += "\n".join(lines) + "\n"
    names = set(_FQCN.findall(text))
    return {"modules": sorted(names & (_stems("modules") | _stems("action"))),
            "filters": sorted(names & _stems("filter")),
            "roles": sorted(set(_INCLUDED.findall(text)) - {role})}


def readme_lists(role: str) -> dict[str, list[str]] | None:
    """What the README's "## Modules and filters" section lists, per part; None without that section."""
    text = (ROOT / "roles" / role / "README.md").read_text()
    if SECTION not in text:
        return None
    section = re.split(r"^## ", text.split(SECTION, 1)[1], flags=re.M)[0]
    out = {}
    for part in PARTS:
        line = re.search(rf"^- {part}:(.*?)(?=^- |^\s*$|\Z)", section, flags=re.M | re.S)
        out[part] = sorted(_FQCN.findall(line.group(1))) if line else []
    return out


@pytest.mark.parametrize("role", ROLES)
def test_readme_lists_the_modules_and_filters_the_role_uses(role):
    listed = readme_lists(role)
    assert listed is not None, f"roles/{role}/README.md has no '{SECTION}' section"
    used = role_uses(role)
    for part in PARTS:
        missing = sorted(set(used[part]) - set(listed[part]))
        extra = sorted(set(listed[part]) - set(used[part]))
        assert not missing and not extra, (
            f"roles/{role}/README.md, '{SECTION}', {part}: add {['k8sgpu.nvidia.' + n for n in missing]}, "
            f"remove {['k8sgpu.nvidia.' + n for n in extra]} (the role's files name {used[part]})")


def test_the_check_sees_what_roles_use():
    """The scan itself: a role known to use a module, a filter and the private role is seen to."""
    used = role_uses("device_plugin")
    assert "k8s_gpu_allocatable" in used["modules"] and "_device_plugin_objects" in used["filters"] and used["roles"] == ["k8s_apply"]


# The "## Variables" tables (issue 48 item 2): generated from meta/argument_specs.yml by tests/support/role_readmes.py.


@pytest.mark.parametrize("role", role_readmes.roles())
def test_readme_variables_table_is_generated_from_the_argument_spec(role):
    path = ROOT / "roles" / role / "README.md"
    assert path.is_file(), f"roles/{role} has no README.md (Galaxy's importer refuses the collection without one)"
    text = path.read_text()
    assert role_readmes.BEGIN in text, f"roles/{role}/README.md has no generated variables table (run make docs)"
    assert role_readmes.render(role, text) == text, (
        f"roles/{role}/README.md's variables table is out of step with meta/argument_specs.yml or defaults/main.yml: "
        f"run make docs (python tests/support/role_readmes.py)")


def test_the_generator_renders_ansible_markup():
    assert role_readmes.markdown("C(a|b) O(x=1) V(y) M(k8sgpu.nvidia.z) P(k8sgpu.nvidia.f#filter) I(i) B(b)") == \
        "`a\\|b` `x=1` `y` `k8sgpu.nvidia.z` `k8sgpu.nvidia.f` *i* **b**"
    assert role_readmes.markdown("O(ansible.builtin.reboot#module:reboot_command)") == \
        "`reboot_command` of `ansible.builtin.reboot`"
    assert role_readmes.markdown("L(the guide, https://x.example/g) U(https://y.example)") == \
        "[the guide](https://x.example/g) <https://y.example>"


_LINK = re.compile(r"\]\(([^)\s]+)")


@pytest.mark.parametrize("role", ROLES)
def test_readme_links_are_absolute(role):
    """Galaxy shows a role's README away from the repository: a relative link there leads nowhere (issue 47 item 4)."""
    text = (ROOT / "roles" / role / "README.md").read_text()
    relative = [link for link in _LINK.findall(text) if not re.match(r"https?://|#|mailto:", link)]
    assert not relative, f"roles/{role}/README.md: relative links {relative}; use https://github.com/k8sgpu/ansible-collection-nvidia/blob/main/<path>"
