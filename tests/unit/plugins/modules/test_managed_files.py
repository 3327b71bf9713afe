"""k8sgpu.nvidia.managed_files: main() on this machine's real filesystem (a pytest tmp_path).

The roles' use of it (apt sources, proxy settings, the keyring) is proven on the lab's Debian containers by
tests/lab/test_site.py and the driver and container_toolkit molecule scenarios (first run writes, second run
changes nothing).
"""
from __future__ import annotations

import os
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.modules import managed_files
from module_harness import AnsibleExitJson, AnsibleFailJson


def run(files: list, check_mode: bool = False, diff: bool = True) -> tuple[bool, dict]:
    with patch_module_args({"files": files, "_ansible_check_mode": check_mode, "_ansible_diff": diff}):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as result:
            managed_files.main()
    return isinstance(result.value, AnsibleFailJson), result.value.args[0]


def mode_of(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def entries(tmp_path) -> list:
    return [
        {"path": str(tmp_path / "keyrings"), "state": "directory", "mode": "0755"},
        {"path": str(tmp_path / "keyrings" / "key.asc"), "content": "KEY\n", "mode": "0644"},
        {"path": str(tmp_path / "proxy.conf"), "state": "absent"},
    ]


def test_writes_then_changes_nothing(module_io, tmp_path):
    (tmp_path / "proxy.conf").write_text("Acquire::http::Proxy \"http://old\";\n")
    failed, res = run(entries(tmp_path))
    assert not failed and res["changed"], res
    key = tmp_path / "keyrings" / "key.asc"
    assert key.read_text() == "KEY\n" and mode_of(key) == 0o644
    assert mode_of(tmp_path / "keyrings") == 0o755
    assert not (tmp_path / "proxy.conf").exists()
    assert res["changed_paths"] == [str(tmp_path / "keyrings"), str(key), str(tmp_path / "proxy.conf")]
    assert [r["created"] for r in res["files"]] == [True, True, False]
    # The removed file's diff is its state, never its text.
    assert res["diff"][2] == {"before_header": str(tmp_path / "proxy.conf"), "after_header": str(tmp_path / "proxy.conf"),
                              "before": {"path": str(tmp_path / "proxy.conf"), "state": "file"},
                              "after": {"path": str(tmp_path / "proxy.conf"), "state": "absent"}}
    assert not [p for p in os.listdir(tmp_path / "keyrings") if p.startswith(".k8sgpu-")]  # no temporary file left

    mtime = key.stat().st_mtime_ns
    failed, res = run(entries(tmp_path))
    assert not failed and not res["changed"] and res["changed_paths"] == [] and res["diff"] == [], res
    assert key.stat().st_mtime_ns == mtime  # not written again


def test_check_mode_reports_and_writes_nothing(module_io, tmp_path):
    key = tmp_path / "keyrings" / "key.asc"
    failed, res = run(entries(tmp_path), check_mode=True)
    assert not failed and res["changed_paths"] == [str(tmp_path / "keyrings"), str(key)], res
    assert res["diff"][1]["before"] == "" and res["diff"][1]["after"] == "KEY\n"
    assert not (tmp_path / "keyrings").exists()


def test_text_and_mode_changes_show_in_the_diff(module_io, tmp_path):
    run(entries(tmp_path))
    key = tmp_path / "keyrings" / "key.asc"
    key.write_text("OLD\n")
    os.chmod(key, 0o600)
    failed, res = run(entries(tmp_path))
    assert not failed and res["changed_paths"] == [str(key)], res
    assert res["diff"][0]["before"] == "OLD\n" and res["diff"][0]["after"] == "KEY\n"
    assert res["diff"][1]["before"]["mode"] == "0600" and res["diff"][1]["after"]["mode"] == "0644"
    assert key.read_text() == "KEY\n" and mode_of(key) == 0o644


def test_mode_alone_is_a_change(module_io, tmp_path):
    run(entries(tmp_path))
    os.chmod(tmp_path / "keyrings", 0o700)
    failed, res = run(entries(tmp_path), check_mode=True)
    assert not failed and res["changed_paths"] == [str(tmp_path / "keyrings")], res
    assert mode_of(tmp_path / "keyrings") == 0o700  # check mode
    failed, res = run(entries(tmp_path))
    assert not failed and res["changed_paths"] == [str(tmp_path / "keyrings")], res
    assert mode_of(tmp_path / "keyrings") == 0o755


@pytest.mark.parametrize("make,state,message", [
    (lambda p: p.mkdir(), "file", "is a directory, not a regular file; move it away or fix the path"),
    (lambda p: p.mkdir(), "absent", "is a directory, not a regular file to remove"),
    (lambda p: p.write_text("x"), "directory", "is a regular file, not a directory"),
    (lambda p: p.symlink_to("/etc/hostname"), "file", "is a symbolic link, not a regular file"),
])
def test_refuses_what_is_not_its_kind(module_io, tmp_path, make, state, message):
    target = tmp_path / "thing"
    make(target)
    entry = {"path": str(target), "state": state, "content": "x", "mode": "0644"}
    failed, res = run([entry])
    assert failed and res["msg"].startswith(f"{target}: {message}"), res


def test_missing_directory_names_the_fix(module_io, tmp_path):
    path = tmp_path / "no" / "file"
    failed, res = run([{"path": str(path), "content": "x", "mode": "0644"}])
    assert failed and res["msg"] == (f"{path}: its directory {tmp_path / 'no'} does not exist; list it before as a "
                                     "state=directory entry"), res


def test_inputs_are_checked(module_io, tmp_path):
    failed, res = run([{"path": "relative/file", "content": "x", "mode": "0644"}])
    assert failed and "relative/file is not an absolute path" in res["msg"]
    path = str(tmp_path / "f")
    failed, res = run([{"path": path, "content": "x", "mode": "0644"}, {"path": path + "/", "state": "absent"}])
    assert failed and res["msg"] == f"files: {path} is listed twice"
    failed, res = run([{"path": path, "content": "x"}])
    assert failed and "mode" in res["msg"]


def test_check_mode_takes_a_missing_directory_as_one_still_to_come(module_io, tmp_path):
    """An earlier task (a package that ships the directory) did not run for real: a change, not an error."""
    path = tmp_path / "modprobe.d" / "blacklist.conf"
    failed, res = run([{"path": str(path), "content": "x\n", "mode": "0644"}], check_mode=True)
    assert not failed and res["changed_paths"] == [str(path)] and res["files"][0]["created"], res
    assert not path.parent.exists()
