"""The release's version checks (make lint -> make release-check), on a checkout:

- every ``version_added`` of the collection's content (modules and their options, action, filter and test plugins,
  doc fragments, role argument specs) is at most galaxy.yml's version: a plugin that says 1.1.0 in a package that says
  1.0.0 is a release nobody made;
- changelogs: when galaxy.yml's version is already released in changelogs/changelog.yaml, no fragment is left in
  changelogs/fragments (``antsibull-changelog release`` consumes them; one left behind is a change that no released
  changelog lists); galaxy.yml's version is not older than the newest release there;
- semantic versioning: no release of changelogs/changelog.yaml after 1.1.0 (released before this rule) that is a minor
  or patch release lists ``breaking_changes`` or ``removed_features``, and no fragment with them waits while
  galaxy.yml's version is a minor or patch release after the newest one (the fix: the next major version);
- a released version is never built again from another tree: once galaxy.yml's version is released (its git tag, or
  its release in changelogs/changelog.yaml, from the commit that released it), no file the tarball ships differs from
  that tag or commit (committed or not); the fix is the next version in galaxy.yml;
- a released version's CHANGELOG.rst (shipped in the tarball) has that version's section;
- docs/porting_guide_2.rst is what tests/release/porting_guide.py generates from changelogs/ (an error once the
  version is released; a note while fragments wait: `make release` writes it again);
- execution-environment.yml installs the tarball of galaxy.yml's version (its src and its collection name);
- one Galaxy entry per filter: galaxy-importer lists every .py of plugins/filter by its name and every filter's
  documentation file by its name, and ansible-doc takes a .py's DOCUMENTATION for every filter of that .py; so each
  filter is a .py of its own, named after it, with its documentation inside (no .yml); an undocumented filter fails
  the importer's ansible-doc run for all filters (Galaxy then shows none).

Fragments are allowed while galaxy.yml's version is not released yet (the state between releases): the check passes
and notes that the tarball built then is no release. With --release (tests/release/release.sh, after
`antsibull-changelog release` and before its commit and tag; and before any upload to Galaxy) that is an error too:
galaxy.yml's version must be released in changelog.yaml and CHANGELOG.rst, no fragment left, the porting guide in step,
no version_added naming a version that was never released, and galaxy-importer's accepted warnings only those that
need the dependency collections (tests/release/importer-expected-warnings.txt, none after its PENDING marker).

  tests/release/release_check.py [--release] [collection root]      (default: this checkout)
"""
from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import porting_guide  # noqa: E402  (tests/release/porting_guide.py)

VERSION_ADDED = re.compile(r"""^\s*(?:-\s+)?version_added:\s*["']?([^"'\s#]+)""", re.MULTILINE)
TARBALL = re.compile(r"k8sgpu-nvidia-([0-9A-Za-z.+-]+?)\.tar\.gz")


