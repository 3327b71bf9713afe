"""k8sgpu.nvidia.docker_daemon_config: main() on real files in tmp_path, and the merge planning of _daemon_json."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._daemon_json import (
    DaemonJsonError,
    dump_config,
    merge_settings,
    parse_config,
    plan_config,
)
from ansible_collections.k8sgpu.nvidia.plugins.modules import docker_daemon_config
from module_harness import AnsibleExitJson, AnsibleFailJson

NVIDIA = {"path": "nvidia-container-runtime", "runtimeArgs": []}
RUNC_CUSTOM = {"path": "/usr/local/bin/runc-custom", "runtimeArgs": ["--debug"]}
EXISTING = {
    "log-driver": "json-file",
    "log-opts": {"max-file": "5", "mode": "non-blocking"},
    "insecure-registries": ["registry.lab:5000"],
    "data-root": "/srv/docker",
    "runtimes": {"runc-custom": RUNC_CUSTOM},
}
# As an operator would have written it: not the module's own format.
EXISTING_TEXT = (
    '{\n    "log-driver": "json-file",\n    "log-opts": {"max-file": "5", "mode": "non-blocking"},\n'
    '    "insecure-registries": ["registry.lab:5000"],\n    "data-root": "/srv/docker",\n'
    '    "runtimes": {"runc-custom": {"path": "/usr/local/bin/runc-custom", "runtimeArgs": ["--debug"]}}\n}\n'
)
ADD_NVIDIA = {"runtimes": {"nvidia": NVIDIA}, "default_runtime": "nvidia"}


def run_main(args: dict) -> dict:
    """Run the module's main(); return its result, with failed=True when it failed."""
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as raised:
            docker_daemon_config.main()
    result = raised.value.args[0]
    if isinstance(raised.value, AnsibleFailJson):
        result["failed"] = True
    return result


@pytest.fixture(autouse=True)
def backup_dir(tmp_path, monkeypatch) -> Path:
    """The module's default backup directory, moved under tmp_path (never /var/backups of the test machine)."""
    path = tmp_path / "var/backups/k8sgpu.nvidia"
    monkeypatch.setattr(docker_daemon_config, "DEFAULT_BACKUP_DIR", str(path))
    return path


@pytest.fixture
def daemon_json(tmp_path) -> Path:
    path = tmp_path / "etc/docker/daemon.json"
    path.parent.mkdir(parents=True)
    path.write_text(EXISTING_TEXT)
    return path


def snapshot(path: Path) -> tuple:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ino, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


def others(path: Path) -> list[str]:
    """Files beside path: backups, or temporary files left behind."""
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


