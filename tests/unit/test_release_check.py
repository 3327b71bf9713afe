"""tests/release/release_check.py (make lint's release check) on fixture collections in a temporary directory: it
fails on a version_added newer than galaxy.yml's version (modules, options, filters, doc fragments, role argument
specs), on a changelog fragment left behind once galaxy.yml's version is released, on a galaxy.yml version older
than the newest release, and on an execution-environment.yml that installs another version's tarball; it passes on
the state between releases (fragments waiting, version not released yet) and after a release. The checkout itself
passes. The rules of issue 47: breaking changes or removed features released in a minor or patch version (or waiting
in fragments for one), a released version (git tag, or its release commit in changelog.yaml) whose shipped files
changed since, a released version missing from CHANGELOG.rst, docs/porting_guide_2.rst out of step with changelogs/,
and --release (tests/release/release.sh) refusing a tree that is no release. Also tests/release/compat_collections.py's
range checks, tests/release/porting_guide.py's output and tests/release/release.sh's refusals."""
from __future__ import annotations

import importlib.util
import json
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
porting_guide = _load("porting_guide")

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
                    ee_version=None, breaking=(), released_breaking=None, guide=True) -> Path:
    """A collection: galaxy.yml's version, the releases of changelog.yaml (released_breaking: version -> its
    breaking_changes), fragments (those named in breaking with a breaking_changes entry), CHANGELOG.rst with every
    released version, and (guide) docs/porting_guide_2.rst as porting_guide.py writes it."""
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
    released_breaking = released_breaking or {}
    releases = "".join(f"  {v}:\n    release_date: '2026-11-01'\n"
                       + ("    changes:\n      breaking_changes:\n" + "".join(f"      - {json.dumps(e)}\n" for e in released_breaking[v])
                          if v in released_breaking else "") for v in released)
    text = "ancestor: null\nreleases:\n" + releases if released else "ancestor: null\nreleases: {}\n"
    (root / "changelogs" / "changelog.yaml").write_text(text)
    for f in fragments:
        body = f"breaking_changes:\n  - {f} changed, do this.\n" if f in breaking else "minor_changes:\n  - A change.\n"
        (root / "changelogs" / "fragments" / f).write_text(body)
    sections = "".join(f"v{v}\n{'=' * (len(v) + 1)}\n\nText.\n\n" for v in reversed(released))
    (root / "CHANGELOG.rst").write_text("=====\nNotes\n=====\n\n" + sections)
    if ee_version:
        (root / "execution-environment.yml").write_text(
            f"dependencies:\n  galaxy:\n    collections:\n      - name: collections/k8sgpu-nvidia-{ee_version}.tar.gz\n"
            f"additional_build_files:\n  - src: k8sgpu-nvidia-{ee_version}.tar.gz\n    dest: collections\n")
    if guide:
        (root / "docs").mkdir()
        (root / "docs" / "porting_guide_2.rst").write_text(porting_guide.render(root))
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


def check_all(root, strict=False):
    return release_check.check_all(root, strict)


# Issue 47: semantic versioning.
def test_breaking_changes_released_in_a_minor_version_fail(tmp_path):
    """What 1.1.0 was: a minor release with breaking changes (only 1.1.0 itself is exempt, as released before)."""
    root = make_collection(tmp_path, version="1.2.0", option="1.0.0", released=("1.0.0", "1.1.0", "1.2.0"),
                           fragments=(), released_breaking={"1.1.0": ["Old."], "1.2.0": ["Drops x: use y."]})
    found = errors(root)
    assert len(found) == 1, found
    assert "changelog.yaml: 1.2.0, a minor or patch release after 1.1.0, lists 1 breaking" in found[0]
    assert "2.0.0" in found[0]
    # 1.1.0 is exempt, and said so
    assert any("1.1.0 lists 1 breaking" in n for n in check_all(root)[2])


def test_breaking_changes_in_a_patch_release_fail_and_in_a_major_release_pass(tmp_path):
    patch = make_collection(tmp_path / "patch", version="2.0.1", option="1.0.0", fragments=(),
                            released=("1.0.0", "2.0.0", "2.0.1"), released_breaking={"2.0.1": ["Gone."]})
    assert any("2.0.1, a minor or patch release after 2.0.0" in e for e in errors(patch))
    major = make_collection(tmp_path / "major", version="2.0.0", option="1.0.0", fragments=(),
                            released=("1.0.0", "2.0.0"), released_breaking={"2.0.0": ["Gone: use y."]})
    assert errors(major) == []