def parse_version(text: str) -> tuple[int, int, int]:
    """'1.1.0' -> (1, 1, 0); anything that is not major.minor.patch raises ValueError."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a version major.minor.patch")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def content_files(root: Path) -> list[Path]:
    """The files whose version_added Galaxy and ansible-doc show."""
    files = [p for p in sorted((root / "plugins").rglob("*")) if p.suffix in (".py", ".yml", ".yaml") and p.is_file()]
    files += sorted(root.glob("roles/*/meta/argument_specs.yml")) + sorted(root.glob("roles/*/meta/argument_specs.yaml"))
    return [p for p in files if "__pycache__" not in p.parts]


def check_version_added(root: Path, version: str) -> list[str]:
    limit = parse_version(version)
    errors = []
    for path in content_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in VERSION_ADDED.finditer(text):
            line = text.count("\n", 0, m.start(1)) + 1
            where = f"{path.relative_to(root)}:{line}"
            try:
                added = parse_version(m.group(1))
            except ValueError as exc:
                errors.append(f"{where}: version_added {exc}")
                continue
            if added > limit:
                errors.append(f"{where}: version_added {m.group(1)} is newer than galaxy.yml's version {version}: "
                              f"set galaxy.yml's version to the release this content ships in")
    return errors


def check_changelog(root: Path, version: str) -> list[str]:
    changelog = root / "changelogs" / "changelog.yaml"
    if not changelog.is_file():
        return [f"{changelog.relative_to(root)} is missing"]
    releases = (yaml.safe_load(changelog.read_text(encoding="utf-8")) or {}).get("releases") or {}
    released = {str(v) for v in releases}
    fragments_dir = root / "changelogs" / "fragments"
    fragments = sorted(p.name for p in fragments_dir.iterdir()
                       if p.is_file() and not p.name.startswith(".")) if fragments_dir.is_dir() else []
    errors = []
    if version in released and fragments:
        errors.append(f"galaxy.yml's version {version} is released in changelogs/changelog.yaml, yet "
                      f"{len(fragments)} changelog fragment(s) are left unreleased ({', '.join(fragments)}): raise "
                      f"galaxy.yml's version for the next release, or run `antsibull-changelog release` for this one")
    newer = sorted((v for v in released if parse_version(v) > parse_version(version)), key=parse_version)
    if newer:
        errors.append(f"galaxy.yml's version {version} is older than the release {newer[-1]} in "
                      f"changelogs/changelog.yaml")
    return errors


# Releases made before the semantic-versioning rule, whose breaking changes stay as released (their entries are in
# docs/porting_guide_2.rst): version -> why it is tolerated.
SEMVER_EXEMPT: dict[str, str] = {
    "1.1.0": "released 2026-11-28 as a minor version with 7 breaking changes, before this check; "
             "docs/porting_guide_2.rst has them for 1.0.x users",
}
BREAKING = ("breaking_changes", "removed_features")


def load_releases(root: Path) -> dict:
    changelog = root / "changelogs" / "changelog.yaml"
    if not changelog.is_file():
        return {}
    return (yaml.safe_load(changelog.read_text(encoding="utf-8")) or {}).get("releases") or {}


def breaking_count(changes: dict) -> int:
    return sum(len(changes.get(k) or []) for k in BREAKING if isinstance(changes, dict))


def is_major_bump(before: str, after: str) -> bool:
    """after is the next major release after before (or a 0.x release: 0.y may break anything)."""
    b, a = parse_version(before), parse_version(after)
    return a[0] > b[0] or (b[0] == 0 and a[0] == 0)


def check_semver(root: Path, version: str, exempt: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(errors, notes): breaking changes or removed features only in a major release."""
    exempt = SEMVER_EXEMPT if exempt is None else exempt
    releases = load_releases(root)
    ordered = sorted((str(v) for v in releases), key=parse_version)
    errors, notes = [], []
    for before, after in zip(ordered, ordered[1:]):
        changes = (releases.get(after) or releases.get(parse_version(after)) or {}).get("changes") or {}
        n = breaking_count(changes)
        if n and not is_major_bump(before, after):
            if after in exempt:
                notes.append(f"changelog.yaml: {after} lists {n} breaking change(s) or removed feature(s) after "
                             f"{before}: {exempt[after]}")
            else:
                errors.append(f"changelogs/changelog.yaml: {after}, a minor or patch release after {before}, lists {n} "
                              f"breaking change(s) or removed feature(s): semantic versioning releases them only in a "
                              f"major version ({parse_version(before)[0] + 1}.0.0)")
    if version in {str(v) for v in releases} or not ordered:
        return errors, notes
    newest = ordered[-1]
    breaking = [name for name, data in porting_guide.fragments(root).items() if breaking_count(data)]
    if breaking and parse_version(version) > parse_version(newest) and not is_major_bump(newest, version):
        major = parse_version(newest)[0] + 1
        errors.append(f"galaxy.yml's version {version} is a minor or patch release after {newest}, yet the fragment(s) "
                      f"{', '.join(breaking)} have breaking_changes or removed_features: set galaxy.yml's version to "
                      f"{major}.0.0 (and execution-environment.yml's tarball), or make the change compatible")
    return errors, notes


