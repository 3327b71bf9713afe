"""_atomic_file: backups outside the runtime's directories, and the old backups earlier versions left there
(issue 10, defect 3). What CRI-O then loads is tested with CRI-O's own code in
tests/lab/test_container_runtime_config.py."""
from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._atomic_file import (
    ConfigFileError,
    check_backup_dir,
    legacy_backups,
    make_backup,
    move_legacy_backups,
)

OLD = "99-nvidia.toml.4242.2026-05-04@10:21:07~"


@pytest.fixture
def drop_in(tmp_path):
    path = tmp_path / "etc/crio/crio.conf.d/99-nvidia.toml"
    path.parent.mkdir(parents=True)
    path.write_text("[crio.runtime]\ndefault_runtime = \"nvidia\"\n")
    return path


def test_backup_mirrors_the_path_and_keeps_the_file(drop_in, tmp_path):
    drop_in.chmod(0o600)
    os.utime(drop_in, ns=(1_000_000_000, 1_000_000_000))
    backups = tmp_path / "var/backups/k8sgpu.nvidia"
    backup = make_backup(str(drop_in), str(backups))
    assert backup.startswith(f"{backups}{drop_in}.")
    assert open(backup).read() == drop_in.read_text()
    st = os.stat(backup)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_mtime_ns == 1_000_000_000
    assert stat.S_IMODE(backups.stat().st_mode) == 0o700
    assert sorted(os.listdir(drop_in.parent)) == ["99-nvidia.toml"]
    # A second backup in the same run of the clock gets a name of its own.
    assert make_backup(str(drop_in), str(backups)) != backup


@pytest.mark.parametrize("inside", ["", "backups", "sub/dir"])
def test_backup_dir_inside_the_files_directory_is_refused(drop_in, inside):
    with pytest.raises(ConfigFileError, match=f"inside {drop_in.parent}, where the runtime would read"):
        check_backup_dir(str(drop_in), str(drop_in.parent / inside))


def test_relative_backup_dir_is_refused(drop_in):
    with pytest.raises(ConfigFileError, match="not an absolute path"):
        check_backup_dir(str(drop_in), "backups")


def test_legacy_backups_are_only_ours(drop_in):
    d = drop_in.parent
    for name in (OLD, "99-nvidia.toml.1.2026-05-05@08:00:00~", "99-nvidia.toml~", "10-site.toml.4242.2026-05-04@10:21:07~",
                 "99-nvidia.toml.bak", "99-nvidia.toml.x.2026-05-04@10:21:07~"):
        (d / name).write_text("old\n")
    os.utime(d / OLD, ns=(1_000_000_000, 1_000_000_000))
    assert [os.path.basename(p) for p in legacy_backups(str(drop_in))] == [OLD, "99-nvidia.toml.1.2026-05-05@08:00:00~"]


def test_legacy_backups_move_out_check_mode_moves_nothing(drop_in, tmp_path):
    (drop_in.parent / OLD).write_text("old settings\n")
    backups = tmp_path / "backups"
    planned = move_legacy_backups(str(drop_in), str(backups), check_mode=True)
    dest = f"{backups}{drop_in.parent}/{OLD}"
    assert planned == [{"src": str(drop_in.parent / OLD), "dest": dest}]
    assert (drop_in.parent / OLD).exists() and not backups.exists()
    assert move_legacy_backups(str(drop_in), str(backups)) == planned
    assert sorted(os.listdir(drop_in.parent)) == ["99-nvidia.toml"]
    assert open(dest).read() == "old settings\n"
    assert move_legacy_backups(str(drop_in), str(backups)) == []


def test_missing_directory_has_no_legacy_backups(tmp_path):
    assert legacy_backups(str(tmp_path / "no/such/99-nvidia.toml")) == []
