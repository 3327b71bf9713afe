"""README.md as tests read it (issue 47 items 3 and 4): its fenced blocks with the marker of those CI does not run,
its links, and the files the built tarball ships (galaxy.yml's build_ignore), for tests/unit/test_readme.py and
tests/lab/test_site_readme_commands.py.

A shell block CI does not run carries, in the paragraph right above it, the visible marker `*Not run in CI: <why>*`
(README.md says so to its readers).
"""
from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
REPOSITORY = "https://github.com/k8sgpu/ansible-collection-nvidia"
SHELLS = {"sh", "bash", "shell", "console"}
MARK = re.compile(r"\*Not run in CI: ([^*]+)\*")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
# [text](target): inline links (images included); the target up to white space or the closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# ansible-galaxy collection build's own patterns, beside build_ignore (ansible.galaxy.collection).
BUILD_DEFAULT_IGNORE = ["galaxy.yml", "galaxy.yaml", ".git", "*.pyc", "*.retry", "tests/output"]


@dataclass
class Block:
    path: str            # relative to the repository
    line: int            # of the opening fence, 1-based
    lang: str
    body: str
    not_run: str | None  # the marker's reason, None when unmarked

    @property
    def shell(self) -> bool:
        return self.lang in SHELLS

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order. A fence inside a list item may be indented."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = str(path.relative_to(ROOT))
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        # The paragraph right above the fence (back to a blank line).
        para: list[str] = []
        j = start - 1
        while j >= 0 and lines[j].strip() == "":
            j -= 1
        while j >= 0 and lines[j].strip() != "":
            para.insert(0, lines[j])
            j -= 1
        mark = MARK.search(" ".join(para))
        found.append(Block(rel, start + 1, lang, "\n".join(body) + "\n", mark.group(1).strip() if mark else None))
        i += 1
    return found


def links(text: str) -> list[str]:
    """Every inline link target of a Markdown text, outside fenced blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line) or line.strip() == "```":
            fenced = not fenced
            continue
        if not fenced:
            out.extend(LINK.findall(line))
    return out


def repository_path(target: str) -> str | None:
    """The repository file or directory a link names: a relative link, or one into the repository's main branch
    (REPOSITORY/blob/main/<path>, /tree/main/<path>); None for anything else (other sites, the repository itself,
    anchors). The fragment is dropped."""
    target = target.split("#", 1)[0]
    if not target:
        return None
    for kind in ("blob", "tree", "raw"):
        prefix = f"{REPOSITORY}/{kind}/main/"
        if target.startswith(prefix):
            return target[len(prefix):].rstrip("/")
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
        return None
    return target.lstrip("./").rstrip("/") or None


def build_ignore() -> list[str]:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))
    name = f"{galaxy['namespace']}-{galaxy['name']}-*.tar.gz"
    return BUILD_DEFAULT_IGNORE + [name] + list(galaxy.get("build_ignore") or [])


def ignored(path: str, patterns: list[str]) -> bool:
    """As ansible-galaxy collection build decides: a path is left out when it, or a directory above it, matches a
    pattern (fnmatch on the path relative to the collection's root)."""
    parts = path.split("/")
    return any(fnmatch.fnmatch("/".join(parts[:n]), pattern) for n in range(1, len(parts) + 1) for pattern in patterns)


def tarball_files() -> set[str]:
    """The repository's tracked files that the built tarball ships (galaxy.yml's build_ignore), with the directories
    above them."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    patterns = build_ignore()
    files = {p for p in tracked.decode().split("\0") if p and (ROOT / p).is_file() and not ignored(p, patterns)}
    dirs = {"/".join(p.split("/")[:n]) for p in files for n in range(1, p.count("/") + 1)}
    return files | dirs