def build_ignore(root: Path) -> list[str]:
    galaxy = yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8")) or {}
    return [str(p) for p in galaxy.get("build_ignore") or []]


def shipped(path: str, patterns: list[str]) -> bool:
    """Whether ansible-galaxy collection build puts path (relative to the root) in the tarball: build_ignore's
    fnmatch patterns against the path and each directory above it (a matched directory is left out whole)."""
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return not any(fnmatch.fnmatch(c, p) for c in candidates for p in patterns)


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def release_ref(root: Path, version: str, released: set[str]) -> tuple[str, str] | None:
    """(ref, what it is) of galaxy.yml's version when released: its git tag, else the commit that added its release to
    changelogs/changelog.yaml; None when it is not released, or released only in the working tree (being released)."""
    tag = git(root, "rev-parse", "-q", "--verify", f"refs/tags/{version}^{{commit}}")
    if tag.returncode == 0 and tag.stdout.strip():
        return tag.stdout.strip(), f"git tag {version}"
    if version not in released:
        return None
    pattern = "^  " + re.escape(version).replace("\\.", "[.]") + ":"
    log = git(root, "log", "--reverse", "--format=%H", "-G", pattern, "--", "changelogs/changelog.yaml")
    commits = log.stdout.split()
    if log.returncode or not commits:
        return None
    return commits[0], f"commit {commits[0][:12]}, which released it in changelogs/changelog.yaml"


def check_released_tree(root: Path, version: str) -> tuple[list[str], list[str]]:
    """(errors, notes): the tree of a released version is the released one."""
    released = {str(v) for v in load_releases(root)}
    if git(root, "rev-parse", "--is-inside-work-tree").returncode:
        return [], [f"{root} is no git checkout: whether {version} was released from another tree is not checked"]
    top = Path(git(root, "rev-parse", "--show-toplevel").stdout.strip()).resolve()
    if top != root.resolve():
        return [], [f"{root} is not the top of its git checkout ({top}): released tree not checked"]
    ref = release_ref(root, version, released)
    if ref is None:
        return [], []
    commit, what = ref
    changed = git(root, "diff", "--name-only", commit, "--").stdout.split("\n")
    changed += git(root, "ls-files", "--others", "--exclude-standard").stdout.split("\n")
    patterns = build_ignore(root)
    files = sorted({f for f in changed if f and shipped(f, patterns)})
    if not files:
        return [], []
    shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
    major, minor, patch = parse_version(version)
    return [f"galaxy.yml's version {version} is released ({what}), and {len(files)} file(s) the tarball ships changed "
            f"since ({shown}): a tarball built now would be another {version}. Set galaxy.yml's version (and "
            f"execution-environment.yml's tarball) to the next release, {major + 1}.0.0 with breaking changes, "
            f"{major}.{minor + 1}.0 with features, {major}.{minor}.{patch + 1} with fixes only, and add a changelog "
            f"fragment for each change"], []


def rst_has_version(text: str, version: str) -> bool:
    lines = text.splitlines()
    return any(line.strip() == f"v{version}" and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"="}
               for i, line in enumerate(lines))


def check_changelog_rst(root: Path, version: str, strict: bool) -> tuple[list[str], list[str]]:
    """(errors, notes): the CHANGELOG.rst that ships has the section of the version being built."""
    released = {str(v) for v in load_releases(root)}
    rst = root / "CHANGELOG.rst"
    text = rst.read_text(encoding="utf-8") if rst.is_file() else ""
    if version in released:
        if not rst_has_version(text, version):
            return [f"CHANGELOG.rst has no section v{version}, yet changelogs/changelog.yaml releases {version}: the "
                    f"tarball would ship a changelog without its own version; run `antsibull-changelog generate` "
                    f"(make release does)"], []
        return [], []
    pending = len(porting_guide.fragment_files(root))
    msg = (f"galaxy.yml's version {version} is not released yet ({pending} changelog fragment(s) wait for it; "
           f"CHANGELOG.rst has no v{version}): a tarball built now is no release; `make release` releases it "
           f"(tests/release/release.sh)")
    return ([msg], []) if strict else ([], [msg])