class TestMain:
    def test_merge_keeps_other_keys(self, module_io, daemon_json):
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        assert "failed" not in result and result["changed"] is True
        written = json.loads(daemon_json.read_text())
        assert written == {**EXISTING, "runtimes": {"runc-custom": RUNC_CUSTOM, "nvidia": NVIDIA}, "default-runtime": "nvidia"}
        # Existing keys keep their order, new ones come last.
        assert list(written) == ["log-driver", "log-opts", "insecure-registries", "data-root", "runtimes", "default-runtime"]
        assert list(written["runtimes"]) == ["runc-custom", "nvidia"]
        assert daemon_json.read_text() == json.dumps(written, indent=2) + "\n"
        assert result["config"] == written
        assert result["previous"] == EXISTING
        assert result["path"] == str(daemon_json)
        assert (result["runtimes_added"], result["runtimes_updated"], result["runtimes_removed"]) == (["nvidia"], [], [])

    def test_second_run_changes_nothing(self, module_io, daemon_json):
        assert run_main({"path": str(daemon_json), **ADD_NVIDIA})["changed"] is True
        os.utime(daemon_json, ns=(1_000_000_000, 1_000_000_000))
        before = snapshot(daemon_json)
        files = others(daemon_json)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "_ansible_diff": True})
        assert result["changed"] is False
        assert "diff" not in result and "backup_file" not in result
        assert result["runtimes_added"] == result["runtimes_updated"] == []
        assert snapshot(daemon_json) == before
        assert others(daemon_json) == files

    def test_unchanged_content_in_another_format_is_not_rewritten(self, module_io, daemon_json):
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), "runtimes": {"runc-custom": RUNC_CUSTOM}, "settings": {"data-root": "/srv/docker"}})
        assert result["changed"] is False
        assert snapshot(daemon_json) == before

    def test_check_mode_writes_nothing(self, module_io, daemon_json):
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "_ansible_check_mode": True, "_ansible_diff": True})
        assert result["changed"] is True
        assert result["runtimes_added"] == ["nvidia"]
        assert result["config"]["default-runtime"] == "nvidia"
        diff = result["diff"]
        assert diff["before"] == EXISTING_TEXT
        assert json.loads(diff["after"]) == result["config"]
        assert diff["before_header"] == diff["after_header"] == str(daemon_json)
        assert "backup_file" not in result
        assert snapshot(daemon_json) == before
        assert others(daemon_json) == []

    def test_check_mode_does_not_create(self, module_io, tmp_path):
        path = tmp_path / "missing/docker/daemon.json"
        result = run_main({"path": str(path), **ADD_NVIDIA, "_ansible_check_mode": True, "_ansible_diff": True})
        assert result["changed"] is True and result["diff"]["before"] == ""
        assert result["created"] is True
        assert not (tmp_path / "missing").exists()

    @pytest.mark.parametrize("text,where", [
        ('{\n  "log-driver": "json-file",\n  "data-root": "/srv/docker",\n}\n', "line 4 column 1"),
        ('{\n  "log-driver": "json-file"\n  "data-root": "/srv/docker"\n}\n', "line 3 column 3"),
        ('{"log-driver": json-file}', "line 1 column 16"),
    ])
    def test_invalid_json_fails_and_is_left_untouched(self, module_io, daemon_json, text, where):
        daemon_json.write_text(text)
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        assert result.get("failed") is True
        assert str(daemon_json) in result["msg"]
        assert where in result["msg"]
        assert "fix or remove it; it was left untouched" in result["msg"]
        assert snapshot(daemon_json) == before
        assert others(daemon_json) == []

    @pytest.mark.parametrize("text,kind", [('["nvidia"]\n', "array"), ('"nvidia"', "string"), ("null", "null"), ("42", "number")])
    def test_json_that_is_not_an_object_fails(self, module_io, daemon_json, text, kind):
        daemon_json.write_text(text)
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        assert result.get("failed") is True
        assert f"{daemon_json} holds a JSON {kind}, not an object" in result["msg"]
        assert snapshot(daemon_json) == before

    def test_symlink_stays_a_link_and_its_target_changes(self, module_io, tmp_path):
        target = tmp_path / "shared/config/daemon.json"
        target.parent.mkdir(parents=True)
        target.write_text(EXISTING_TEXT)
        link = tmp_path / "etc/docker/daemon.json"
        link.parent.mkdir(parents=True)
        link.symlink_to(os.path.relpath(target, link.parent))
        link_target = os.readlink(link)
        result = run_main({"path": str(link), **ADD_NVIDIA})
        assert result["changed"] is True
        assert link.is_symlink() and os.readlink(link) == link_target
        assert result["path"] == str(target) and result["created"] is False
        assert json.loads(target.read_text())["default-runtime"] == "nvidia"
        assert others(link) == []
        assert others(target) == []
        assert Path(result["backup_file"]).read_text() == EXISTING_TEXT

    def test_mode_and_owner_are_kept(self, module_io, daemon_json):
        daemon_json.chmod(0o600)
        owner = (os.getuid(), os.getgid())
        if os.geteuid() == 0:
            os.chown(daemon_json, 1000, 1000)
            owner = (1000, 1000)
        ino = daemon_json.stat().st_ino
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        assert result["changed"] is True
        st = daemon_json.stat()
        assert st.st_ino != ino  # replaced by rename, not rewritten in place
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert (st.st_uid, st.st_gid) == owner

    def test_backup_has_previous_content_and_is_not_beside_the_file(self, module_io, daemon_json, backup_dir):
        daemon_json.chmod(0o640)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        backup = Path(result["backup_file"])
        # backup_dir mirrors the file's path.
        assert backup.parent == Path(f"{backup_dir}{daemon_json.parent}") and backup.name.startswith("daemon.json.")
        assert backup.read_text() == EXISTING_TEXT
        assert stat.S_IMODE(backup.stat().st_mode) == 0o640
        assert stat.S_IMODE(backup_dir.stat().st_mode) == 0o700
        assert others(daemon_json) == []

    def test_backup_dir_option_and_one_inside_the_files_directory_is_refused(self, module_io, daemon_json, tmp_path):
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "backup_dir": str(tmp_path / "site-backups")})
        assert result["backup_file"].startswith(f"{tmp_path}/site-backups{daemon_json.parent}/daemon.json.")
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), "settings": {"debug": True},
                           "backup_dir": str(daemon_json.parent / "backups")})
        assert result.get("failed") is True and f"is inside {daemon_json.parent}" in result["msg"]
        assert snapshot(daemon_json) == before

    def test_no_backup(self, module_io, daemon_json):
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "backup": False})
        assert result["changed"] is True and "backup_file" not in result
        assert others(daemon_json) == []

    def test_absent_removes_runtime_and_default(self, module_io, daemon_json):
        run_main({"path": str(daemon_json), **ADD_NVIDIA})
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "state": "absent"})
        assert result["changed"] is True
        assert result["runtimes_removed"] == ["nvidia"]
        assert json.loads(daemon_json.read_text()) == EXISTING
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "state": "absent"})
        assert result["changed"] is False and result["runtimes_removed"] == []

    def test_absent_keeps_another_default_runtime(self, module_io, daemon_json):
        daemon_json.write_text(json.dumps({**EXISTING, "default-runtime": "runc-custom"}))
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA, "state": "absent"})
        assert result["changed"] is False
        assert result["config"]["default-runtime"] == "runc-custom"

    def test_settings_null_removes_and_dicts_merge(self, module_io, daemon_json):
        result = run_main({
            "path": str(daemon_json),
            "settings": {"data-root": None, "log-opts": {"max-size": "10m", "mode": None}, "live-restore": True, "absent-key": None},
        })
        assert result["changed"] is True
        written = json.loads(daemon_json.read_text())
        assert "data-root" not in written and "absent-key" not in written
        assert written["log-opts"] == {"max-file": "5", "max-size": "10m"}
        assert written["live-restore"] is True
        assert written["insecure-registries"] == ["registry.lab:5000"]
        assert written["runtimes"] == {"runc-custom": RUNC_CUSTOM}

    @pytest.mark.parametrize("content", [b"", b"  \n\t\n"])
    def test_empty_file_counts_as_empty_object(self, module_io, daemon_json, content):
        daemon_json.write_bytes(content)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        assert result["changed"] is True and result["previous"] == {}
        assert json.loads(daemon_json.read_text()) == {"runtimes": {"nvidia": NVIDIA}, "default-runtime": "nvidia"}
        assert Path(result["backup_file"]).read_bytes() == content

    def test_creates_missing_file_and_directories(self, module_io, tmp_path):
        old_umask = os.umask(0o077)
        try:
            path = tmp_path / "etc/docker/daemon.json"
            result = run_main({"path": str(path), **ADD_NVIDIA, "_ansible_diff": True})
        finally:
            os.umask(old_umask)
        assert result["changed"] is True and "backup_file" not in result and result["created"] is True
        assert result["diff"]["before"] == ""
        assert json.loads(path.read_text()) == {"runtimes": {"nvidia": NVIDIA}, "default-runtime": "nvidia"}
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
        assert stat.S_IMODE((tmp_path / "etc").stat().st_mode) == 0o755

    def test_missing_file_with_create_false(self, module_io, tmp_path):
        path = tmp_path / "daemon.json"
        result = run_main({"path": str(path), **ADD_NVIDIA, "create": False})
        assert result.get("failed") is True and "create=false" in result["msg"]
        assert not path.exists()
        # Nothing to remove from a missing file is not an error.
        result = run_main({"path": str(path), **ADD_NVIDIA, "create": False, "state": "absent"})
        assert result["changed"] is False and not path.exists()

    def test_unknown_default_runtime_fails(self, module_io, daemon_json):
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), "default_runtime": "nvidia"})
        assert result.get("failed") is True and "'nvidia'" in result["msg"]
        assert snapshot(daemon_json) == before

    def test_failed_write_leaves_file_and_no_leftovers(self, module_io, monkeypatch, daemon_json):
        def atomic_move(self, src, dest, unsafe_writes=False, keep_dest_attrs=True):
            raise Exception(f"Could not replace {dest!r} with {src!r}.") from OSError(30, "Read-only file system")

        monkeypatch.setattr(basic.AnsibleModule, "atomic_move", atomic_move)
        before = snapshot(daemon_json)
        result = run_main({"path": str(daemon_json), **ADD_NVIDIA})
        assert result.get("failed") is True
        assert result["msg"].startswith(f"Could not write {daemon_json}: ") and "Read-only file system" in result["msg"]
        assert snapshot(daemon_json) == before
        assert others(daemon_json) == []

    def test_directory_path_fails(self, module_io, tmp_path):
        result = run_main({"path": str(tmp_path), **ADD_NVIDIA})
        assert result.get("failed") is True and "is a directory" in result["msg"]