def test_a_breaking_fragment_waiting_for_a_minor_version_fails(tmp_path):
    """main before issue 47: galaxy.yml 1.2.0, three fragments with breaking_changes."""
    root = make_collection(tmp_path, version="1.2.0", option="1.0.0", released=("1.0.0", "1.1.0"),
                           fragments=("a.yml", "b.yml"), breaking=("b.yml",))
    found = errors(root)
    assert len(found) == 1 and "1.2.0 is a minor or patch release after 1.1.0" in found[0], found
    assert "b.yml" in found[0] and "a.yml" not in found[0] and "2.0.0" in found[0]


def test_a_breaking_fragment_waiting_for_a_major_version_passes(tmp_path):
    """main now: galaxy.yml 2.0.0 not released, breaking fragments waiting: fine, with notes (no release yet)."""
    root = make_collection(tmp_path, version="2.0.0", option="1.0.0", released=("1.0.0", "1.1.0"),
                           fragments=("a.yml", "b.yml"), breaking=("b.yml",), ee_version="2.0.0")
    version, found, notes = check_all(root)
    assert found == [] and any("2.0.0 is not released yet (2 changelog fragment(s)" in n for n in notes), notes


# Issue 47: a released version is not built again from another tree.
def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": "/usr/bin:/bin", "HOME": str(root)})