def check_porting_guide(root: Path, version: str, strict: bool) -> tuple[list[str], list[str]]:
    diff = porting_guide.difference(root)
    if not diff:
        return [], []
    released = version in {str(v) for v in load_releases(root)}
    msg = (f"{porting_guide.GUIDE} is out of step with changelogs/ (python tests/release/porting_guide.py write"
           f"{'' if released or strict else '; make release writes it'}):\n{diff}")
    return ([msg], []) if released or strict else ([], [msg.splitlines()[0]])


def check_unreleased_version_added(root: Path, version: str, strict: bool) -> tuple[list[str], list[str]]:
    """version_added naming a version that is neither released nor galaxy.yml's (1.2.0, which became 2.0.0): Galaxy
    would show a version nobody can install. release.sh sets them to the version it releases."""
    released = {str(v) for v in load_releases(root)} | {version}
    found: dict[str, list[str]] = {}
    for path in content_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in VERSION_ADDED.finditer(text):
            if m.group(1) not in released:
                found.setdefault(m.group(1), []).append(f"{path.relative_to(root)}:{text.count(chr(10), 0, m.start(1)) + 1}")
    msgs = [f"version_added {v}, a version never released, in {len(w)} place(s) ({', '.join(w[:5])}"
            f"{', ...' if len(w) > 5 else ''}): the release sets them to {version} (tests/release/release.sh)"
            for v, w in sorted(found.items())]
    return (msgs, []) if strict else ([], msgs)


IMPORTER_EXPECTED = Path("tests") / "release" / "importer-expected-warnings.txt"
PENDING_MARKER = "# PENDING:"


def check_importer_expected(root: Path, strict: bool) -> tuple[list[str], list[str]]:
    """galaxy-importer's accepted warnings (tests/release/importer.sh) are those that need the dependency collections
    installed; the ones listed after the PENDING marker are tolerated between releases and refused by --release."""
    path = root / IMPORTER_EXPECTED
    if not path.is_file():
        return [], []
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(PENDING_MARKER)), len(lines))
    pending = [line for line in lines[start:] if line.strip() and not line.lstrip().startswith("#")]
    if not pending:
        return [], []
    msg = (f"{IMPORTER_EXPECTED} accepts {len(pending)} galaxy-importer warning(s) that are not about the dependencies "
           f"({'; '.join(pending)}): fix them and remove the line(s), a release ships none")
    return ([msg], []) if strict else ([], [msg])


def check_execution_environment(root: Path, version: str) -> list[str]:
    ee = root / "execution-environment.yml"
    if not ee.is_file():
        return []
    names = set(TARBALL.findall(ee.read_text(encoding="utf-8")))
    wrong = sorted(names - {version})
    errors = [f"execution-environment.yml names the tarball of {', '.join(wrong)}, not galaxy.yml's version {version}"
              ] if wrong else []
    if version not in names:
        errors.append(f"execution-environment.yml does not install k8sgpu-nvidia-{version}.tar.gz")
    return errors


# Filter files awaiting their split or rename by the lead (files other helpers are editing): name -> the files they
# become, one per filter, each with its filter's documentation inline. Tolerated here, printed as a note; remove each
# entry once done.
PENDING_FILTER_RENAMES: dict[str, str] = {}