class TestPlan:
    def test_update_replaces_the_runtime_entry(self):
        current = {"runtimes": {"nvidia": {"path": "/old/nvidia-container-runtime", "runtimeArgs": ["--x"]}}}
        plan = plan_config(current, runtimes={"nvidia": NVIDIA})
        assert plan.changed and plan.runtimes_updated == ["nvidia"]
        assert plan.config == {"runtimes": {"nvidia": NVIDIA}}
        assert current["runtimes"]["nvidia"]["path"] == "/old/nvidia-container-runtime"

    def test_same_runtime_in_another_key_order_is_unchanged(self):
        current = {"runtimes": {"nvidia": {"runtimeArgs": [], "path": "nvidia-container-runtime"}}}
        assert not plan_config(current, runtimes={"nvidia": NVIDIA}).changed

    @pytest.mark.parametrize("default", ["runc", "io.containerd.runc.v2", "io.containerd.runsc.v1", "runc-custom"])
    def test_acceptable_default_runtimes(self, default):
        plan = plan_config({"runtimes": {"runc-custom": RUNC_CUSTOM}}, default_runtime=default)
        assert plan.config["default-runtime"] == default

    @pytest.mark.parametrize("default", ["nvidia", "/usr/bin/nvidia-container-runtime", ".hidden.v1"])
    def test_unacceptable_default_runtimes(self, default):
        with pytest.raises(DaemonJsonError, match="would not start"):
            plan_config({}, default_runtime=default)

    def test_empty_default_runtime_leaves_it(self):
        current = {"default-runtime": "runc"}
        assert plan_config(current, default_runtime="").config == current
        assert plan_config(current, default_runtime="", state="absent").config == current

    def test_absent_removes_default_naming_a_removed_runtime(self):
        current = {"runtimes": {"nvidia": NVIDIA, "runc-custom": RUNC_CUSTOM}, "default-runtime": "nvidia"}
        plan = plan_config(current, runtimes={"nvidia": {}}, state="absent")
        assert plan.config == {"runtimes": {"runc-custom": RUNC_CUSTOM}}

    def test_absent_removes_emptied_runtimes_key(self):
        plan = plan_config({"runtimes": {"nvidia": NVIDIA}, "debug": True}, runtimes={"nvidia": None}, state="absent")
        assert plan.config == {"debug": True} and plan.runtimes_removed == ["nvidia"]

    def test_runtime_must_be_a_dict(self):
        with pytest.raises(DaemonJsonError, match="runtimes.nvidia must be a dict"):
            plan_config({}, runtimes={"nvidia": "nvidia-container-runtime"})

    def test_runtimes_key_that_is_not_an_object(self):
        with pytest.raises(DaemonJsonError, match="'runtimes' key holds a JSON array"):
            plan_config({"runtimes": []}, runtimes={"nvidia": NVIDIA})

    @pytest.mark.parametrize("settings,options", [
        ({"runtimes": {}}, {"runtimes": {"nvidia": NVIDIA}}),
        ({"default-runtime": "runc"}, {"default_runtime": "nvidia"}),
    ])
    def test_settings_may_not_compete_with_options(self, settings, options):
        with pytest.raises(DaemonJsonError, match="not in settings as well"):
            plan_config({}, settings=settings, **options)

    def test_merge_settings(self):
        base = {"a": 1, "log-opts": {"max-file": "5", "labels": "x"}, "list": [1, 2], "s": "str"}
        merged = merge_settings(base, {
            "log-opts": {"max-size": "10m", "labels": None}, "list": [3], "s": {"k": "v"}, "new": {"only": None}, "empty": {},
        })
        assert merged == {"a": 1, "log-opts": {"max-file": "5", "max-size": "10m"}, "list": [3], "s": {"k": "v"}, "empty": {}}
        assert base["log-opts"] == {"max-file": "5", "labels": "x"}


