"""tests/release/release_check.py (make lint's release check) on fixture collections in a temporary directory: it
fails on a version_added newer than galaxy.yml's version (modules, options, filters, doc fragments, role argument
specs), on a changelog fragment left behind once galaxy.yml's version is released, on a galaxy.yml version older
than the newest release, and on an execution-environment.yml that installs another version's tarball; it passes on
the state between releases (fragments waiting, version not released yet) and after a release. The checkout itself
passes. Also tests/release/compat_collections.py's range checks."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "release" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release_check = _load("release_check")
compat_collections = _load("compat_collections")

MODULE = '''
DOCUMENTATION = r"""
module: thing
short_description: A thing
version_added: 1.0.0
options:
  reuse:
    description: Reuse.
    type: bool
    version_added: {option}
"""
'''


def make_collection(tmp_path: Path, *, version="1.1.0", released=("1.0.0",), fragments=("a-change.yml",),
                    option="1.1.0", filter_added="1.0.0", role_added=None, fragment_added=None,
                    ee_version=None) -> Path:
    root = tmp_path / "collection"
    (root / "plugins" / "modules").mkdir(parents=True)
    (root / "plugins" / "filter").mkdir(parents=True)
    (root / "changelogs" / "fragments").mkdir(parents=True)
    (root / "galaxy.yml").write_text(f"namespace: k8sgpu\nname: nvidia\nversion: {version}\n")
    (root / "plugins" / "modules" / "thing.py").write_text(MODULE.format(option=option))
    (root / "plugins" / "filter" / "thing.py").write_text(
        f'DOCUMENTATION = r"""\nname: thing\nversion_added: "{filter_added}"\nshort_description: A filter\n"""\n\n\n'
        f'def thing(x):\n    return x\n\n\nclass FilterModule:\n    def filters(self):\n        return {{"thing": thing}}\n')
    if fragment_added:
        (root / "plugins" / "doc_fragments").mkdir()
        (root / "plugins" / "doc_fragments" / "auth.py").write_text(
            f'DOCUMENTATION = r"""\noptions:\n  host:\n    type: str\n    version_added: {fragment_added}\n"""\n')
    if role_added:
        (root / "roles" / "r" / "meta").mkdir(parents=True)
        (root / "roles" / "r" / "meta" / "argument_specs.yml").write_text(textwrap.dedent(f"""\
            argument_specs:
              main:
                options:
                  r_x:
                    type: str
                    version_added: '{role_added}'
            """))
    releases = "".join(f"  {v}:\n    release_date: '2026-11-01'\n" for v in released)
    text = "ancestor: null\nreleases:\n" + releases if released else "ancestor: null\nreleases: {}\n"
    (root / "changelogs" / "changelog.yaml").write_text(text)
    for f in fragments:
        (root / "changelogs" / "fragments" / f).write_text("minor_changes:\n  - A change.\n")
    if ee_version:
        (root / "execution-environment.yml").write_text(
            f"dependencies:\n  galaxy:\n    collections:\n      - name: collections/k8sgpu-nvidia-{ee_version}.tar.gz\n"
            f"additional_build_files:\n  - src: k8sgpu-nvidia-{ee_version}.tar.gz\n    dest: collections\n")
    return root


def errors(root):
    return release_check.check(root)[1]


def test_between_releases_passes(tmp_path):
    """1.1.0 not released yet, fragments waiting, content of 1.1.0: the state while work goes on."""
    assert errors(make_collection(tmp_path, ee_version="1.1.0")) == []


def test_after_the_release_passes(tmp_path):
    """antsibull-changelog release made 1.1.0 and consumed the fragments."""
    assert errors(make_collection(tmp_path, released=("1.0.0", "1.1.0"), fragments=())) == []


def test_option_newer_than_galaxy_version_fails(tmp_path):
    """What 1.0.0 shipped: a 1.1.0 option (gpu_facts.reuse) in a package that says 1.0.0."""
    found = errors(make_collection(tmp_path, version="1.0.0", fragments=()))
    assert len(found) == 1
    assert "plugins/modules/thing.py:10" in found[0] and "1.1.0" in found[0] and "1.0.0" in found[0]


@pytest.mark.parametrize("where", ["filter", "role", "fragment"])
def test_other_content_newer_than_galaxy_version_fails(tmp_path, where):
    kwargs = {"filter": {"filter_added": "1.2.0"}, "role": {"role_added": "1.2.0"},
              "fragment": {"fragment_added": "2.2.0"}}[where]
    found = errors(make_collection(tmp_path, **kwargs))
    path = {"filter": "plugins/filter/thing.py", "role": "roles/r/meta/argument_specs.yml",
            "fragment": "plugins/doc_fragments/auth.py"}[where]
    assert len(found) == 1 and found[0].startswith(path + ":"), found


def test_unparsable_version_added_fails(tmp_path):
    found = errors(make_collection(tmp_path, option="soon"))
    assert len(found) == 1 and "not a version" in found[0]


def test_fragment_left_after_release_fails(tmp_path):
    """galaxy.yml says 1.0.0, 1.0.0 is released, and 8 fragments wait: what main had before 1.1.0."""
    found = errors(make_collection(tmp_path, version="1.0.0", option="1.0.0",
                                   fragments=("one.yml", "two.yml")))
    assert len(found) == 1
    assert "1.0.0 is released" in found[0] and "one.yml, two.yml" in found[0]


def test_hidden_files_in_fragments_are_not_fragments(tmp_path):
    root = make_collection(tmp_path, released=("1.0.0", "1.1.0"), fragments=(".keep",))
    assert errors(root) == []


def test_version_older_than_newest_release_fails(tmp_path):
    found = errors(make_collection(tmp_path, version="1.0.0", option="1.0.0", released=("1.0.0", "1.1.0"),
                                   fragments=()))
    assert any("older than the release 1.1.0" in e for e in found), found


def test_execution_environment_of_another_version_fails(tmp_path):
    found = errors(make_collection(tmp_path, ee_version="1.0.0"))
    assert any("names the tarball of 1.0.0" in e for e in found), found
    assert any("does not install k8sgpu-nvidia-1.1.0.tar.gz" in e for e in found), found


def test_cli_exit_status(tmp_path):
    good = make_collection(tmp_path / "good")
    bad = make_collection(tmp_path / "bad", version="1.0.0")
    script = ROOT / "tests" / "release" / "release_check.py"
    assert subprocess.run([sys.executable, script, good], capture_output=True, check=False).returncode == 0
    proc = subprocess.run([sys.executable, script, bad], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "release check:" in proc.stderr


def test_the_checkout_passes():
    assert errors(ROOT) == []


def test_compat_collections_checks_both_ends_against_galaxy_ranges():
    wanted = {"kubernetes.core": ">=5.0.0,<7.0.0", "amazon.aws": ">=9.0.0,<12.0.0"}
    check = compat_collections.check
    assert check("lowest", {"kubernetes.core": "5.0.0", "amazon.aws": "9.0.0"}, wanted) == []
    assert check("newest", {"kubernetes.core": "6.6.0", "amazon.aws": "11.4.0"}, wanted) == []
    # the lowest end must be the lower bound itself, the newest inside the range (amazon.aws <11.0.0 shut 11.4.0 out)
    assert len(check("lowest", {"kubernetes.core": "5.0.1", "amazon.aws": "9.0.0"}, wanted)) == 1
    assert len(check("newest", {"kubernetes.core": "6.6.0", "amazon.aws": "11.4.0"},
                     {**wanted, "amazon.aws": ">=9.0.0,<11.0.0"})) == 1
    assert len(check("newest", {"kubernetes.core": "6.6.0"}, wanted)) == 1


FILTER_PY = '''from __future__ import annotations
{doc}

def {a}(x):
    return x


def {b}(x):
    return x


class FilterModule:
    def filters(self) -> dict:
        return {filters}
'''
FILTER_DOC = 'DOCUMENTATION = r"""\nname: {name}\nversion_added: 1.0.0\nshort_description: S\n"""\n'


def make_filters(tmp_path, files: dict[str, tuple[str, ...]], inline: set[str] = frozenset(),
                 ymls: tuple[str, ...] = ()) -> Path:
    """files: NAME.py -> the filters it holds; inline: the .py files with their own DOCUMENTATION."""
    root = tmp_path / "c"
    d = root / "plugins" / "filter"
    d.mkdir(parents=True)
    for stem, names in files.items():
        filters = "{" + ", ".join(f'"{n}": {n}' for n in names) + "}"
        a, b = (list(names) + ["unused_a", "unused_b"])[:2]
        doc = FILTER_DOC.format(name=stem) if stem in inline else ""
        (d / f"{stem}.py").write_text(FILTER_PY.format(doc=doc, a=a, b=b, filters=filters))
    for y in ymls:
        (d / f"{y}.yml").write_text(f"DOCUMENTATION:\n  name: {y}\n")
    return root


def test_one_documented_filter_per_file_passes(tmp_path):
    root = make_filters(tmp_path, {"taint": ("taint",), "plan": ("plan",)}, inline={"taint", "plan"})
    assert release_check.check_filter_entries(root, pending={}) == ([], [])


@pytest.mark.parametrize("files, inline, ymls, expect", [
    # 1.0.0: driver_plan.py beside driver_plan.yml (Galaxy listed driver_plan twice)
    ({"driver_plan": ("driver_plan",)}, set(), ("driver_plan",), "both show the filter driver_plan"),
    # 1.0.0: pod_security.py holds two filters documented by .yml (an undocumented entry pod_security)
    ({"pod_security": ("pod_security_namespace", "pod_security_conflict")}, set(),
     ("pod_security_namespace", "pod_security_conflict"), "pod_security, undocumented"),
    # a file's DOCUMENTATION would show for its second filter too
    ({"driver_plan": ("driver_plan", "driver_outcome")}, {"driver_plan"}, ("driver_outcome",),
     "driver_plan, twice"),
    # no documentation at all
    ({"taint": ("taint",)}, set(), (), "no DOCUMENTATION"),
    # a .yml of no filter
    ({"taint": ("taint",)}, {"taint"}, ("gone",), "gone.yml documents no filter"),
])
def test_filter_layouts_galaxy_lists_wrongly_fail(tmp_path, files, inline, ymls, expect):
    errors, notes = release_check.check_filter_entries(make_filters(tmp_path, files, inline, ymls), pending={})
    assert notes == [] and len(errors) == 1 and expect in errors[0], errors


def test_pending_filter_file_is_a_note_not_an_error(tmp_path):
    root = make_filters(tmp_path, {"apt_proxy": ("apt_proxy_lines", "apt_proxy_auth")}, set(),
                        ("apt_proxy_lines", "apt_proxy_auth"))
    errors, notes = release_check.check_filter_entries(root, pending={"apt_proxy.py": "apt_proxy_lines.py, ..."})
    assert errors == [] and len(notes) == 1 and "apt_proxy_lines.py" in notes[0]


def test_filter_docs_tool_splits_and_inlines(tmp_path):
    """tests/release/filter_docs.py turns the 1.0.0 layout into one documented file per filter."""
    root = make_filters(tmp_path, {"plan": ("plan", "outcome")}, set(), ("plan", "outcome"))
    d = root / "plugins" / "filter"
    for name in ("plan", "outcome"):
        (d / f"{name}.yml").write_text(f"---\nDOCUMENTATION:\n  name: {name}\n  version_added: 1.0.0\n"
                                       f"  short_description: The {name}\nEXAMPLES: |\n  x: \"{{{{ y | {name} }}}}\"\n"
                                       f"RETURN:\n  _value:\n    description: D.\n    type: dict\n")
    tool = ROOT / "tests" / "release" / "filter_docs.py"
    subprocess.run([sys.executable, tool, "split", d / "plan.py", "outcome"], check=True, capture_output=True)
    subprocess.run([sys.executable, tool, "inline", d / "plan.py", d / "plan.yml"], check=True, capture_output=True)
    assert release_check.check_filter_entries(root, pending={}) == ([], [])
    assert sorted(p.name for p in d.iterdir()) == ["outcome.py", "plan.py"]
    assert release_check.filter_names(d / "plan.py") == ["plan"]
    assert "from ansible_collections.k8sgpu.nvidia.plugins.filter.plan import outcome" in (d / "outcome.py").read_text()
