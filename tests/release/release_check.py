#!/usr/bin/env python3
"""The release's version checks (make lint -> make release-check), on a checkout:

- every ``version_added`` of the collection's content (modules and their options, action, filter and test plugins,
  doc fragments, role argument specs) is at most galaxy.yml's version: a plugin that says 1.1.0 in a package that says
  1.0.0 is a release nobody made;
- changelogs: when galaxy.yml's version is already released in changelogs/changelog.yaml, no fragment is left in
  changelogs/fragments (``antsibull-changelog release`` consumes them; one left behind is a change that no released
  changelog lists); galaxy.yml's version is not older than the newest release there;
- execution-environment.yml installs the tarball of galaxy.yml's version (its src and its collection name).

Fragments are allowed while galaxy.yml's version is not released yet (the state between releases).

  tests/release/release_check.py [collection root]      (default: this checkout)
"""
from __future__ import annotations

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


def check(root: Path) -> tuple[str, list[str]]:
    galaxy = yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8"))
    version = str(galaxy["version"])
    try:
        parse_version(version)
    except ValueError as exc:
        return version, [f"galaxy.yml: version {exc}"]
    return version, (check_version_added(root, version) + check_changelog(root, version)
                     + check_execution_environment(root, version))


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[2]).resolve()
    version, errors = check(root)
    for e in errors:
        print(f"release check: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"release check: galaxy.yml {version}: no version_added newer, changelog and fragments consistent, "
          f"execution-environment.yml installs k8sgpu-nvidia-{version}.tar.gz")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
