"""k8sgpu.nvidia.dpkg_packages: main() against this machine's real dpkg database (read, and holds in check mode).

The holds themselves (dpkg --set-selections) are proven on the lab's Debian containers by the driver and
container_toolkit molecule scenarios, which check `dpkg --get-selections` after the roles ran.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._dpkg import (
    DpkgError,
    parse_status,
    plan,
    version_matches,
)
from ansible_collections.k8sgpu.nvidia.plugins.modules import dpkg_packages
from module_harness import AnsibleExitJson, AnsibleFailJson

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian or Ubuntu machine")
ABSENT = "k8sgpu-no-such-package"


def installed(name: str) -> tuple[str, str]:
    """(version, selection) of a package of this machine, as dpkg itself reports them."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}|${db:Status-Want}", name],
                         capture_output=True, text=True, check=True).stdout
    version, selection = out.split("|")
    return version, selection


def run(args: dict, check_mode: bool = False, diff: bool = False) -> tuple[bool, dict]:
    with patch_module_args({**args, "_ansible_check_mode": check_mode, "_ansible_diff": diff}):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as result:
            dpkg_packages.main()
    return isinstance(result.value, AnsibleFailJson), result.value.args[0]


def test_reads_installed_absent_and_versions(module_io):
    dpkg_version = installed("dpkg")[0]
    upstream = dpkg_version.split("-")[0]
    failed, res = run({"names": ["dpkg", "coreutils", ABSENT], "versions": {"dpkg": upstream, "coreutils": "0.1"}})
    assert not failed and not res["changed"], res
    assert res["packages"]["dpkg"] == {"installed": True, "version": dpkg_version, "status": "installed",
                                       "selection": installed("dpkg")[1]}
    assert res["packages"][ABSENT] == {"installed": False, "version": None, "status": "unknown", "selection": "unknown"}
    assert res["ready"] == ["dpkg"]
    assert res["missing"] == [ABSENT]
    assert res["wrong_version"] == ["coreutils"]
    assert res["newly_held"] == [] and res["hold_skipped"] == []


def test_check_mode_reports_the_hold_without_holding(module_io):
    before = installed("coreutils")[1]
    if before == "hold":
        pytest.skip("coreutils is held on this machine")
    failed, res = run({"names": ["coreutils"], "hold": ["coreutils", ABSENT]}, check_mode=True, diff=True)
    assert not failed and res["changed"], res
    assert res["newly_held"] == ["coreutils"] and res["held"] == ["coreutils"]
    assert res["hold_skipped"] == [ABSENT]  # not installed: never held
    assert res["diff"]["before"] == f"coreutils {before}\n" and res["diff"]["after"] == "coreutils hold\n"
    assert installed("coreutils")[1] == before  # nothing written


def test_bad_names_fail(module_io):
    failed, res = run({"names": ["nvidia-driver:amd64", "two words"]})
    assert failed and res["msg"] == "not package names: 'nvidia-driver:amd64', 'two words' (no spaces, '|' or architecture)"


@pytest.mark.parametrize("installed_version,wanted,ok", [
    ("1.20.1-1", "1.20.1", True),
    ("1.20.10-1", "1.20.1", False),       # a plain prefix is not enough
    ("1.20.1~rc.1-1", "1.20.1", False),   # a pre-release of it neither
    ("1.20.1-1", "1.20.1-1", True),
    ("1.20.1-1", "1.20.1-2", False),
    ("535.261.03-1~deb12u1", "535", True),
    ("535.261.03-1~deb12u1", "535.261.03", True),
    ("535.261.03-1~deb12u1", "535.26", False),
    ("1:2.3-1", "2.3", True),             # epoch ignored unless asked for
    ("1:2.3-1", "2:2.3", False),
    (None, "1.0", False),
    (None, "", False),
    ("1.0-1", "", True),
])
def test_version_matches(installed_version, wanted, ok):
    assert version_matches(installed_version, wanted) is ok


