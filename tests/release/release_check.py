"""The release's version checks (make lint -> make release-check), on a checkout:

- every ``version_added`` of the collection's content (modules and their options, action, filter and test plugins,
  doc fragments, role argument specs) is at most galaxy.yml's version: a plugin that says 1.1.0 in a package that says
  1.0.0 is a release nobody made;
- changelogs: when galaxy.yml's version is already released in changelogs/changelog.yaml, no fragment is left in
  changelogs/fragments (``antsibull-changelog release`` consumes them; one left behind is a change that no released
  changelog lists); galaxy.yml's version is not older than the newest release there;
- execution-environment.yml installs the tarball of galaxy.yml's version (its src and its collection name);
- one Galaxy entry per filter: galaxy-importer lists every .py of plugins/filter by its name and every filter's
  documentation file by its name, and ansible-doc takes a .py's DOCUMENTATION for every filter of that .py; so each
  filter is a .py of its own, named after it, with its documentation inside (no .yml); an undocumented filter fails
  the importer's ansible-doc run for all filters (Galaxy then shows none).

Fragments are allowed while galaxy.yml's version is not released yet (the state between releases).

  tests/release/release_check.py [collection root]      (default: this checkout)
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

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


def check(root: Path) -> tuple[str, list[str]]:
    galaxy = yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8"))
    version = str(galaxy["version"])
    try:
        parse_version(version)
    except ValueError as exc:
        return version, [f"galaxy.yml: version {exc}"]
    return version, (check_version_added(root, version) + check_changelog(root, version)
                     + check_execution_environment(root, version) + check_filter_entries(root)[0])


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[2]).resolve()
    version, errors = check(root)
    for note in check_filter_entries(root)[1]:
        print(f"release check: note: {note}", file=sys.stderr)
    for e in errors:
        print(f"release check: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"release check: galaxy.yml {version}: no version_added newer, changelog and fragments consistent, "
          f"execution-environment.yml installs k8sgpu-nvidia-{version}.tar.gz, one Galaxy entry per filter")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
