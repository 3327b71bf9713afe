# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dpkg status of a few packages and their holds (private to the collection, for the dpkg_packages module)."""
from __future__ import annotations

import re

# One line per package (and per architecture of a Multi-Arch: same package).
QUERY_FORMAT = "${Package}|${Version}|${db:Status-Status}|${db:Status-Want}\n"
# The characters that may follow a version prefix: "1.20.1" matches 1.20.1-1, not 1.20.10-1 nor the
# pre-release 1.20.1~rc.1-1.
_BOUNDARY = ".-+"
_EPOCH = re.compile(r"^\d+:")


class DpkgError(Exception):
    pass


def query_args(dpkg_query: str, names: list[str]) -> list[str]:
    return [dpkg_query, "-W", f"-f={QUERY_FORMAT}", "--", *names]


def version_matches(installed: str | None, wanted: str | None) -> bool:
    """Whether an installed Debian version is the wanted one, or starts with it at a component boundary.

    An empty ``wanted`` matches any installed version. An epoch of the installed
    version is ignored unless ``wanted`` has one.
    """
    if not wanted:
        return installed is not None
    if installed is None:
        return False
    if ":" not in wanted:
        installed = _EPOCH.sub("", installed)
    return installed == wanted or (installed.startswith(wanted) and installed[len(wanted)] in _BOUNDARY)


def parse_status(stdout: str, names: list[str]) -> dict[str, dict]:
    """Map each name to installed, version (null unless installed), status and selection.

    A package dpkg does not know at all is not installed, with status and selection
    V(unknown). Several lines for one name (several architectures): an installed one wins.
    """
    packages = {n: {"installed": False, "version": None, "status": "unknown", "selection": "unknown"} for n in names}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 4:
            raise DpkgError(f"unexpected dpkg-query line {line!r} (wanted package|version|status|selection)")
        name, version, status, selection = fields
        name = name.split(":", 1)[0]
        if name not in packages or packages[name]["installed"]:
            continue
        installed = status == "installed"
        packages[name] = {"installed": installed, "version": version if installed and version else None,
                          "status": status or "unknown", "selection": selection or "unknown"}
    return packages


def plan(packages: dict[str, dict], versions: dict[str, str], hold: list[str]) -> dict:
    """Which packages are ready (installed at the wanted version), missing, at another version, held, to hold."""
    ready = [n for n, p in packages.items() if p["installed"] and version_matches(p["version"], versions.get(n))]
    return {
        "ready": ready,
        "missing": [n for n, p in packages.items() if not p["installed"]],
        "wrong_version": [n for n, p in packages.items() if p["installed"] and n not in ready],
        "held": [n for n, p in packages.items() if p["selection"] == "hold"],
        "to_hold": [n for n in hold if packages[n]["installed"] and packages[n]["selection"] != "hold"],
        "hold_skipped": [n for n in hold if not packages[n]["installed"]],
    }


def selections_text(names: list[str], selection: str) -> str:
    return "".join(f"{n} {selection}\n" for n in names)