def test_parse_multiarch_and_removed():
    out = ("libfoo|1.0-1|config-files|deinstall\n"
           "libbar|2.0-1|installed|install\nlibbar|2.0-1|not-installed|unknown\n")
    pkgs = parse_status(out, ["libfoo", "libbar"])
    assert pkgs["libfoo"] == {"installed": False, "version": None, "status": "config-files", "selection": "deinstall"}
    assert pkgs["libbar"]["installed"] and pkgs["libbar"]["version"] == "2.0-1"
    p = plan(pkgs, {}, ["libfoo", "libbar"])
    assert p["missing"] == ["libfoo"] and p["to_hold"] == ["libbar"] and p["hold_skipped"] == ["libfoo"]
    with pytest.raises(DpkgError, match="unexpected dpkg-query line"):
        parse_status("garbage\n", ["x"])


# --- What an interrupted dpkg run left (issue 36) -----------------------------------------------------------------
def test_parse_unfinished_keeps_only_unfinished_states():
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils._dpkg import parse_unfinished
    out = ("dpkg|1.21.23|installed\nlibc6:amd64|2.36-9|installed\ndkms|3.0.10-8|unpacked\n"
           "gcc-12|12.2.0-14|half-configured\nfoo|1.0|config-files\nbar||not-installed\nccache|4.8|triggers-pending\n"
           "libnvidia-tesla-470-glcore:amd64|470.256.02-1|half-installed\n")
    assert parse_unfinished(out) == {
        "dkms": {"version": "3.0.10-8", "status": "unpacked"},
        "gcc-12": {"version": "12.2.0-14", "status": "half-configured"},
        "ccache": {"version": "4.8", "status": "triggers-pending"},
        "libnvidia-tesla-470-glcore": {"version": "470.256.02-1", "status": "half-installed"}}
    with pytest.raises(DpkgError, match="unexpected dpkg-query line"):
        parse_unfinished("dkms|unpacked\n")


def test_journal_entries_are_apts_interrupted_check():
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils._dpkg import journal_entries
    assert journal_entries(["0001", "0000", "tmp.i"]) == ["0000", "0001"]
    assert journal_entries(["tmp.i"]) == []


def test_repair_plan_removes_only_unfinished_names_and_configures_what_is_left():
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils._dpkg import repair_plan
    unfinished = {"a": {"version": "1", "status": "unpacked"}, "b": {"version": "1", "status": "unpacked"}}
    assert repair_plan(unfinished, False, ["a", "installed-one"], True) == {
        "remove": ["a"], "configure": True, "configure_names": ["b"]}
    # Nothing left but the journal: dpkg --configure -a still finishes the interrupted run.
    assert repair_plan({"a": unfinished["a"]}, True, ["a"], True)["configure"]
    assert not repair_plan({"a": unfinished["a"]}, False, ["a"], True)["configure"]
    assert not repair_plan(unfinished, True, [], False)["configure"]


def test_audit_of_this_machine_reads_and_changes_nothing(module_io):
    failed, res = run({"names": ["dpkg"], "audit": True})
    assert not failed and not res["changed"], res
    assert isinstance(res["unfinished"], dict) and isinstance(res["interrupted"], bool)
    assert res["removed"] == [] and res["configured"] == []
    assert res["ready"] == ["dpkg"]


def test_remove_names_an_installed_package_only_when_unfinished(module_io):
    # dpkg is installed (finished): asking to remove it unfinished does nothing, in check mode or not.
    failed, res = run({"names": [], "remove_unfinished": ["dpkg"]}, check_mode=True, diff=True)
    assert not failed and res["removed"] == [] and not res["changed"], res
    assert "diff" not in res


def test_bad_names_in_remove_unfinished_are_refused(module_io):
    failed, res = run({"names": [], "remove_unfinished": ["nvidia driver"]})
    assert failed and "not package names: 'nvidia driver'" in res["msg"]
