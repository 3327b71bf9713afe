"""docs/porting_guide_2.rst, generated from the changelog: every ``breaking_changes`` and ``removed_features`` entry of
the releases in changelogs/changelog.yaml (1.1.0 on) and of the fragments in changelogs/fragments that galaxy.yml's
version, not released yet, will release. Nobody edits the guide: a change that breaks something is a fragment with
``breaking_changes`` (what changed and what the user does), and `make release` (tests/release/release.sh) writes the
guide again with the changelog.

  tests/release/porting_guide.py write [collection root]   write docs/porting_guide_2.rst
  tests/release/porting_guide.py check [collection root]   exit 1, saying what differs, when it is out of step

tests/release/release_check.py (make lint) runs the check: an error once galaxy.yml's version is released, a note
while fragments wait for the release (the guide is written again by `make release`).
"""
from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import yaml

GUIDE = Path("docs") / "porting_guide_2.rst"
SECTIONS = (("breaking_changes", "Breaking Changes"), ("removed_features", "Removed Features"))
TITLE = "k8sgpu.nvidia 2.x Porting Guide"
INTRO = """\
This guide is for users of k8sgpu.nvidia 1.x moving to 2.x: each entry below says what changed in a way that can
break a playbook, an inventory or a site, and what to do. Read the sections from the version you run up to the one
you install. The complete list of changes of each release is in CHANGELOG.rst.

1.1.0 was released as a minor version although it had breaking changes: if you run 1.0.x, the 1.1.0 section applies
to you too (a requirement of ``<2.0.0`` did not protect you from it). From 2.0.0 on, only a major version breaks
anything (semantic versioning); ``k8sgpu.nvidia:>=2.0.0,<3.0.0`` in a requirements.yml is safe to upgrade within."""


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a version major.minor.patch")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def galaxy_version(root: Path) -> str:
    return str(yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8"))["version"])


def releases(root: Path) -> dict:
    path = root / "changelogs" / "changelog.yaml"
    if not path.is_file():
        return {}
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("releases") or {}


def fragment_files(root: Path) -> list[Path]:
    d = root / "changelogs" / "fragments"
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix in (".yml", ".yaml"))


def fragments(root: Path) -> dict[str, dict]:
    """name -> the fragment's sections (an unparsable fragment is antsibull-changelog lint's error: {} here)."""
    out = {}
    for p in fragment_files(root):
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            data = None
        out[p.name] = data if isinstance(data, dict) else {}
    return out


def _entries(changes: dict, key: str) -> list[str]:
    value = (changes or {}).get(key) or []
    if isinstance(value, str):
        value = [value]
    return [" ".join(str(v).split()) for v in value if str(v).strip()]


def guide_versions(root: Path) -> list[tuple[str, str, dict[str, list[str]]]]:
    """(version, the release before it, {section: entries}) for each version with something to port, newest first:
    the releases of changelog.yaml and, when galaxy.yml's version is not released, the fragments waiting for it."""
    rel = releases(root)
    versions = sorted((str(v) for v in rel), key=parse_version)
    found: list[tuple[str, str, dict[str, list[str]]]] = []
    for i, v in enumerate(versions):
        changes = (rel[v].get("changes") if isinstance(rel[v], dict) else None) or {}
        sections = {key: sorted(_entries(changes, key)) for key, _title in SECTIONS}
        if any(sections.values()):
            found.append((v, versions[i - 1] if i else "", sections))
    version = galaxy_version(root)
    if version not in {str(v) for v in rel}:
        pending = {key: sorted(e for f in fragments(root).values() for e in _entries(f, key)) for key, _t in SECTIONS}
        if any(pending.values()):
            found.append((version, versions[-1] if versions else "", pending))
    return sorted(found, key=lambda item: parse_version(item[0]), reverse=True)


def _bullet(text: str, width: int = 118) -> list[str]:
    words, lines, line = text.split(), [], "-"
    for w in words:
        if len(line) + 1 + len(w) > width and line.strip() != "-":
            lines.append(line)
            line = " "
        line += " " + w
    lines.append(line)
    return lines


def _heading(text: str, char: str, over: bool = False) -> list[str]:
    rule = char * len(text)
    return ([rule] if over else []) + [text, rule, ""]


def render(root: Path) -> str:
    out = [".. Generated by tests/release/porting_guide.py from changelogs/ (changelog.yaml and the fragments):",
           "   do not edit; add a changelog fragment with breaking_changes or removed_features instead.", ""]
    out += _heading(TITLE, "=", over=True) + INTRO.splitlines() + ["", ".. contents::", "  :local:", "  :depth: 2", ""]
    versions = guide_versions(root)
    if not versions:
        out += ["Nothing to port: no release has breaking changes or removed features.", ""]
    for version, before, sections in versions:
        out += _heading(f"Porting from {before} to {version}" if before else f"Porting to {version}", "=")
        for key, title in SECTIONS:
            if sections[key]:
                out += _heading(title, "-")
                for entry in sections[key]:
                    out += _bullet(entry)
                out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def difference(root: Path) -> str | None:
    """None when docs/porting_guide_2.rst is what render() writes, else a short diff."""
    path = root / GUIDE
    want = render(root)
    have = path.read_text(encoding="utf-8") if path.is_file() else ""
    if have == want:
        return None
    diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(), str(GUIDE), "generated", lineterm="", n=0))
    return "\n".join(diff[:20] + ([f"... {len(diff) - 20} more lines"] if len(diff) > 20 else []))


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[2] if len(argv) > 2 else Path(__file__).resolve().parents[2]).resolve()
    if argv[1] == "write":
        (root / GUIDE).parent.mkdir(parents=True, exist_ok=True)
        (root / GUIDE).write_text(render(root), encoding="utf-8")
        print(f"porting guide: wrote {GUIDE} ({sum(len(s[2]['breaking_changes']) + len(s[2]['removed_features']) for s in guide_versions(root))} entries)")
        return 0
    diff = difference(root)
    if diff:
        print(f"porting guide: {GUIDE} is out of step with changelogs/: run tests/release/porting_guide.py write\n{diff}",
              file=sys.stderr)
        return 1
    print(f"porting guide: {GUIDE} is in step with changelogs/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
