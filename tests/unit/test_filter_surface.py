"""The collection's public filters are what a user calls; the rest are private (issue 48 item 3).

A private filter's name starts with an underscore, its short_description starts with "Private to" and names the
roles (or the collection's playbooks) that use it, and at least one of them does. Its name before 2.0.0 is tombstoned
in meta/runtime.yml, and no role or playbook calls a tombstoned name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FILTERS = ROOT / "plugins" / "filter"
PUBLIC = {"aws_endpoint_check", "cluster_autoscaler_iam_policy", "eks_gpu_user_data", "gfd_labels", "karpenter_iam_policy",
          "node_name", "node_names", "openpgp_fingerprints"}
PRIVATE = sorted(p.stem for p in FILTERS.glob("_*.py") if p.stem != "__init__")


def doc(name: str) -> dict:
    text = (FILTERS / f"{name}.py").read_text()
    return yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', text, re.S).group(1))


def users(name: str) -> set[str]:
    """The roles (by name) and "playbooks" whose YAML calls k8sgpu.nvidia.<name>."""
    call = re.compile(r"\bk8sgpu\.nvidia\.%s(?![A-Za-z0-9_])" % re.escape(name))
    found = set()
    for path in list((ROOT / "roles").rglob("*.yml")) + list((ROOT / "playbooks").rglob("*.yml")):
        if call.search(path.read_text()):
            rel = path.relative_to(ROOT).parts
            found.add(rel[1] if rel[0] == "roles" else "playbooks")
    return found


def test_the_public_filters_are_the_api():
    public = {p.stem for p in FILTERS.glob("*.py") if not p.stem.startswith("_")}
    assert public == PUBLIC, f"a new public filter is API under semantic versioning: {sorted(public ^ PUBLIC)}"
    for name in PUBLIC:
        assert not doc(name)["short_description"].startswith("Private"), name


@pytest.mark.parametrize("name", PRIVATE)
def test_a_private_filter_names_the_roles_that_use_it(name):
    d = doc(name)
    assert d["name"] == name
    short = d["short_description"]
    assert short.startswith("Private to ") and "not API" in short, short
    who = users(name)
    assert who, f"{name}: no role or playbook uses it; remove it (and tombstone it in meta/runtime.yml)"
    said = short.split(", not API")[0]
    for role in who - {"playbooks"}:
        assert re.search(r"\b%s\b" % role, said), f"{name}: used by the {role} role, which its short_description omits"
    assert ("playbooks" in who) == ("playbooks" in said), (name, who, said)


def test_the_old_names_are_tombstoned_and_no_one_calls_them():
    routing = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["plugin_routing"]["filter"]
    for name in PRIVATE:
        if str(doc(name)["version_added"]) == "2.0.0":
            continue  # private from the start: it had no public name
        entry = routing.get(name[1:], {}).get("tombstone")
        assert entry and name in entry["warning_text"], f"meta/runtime.yml: tombstone {name[1:]} naming {name}"
    for old in routing:
        assert not (FILTERS / f"{old}.py").exists(), f"{old} is tombstoned and still a filter"
        assert not users(old), f"{old} is tombstoned and still called by {sorted(users(old))}"
