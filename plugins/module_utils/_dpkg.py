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


# --- What an interrupted dpkg run left -------------------------------------------------------------------------
# dpkg's states of a package it began but did not finish installing or configuring (dpkg(1), "PACKAGE STATES").
# half-installed also means "reinstall required": dpkg refuses to remove it without --force-remove-reinstreq.
UNFINISHED_STATES = ("half-installed", "unpacked", "half-configured", "triggers-awaited", "triggers-pending")
AUDIT_FORMAT = "${Package}|${Version}|${db:Status-Status}\n"
# dpkg's journal: files named by a number while a run is in progress; apt refuses to run while any is left
# ("E: dpkg was interrupted, you must manually run 'dpkg --configure -a'").
UPDATES_DIR = "/var/lib/dpkg/updates"


def audit_args(dpkg_query: str) -> list[str]:
    return [dpkg_query, "-W", f"-f={AUDIT_FORMAT}"]


def parse_unfinished(stdout: str) -> dict[str, dict]:
    """Every package of a ``dpkg-query -W -f=AUDIT_FORMAT`` listing in an unfinished state: name -> version, status."""
    unfinished: dict[str, dict] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 3:
            raise DpkgError(f"unexpected dpkg-query line {line!r} (wanted package|version|status)")
        name, version, status = fields
        if status in UNFINISHED_STATES:
            unfinished[name.split(":", 1)[0]] = {"version": version or None, "status": status}
    return unfinished


def journal_entries(names: list[str]) -> list[str]:
    """The entries of dpkg's updates directory that mean an interrupted run (all-digit names, as apt checks)."""
    return sorted(n for n in names if n.isdigit())


def repair_plan(unfinished: dict[str, dict], interrupted: bool, remove: list[str], configure: bool) -> dict:
    """What to do about an interrupted dpkg run: which of ``remove`` to remove (only unfinished ones), and whether
    to finish the rest with ``dpkg --configure -a`` (only when asked and something is left to finish)."""
    to_remove = [n for n in dict.fromkeys(remove) if n in unfinished]
    left = [n for n in unfinished if n not in to_remove]
    return {"remove": to_remove, "configure": bool(configure and (left or interrupted)),
            "configure_names": left if configure else []}