class TestParse:
    def test_bom_and_unicode(self):
        config = parse_config('\ufeff{"labels": ["site=Zürich"]}'.encode(), "/x")
        assert config == {"labels": ["site=Zürich"]}
        assert dump_config(config) == '{\n  "labels": [\n    "site=Zürich"\n  ]\n}\n'

    def test_not_utf8(self):
        with pytest.raises(DaemonJsonError, match="/x is not UTF-8"):
            parse_config(b'{"a": "\xff"}', "/x")


def fake_systemctl(tmp_path: Path, monkeypatch, started_ago: float) -> None:
    """A systemctl on PATH whose `show` says the unit's daemon started ``started_ago`` seconds ago (monotonic)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(
        "#!/usr/bin/env python3\nimport time\n"
        "print('LoadState=loaded'); print('ActiveState=active'); print('MainPID=4242')\n"
        f"print('ExecMainStartTimestampMonotonic=%d' % int((time.monotonic() - {started_ago}) * 1e6))\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_unit_says_whether_dockerd_runs_the_file_as_it_is(module_io, tmp_path, monkeypatch):
    """A run stopped between the write and the restart: the file is right (no change), dockerd predates it."""
    path = tmp_path / "daemon.json"
    path.write_text(dump_config({"runtimes": {"nvidia": NVIDIA}, "default-runtime": "nvidia"}))
    fake_systemctl(tmp_path, monkeypatch, started_ago=100)
    result = run_main({"path": str(path), "unit": "docker.service", **ADD_NVIDIA})
    assert result["changed"] is False
    assert result["loaded"]["stale"] is True and result["loaded"]["newer"] == [str(path)]
    assert result["loaded"]["state"] == "active" and result["loaded"]["unit"] == "docker.service"
    # The file older than the daemon: loaded.
    os.utime(path, (os.stat(path).st_atime, os.stat(path).st_mtime - 200))
    assert run_main({"path": str(path), "unit": "docker.service", **ADD_NVIDIA})["loaded"]["stale"] is False
    # Without unit, nothing is read.
    assert "loaded" not in run_main({"path": str(path), **ADD_NVIDIA})