def filter_names(path: Path) -> list[str]:
    """The names a filter plugin file's FilterModule.filters() returns (its dict literal's string keys)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                    return [k.value for k in ret.value.keys if isinstance(k, ast.Constant)]
    return []


def inline_doc_name(path: Path) -> str | None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION"
                and isinstance(node.value, ast.Constant)):
            return str((yaml.safe_load(node.value.value) or {}).get("name"))
    return None


def check_filter_entries(root: Path, pending: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(errors, notes) for one Galaxy entry per filter: each .py of plugins/filter holds one filter, is named after
    it and documents it inline; no .yml beside it (tests/release/filter_docs.py does the moves)."""
    pending = PENDING_FILTER_RENAMES if pending is None else pending
    d = root / "plugins" / "filter"
    if not d.is_dir():
        return [], []
    errors, notes = [], []
    for py in sorted(d.glob("*.py")):
        if py.name == "__init__.py":
            continue
        rel, stem, names = py.relative_to(root), py.stem, filter_names(py)
        problems = []
        if names != [stem]:
            problems.append(f"{rel} holds the filters {names}: Galaxy lists a filter file by its name (here "
                            f"{stem}{', undocumented' if stem not in names else ', twice'}) and ansible-doc shows "
                            f"its DOCUMENTATION for every filter in it; give each filter a .py of its own, named after "
                            f"it (tests/release/filter_docs.py split)")
        elif (d / f"{stem}.yml").exists() or (d / f"{stem}.yaml").exists():
            problems.append(f"{rel} and {stem}.yml both show the filter {stem} on Galaxy: move the .yml into the .py "
                            f"(tests/release/filter_docs.py inline)")
        elif inline_doc_name(py) != stem:
            problems.append(f"{rel}: no DOCUMENTATION with name: {stem} (an undocumented filter fails galaxy-importer's "
                            f"ansible-doc run for every filter)")
        if problems and py.name in pending:
            notes.append(f"{rel}: pending: {pending[py.name]} ({'; '.join(problems)})")
        else:
            errors += problems
    held = {n for py in d.glob("*.py") for n in filter_names(py)}
    for yml in sorted(list(d.glob("*.yml")) + list(d.glob("*.yaml"))):
        if yml.stem not in held:
            errors.append(f"{yml.relative_to(root)} documents no filter of plugins/filter")
    return errors, notes


def check(root: Path, strict: bool = False) -> tuple[str, list[str]]:
    return check_all(root, strict)[:2]


def check_all(root: Path, strict: bool = False) -> tuple[str, list[str], list[str]]:
    """(galaxy.yml's version, errors, notes). strict: the tree must be a release (release.sh, before an upload)."""
    galaxy = yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8"))
    version = str(galaxy["version"])
    try:
        parse_version(version)
    except ValueError as exc:
        return version, [f"galaxy.yml: version {exc}"], []
    errors = check_version_added(root, version) + check_changelog(root, version) + check_execution_environment(root, version)
    filter_errors, notes = check_filter_entries(root)
    errors += filter_errors
    for found, noted in (check_semver(root, version), check_released_tree(root, version),
                         check_changelog_rst(root, version, strict), check_porting_guide(root, version, strict),
                         check_unreleased_version_added(root, version, strict), check_importer_expected(root, strict)):
        errors += found
        notes += noted
    return version, errors, notes


def main(argv: list[str]) -> int:
    args = argv[1:]
    strict = "--release" in args
    args = [a for a in args if a != "--release"]
    root = Path(args[0] if args else Path(__file__).resolve().parents[2]).resolve()
    version, errors, notes = check_all(root, strict)
    for note in notes:
        print(f"release check: note: {note}", file=sys.stderr)
    for e in errors:
        print(f"release check: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"release check: galaxy.yml {version}: no version_added newer, changelog and fragments consistent, "
          f"breaking changes only in a major release, no released version rebuilt from another tree, "
          f"execution-environment.yml installs k8sgpu-nvidia-{version}.tar.gz, one Galaxy entry "
          f"per filter" + (", CHANGELOG.rst and the porting guide have it" if strict else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
