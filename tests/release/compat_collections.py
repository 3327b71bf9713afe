"""The dependency collections (galaxy.yml's dependencies) at one end of their range, from PyPI only: the `ansible`
package's wheel ships them, so `pip download --no-deps ansible==X` (pip's cache keeps it) and only their directories
are unpacked into DEST/ansible_collections/<namespace>/<name>. Galaxy is never contacted.

  tests/release/compat_collections.py lowest ANSIBLE_VERSION DEST   each must be galaxy.yml's lower bound exactly
  tests/release/compat_collections.py newest ANSIBLE_VERSION DEST   each must be inside galaxy.yml's range

make compat uses the lowest (ansible 11.0.0: kubernetes.core 5.0.0, amazon.aws 9.0.0), make compat-newest the newest
(ansible 14.5.0: kubernetes.core 6.6.0, amazon.aws 11.4.0). A wheel whose collections no longer match galaxy.yml
fails here, naming the version it found: move the ansible version or galaxy.yml's range with it.
DEST/.installed marks a finished unpacking (the next run with the same version reuses it).
"""
from __future__ import annotations

import json
import operator
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq,
       "!=": operator.ne}


def version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text.split("-")[0].split("+")[0])[:3])


def parse_range(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """'>=5.0.0,<7.0.0' -> [('>=', (5, 0, 0)), ('<', (7, 0, 0))]; '*' -> []."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        if part in ("", "*"):
            continue
        m = re.fullmatch(r"(>=|<=|==|!=|>|<)?\s*(\S+)", part)
        out.append((m.group(1) or "==", version(m.group(2))))
    return out


def in_range(found: str, spec: str) -> bool:
    return all(OPS[op](version(found), bound) for op, bound in parse_range(spec))


def lower_bound(spec: str) -> tuple[int, ...] | None:
    bounds = [b for op, b in parse_range(spec) if op in (">=", "==")]
    return max(bounds) if bounds else None


def check(end: str, found: dict[str, str], wanted: dict[str, str]) -> list[str]:
    errors = []
    for name, spec in wanted.items():
        have = found.get(name)
        if have is None:
            errors.append(f"{name}: not in the ansible package")
        elif end == "lowest" and version(have) != lower_bound(spec):
            errors.append(f"{name} {have} is not galaxy.yml's lower bound ({spec})")
        elif not in_range(have, spec):
            errors.append(f"{name} {have} is outside galaxy.yml's range {spec}: raise the bound if it passes")
    return errors


def main(argv: list[str]) -> int:
    end, ansible_version, dest = argv[1], argv[2], Path(argv[3]).resolve()
    if end not in ("lowest", "newest"):
        sys.exit(f"usage: {argv[0]} lowest|newest ANSIBLE_VERSION DEST")
    wanted = yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]
    marker = dest / ".installed"
    if not (marker.is_file() and marker.read_text().strip() == ansible_version):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                            "--ignore-requires-python", "--disable-pip-version-check", "-d", tmp,
                            f"ansible=={ansible_version}"], check=True)
            wheel = next(Path(tmp).glob("ansible-*.whl"))
            shutil.rmtree(dest, ignore_errors=True)
            prefixes = tuple("ansible_collections/{}/{}/".format(*c.split(".")) for c in wanted)
            with zipfile.ZipFile(wheel) as z:
                z.extractall(dest, [n for n in z.namelist() if n.startswith(prefixes)])
        marker.write_text(ansible_version + "\n")
    found = {}
    for c in wanted:
        manifest = dest / "ansible_collections" / c.replace(".", "/") / "MANIFEST.json"
        if manifest.is_file():
            found[c] = json.loads(manifest.read_text())["collection_info"]["version"]
    errors = check(end, found, wanted)
    for e in errors:
        print(f"compat ({end}, ansible {ansible_version}): {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"compat ({end}): ansible {ansible_version}'s " + ", ".join(f"{c} {v}" for c, v in sorted(found.items()))
          + f" in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