def released_checkout(tmp_path, tag=True) -> Path:
    root = make_collection(tmp_path, version="1.1.0", released=("1.0.0", "1.1.0"), fragments=())
    (root / "galaxy.yml").write_text((root / "galaxy.yml").read_text() + "build_ignore:\n  - tests\n  - docs/dev.md\n")
    (root / "tests").mkdir()
    (root / "tests" / "t.py").write_text("x = 1\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "Release 1.1.0")
    if tag:
        git(root, "tag", "-a", "1.1.0", "-m", "k8sgpu.nvidia 1.1.0")
    return root


@pytest.mark.parametrize("tag", [True, False], ids=["git tag", "changelog.yaml release commit"])
def test_a_released_version_built_from_a_changed_tree_fails(tmp_path, tag):
    """What happened to 1.1.0: 45 commits changed 90 files while galaxy.yml still said 1.1.0."""
    root = released_checkout(tmp_path, tag)
    assert errors(root) == []
    (root / "plugins" / "modules" / "thing.py").write_text(MODULE.format(option="1.0.0") + "# changed\n")
    found = errors(root)
    assert len(found) == 1 and "1.1.0 is released" in found[0] and "plugins/modules/thing.py" in found[0], found
    assert ("git tag 1.1.0" if tag else "commit ") in found[0] and "2.0.0" in found[0] and "1.2.0" in found[0]
    git(root, "commit", "-q", "-am", "a change")  # committed or not, the same
    assert len(errors(root)) == 1
    (root / "galaxy.yml").write_text((root / "galaxy.yml").read_text().replace("1.1.0", "1.1.1"))
    (root / "changelogs" / "fragments" / "fix.yml").write_text("bugfixes:\n  - Fixed.\n")
    assert errors(root) == []  # the next version: fine


def test_files_the_tarball_does_not_ship_may_change_after_a_release(tmp_path):
    root = released_checkout(tmp_path)
    (root / "tests" / "t.py").write_text("x = 2\n")
    (root / "tests" / "new.py").write_text("y = 1\n")
    (root / "docs" / "dev.md").write_text("dev\n")
    assert errors(root) == []
    (root / "docs" / "new.md").write_text("new\n")  # untracked, shipped
    found = errors(root)
    assert len(found) == 1 and "docs/new.md" in found[0], found


def test_shipped_follows_build_ignore():
    patterns = ["tests", "docs/h100", "*.pyc", "changelogs/fragments"]
    assert release_check.shipped("plugins/modules/x.py", patterns)
    assert release_check.shipped("docs/security.md", patterns)
    assert not release_check.shipped("tests/unit/x.py", patterns)
    assert not release_check.shipped("docs/h100/run.log", patterns)
    assert not release_check.shipped("plugins/x.pyc", patterns)
    assert not release_check.shipped("changelogs/fragments/a.yml", patterns)


# Issue 47: CHANGELOG.rst, the porting guide, --release.
def test_a_released_version_missing_from_changelog_rst_fails(tmp_path):
    root = make_collection(tmp_path, released=("1.0.0", "1.1.0"), fragments=())
    (root / "CHANGELOG.rst").write_text("v1.0.0\n======\n\nText.\n")
    found = errors(root)
    assert len(found) == 1 and "CHANGELOG.rst has no section v1.1.0" in found[0], found


def test_release_mode_refuses_a_version_not_released(tmp_path):
    root = make_collection(tmp_path, ee_version="1.1.0")
    assert errors(root) == []
    found = release_check.check(root, strict=True)[1]
    assert len(found) == 1 and "1.1.0 is not released yet" in found[0], found
    released = make_collection(tmp_path / "r", released=("1.0.0", "1.1.0"), fragments=())
    assert release_check.check(released, strict=True)[1] == []


def test_release_mode_refuses_a_version_added_of_a_version_never_released(tmp_path):
    """1.2.0 became 2.0.0: Galaxy would show 'added in 1.2.0', a version nobody can install."""
    root = make_collection(tmp_path, version="2.0.0", option="1.2.0", released=("1.0.0", "1.1.0"), fragments=(),
                           ee_version="2.0.0")
    (root / "CHANGELOG.rst").write_text("v2.0.0\n======\n")
    version, found, notes = check_all(root)
    assert found == [] and any("version_added 1.2.0, a version never released" in n for n in notes)
    assert any("plugins/modules/thing.py:10" in e for e in release_check.check(root, strict=True)[1])


def test_porting_guide_out_of_step_fails_once_released_and_is_a_note_before(tmp_path):
    root = make_collection(tmp_path, version="2.0.0", option="1.0.0", released=("1.0.0", "1.1.0"),
                           fragments=("b.yml",), breaking=("b.yml",), ee_version="2.0.0")
    (root / "changelogs" / "fragments" / "c.yml").write_text("removed_features:\n  - Removed z: use w.\n")
    version, found, notes = check_all(root)
    assert found == [] and any("porting_guide_2.rst is out of step" in n for n in notes), notes
    assert any("porting_guide_2.rst is out of step" in e for e in release_check.check(root, strict=True)[1])
    released = make_collection(tmp_path / "r", version="2.0.0", option="1.0.0", released=("1.0.0", "2.0.0"),
                               fragments=(), released_breaking={"2.0.0": ["Gone: use y."]}, ee_version="2.0.0")
    assert errors(released) == []
    (released / "docs" / "porting_guide_2.rst").write_text("edited by hand\n")
    found = errors(released)
    assert len(found) == 1 and "out of step" in found[0] and "porting_guide.py write" in found[0], found


def test_porting_guide_lists_each_entry_under_its_version_the_same_before_and_after_the_release(tmp_path):
    before = make_collection(tmp_path / "b", version="2.0.0", option="1.0.0", released=("1.0.0", "1.1.0"),
                             fragments=("z.yml", "a.yml"), breaking=("z.yml", "a.yml"),
                             released_breaking={"1.1.0": ["Old break: do that."]})
    text = porting_guide.render(before)
    assert "Porting from 1.1.0 to 2.0.0" in text and "Porting from 1.0.0 to 1.1.0" in text
    assert text.index("2.0.0\n===") < text.index("- a.yml changed, do this.") < text.index("- z.yml changed") \
        < text.index("Porting from 1.0.0 to 1.1.0") < text.index("- Old break: do that.")
    after = make_collection(tmp_path / "a", version="2.0.0", option="1.0.0", released=("1.0.0", "1.1.0", "2.0.0"),
                            fragments=(), released_breaking={"1.1.0": ["Old break: do that."],
                                                             "2.0.0": ["z.yml changed, do this.", "a.yml changed, do this."]})
    assert porting_guide.render(after) == text
    script = ROOT / "tests" / "release" / "porting_guide.py"
    assert subprocess.run([sys.executable, script, "check", after], capture_output=True, check=False).returncode == 0
    (after / "docs" / "porting_guide_2.rst").write_text(text + "x\n")
    assert subprocess.run([sys.executable, script, "check", after], capture_output=True, check=False).returncode == 1


def test_the_shipped_porting_guide_is_in_step_with_changelogs():
    """docs/porting_guide_2.rst of this checkout is what porting_guide.py writes from changelogs/. While galaxy.yml's
    version waits for its release, fragments added since may be missing from it: make release writes them in (and
    make lint's release check notes it)."""
    version = porting_guide.galaxy_version(ROOT)
    if version not in {str(v) for v in porting_guide.releases(ROOT)}:
        pytest.skip(f"{version} is not released yet: make release writes the guide from the fragments")
    assert porting_guide.difference(ROOT) is None


def test_importer_warnings_not_about_the_dependencies_are_refused_by_a_release(tmp_path):
    """tests/release/importer-expected-warnings.txt: the dependency warnings are accepted; those after the PENDING
    marker (the private role's name) only between releases."""
    root = make_collection(tmp_path, released=("1.0.0", "1.1.0"), fragments=())
    (root / "tests" / "release").mkdir(parents=True)
    expected = root / "tests" / "release" / "importer-expected-warnings.txt"
    expected.write_text("# deps\nsyntax-check\\[unknown-module\\]: kubernetes\n")
    assert release_check.check(root, strict=True)[1] == []
    expected.write_text(expected.read_text() + "# PENDING: to fix\n^roles/k8s_apply:[0-9]+: role-name\n")
    version, found, notes = check_all(root)
    assert found == [] and any("accepts 1 galaxy-importer warning(s)" in n and "k8s_apply" in n for n in notes), notes
    found = release_check.check(root, strict=True)[1]
    assert len(found) == 1 and "role-name" in found[0] and "a release ships none" in found[0], found


def release_sh(root: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(root), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run([str(root / "tests" / "release" / "release.sh"), "--no-tag"], capture_output=True, text=True,
                          env=env, check=False)


def release_checkout(tmp_path) -> Path:
    root = make_collection(tmp_path, version="2.0.0", option="1.0.0", released=("1.0.0", "1.1.0"),
                           fragments=("a.yml",), breaking=("a.yml",), ee_version="2.0.0")
    (root / "tests" / "release").mkdir(parents=True)
    for name in ("release.sh", "release_check.py", "porting_guide.py"):
        (root / "tests" / "release" / name).write_bytes((ROOT / "tests" / "release" / name).read_bytes())
    (root / "tests" / "release" / "release.sh").chmod(0o755)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "work")
    return root


def test_release_sh_refuses_a_released_version_before_changing_anything(tmp_path):
    root = release_checkout(tmp_path)
    git(root, "tag", "-a", "2.0.0", "-m", "k8sgpu.nvidia 2.0.0")
    res = release_sh(root)
    assert res.returncode == 1 and "the tag 2.0.0 exists" in res.stderr, res.stderr
    assert (root / "changelogs" / "fragments" / "a.yml").is_file()


def test_release_sh_refuses_uncommitted_fragments(tmp_path):
    """antsibull-changelog release would release (and delete) a fragment nobody committed yet."""
    root = release_checkout(tmp_path)
    (root / "changelogs" / "fragments" / "wip.yml").write_text("minor_changes:\n  - Not committed.\n")
    res = release_sh(root)
    assert res.returncode == 1 and "?? changelogs/fragments/wip.yml" in res.stderr, res.stderr
    assert (root / "changelogs" / "fragments" / "wip.yml").is_file()


def test_release_sh_refuses_what_the_release_check_refuses(tmp_path):
    root = release_checkout(tmp_path)
    (root / "galaxy.yml").write_text((root / "galaxy.yml").read_text().replace("2.0.0", "1.2.0"))
    git(root, "commit", "-q", "-am", "1.2.0")
    res = release_sh(root)
    assert res.returncode == 1 and "1.2.0 is a minor or patch release after 1.1.0" in res.stderr, res.stderr


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
