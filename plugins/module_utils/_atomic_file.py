# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: read a configuration file, and replace it atomically with a backup.

Not a public API; modules of this collection only (docker_daemon_config, container_runtime_config).

Backups go to a directory of their own (DEFAULT_BACKUP_DIR), mirroring the file's path, never beside the file:
CRI-O loads every file of crio.conf.d in lexical order, so a backup there (Ansible's backup_local naming,
``<file>.<pid>.<date>@<time>~``, sorts after the file) would be loaded after it and its old settings would win.
"""
from __future__ import annotations

import datetime
import os
import re
import shutil
import tempfile

NEW_FILE_MODE = 0o644
# A new file that holds a secret (a registry password, a proxy's credentials): readable by root only.
SECRET_FILE_MODE = 0o600
NEW_DIR_MODE = 0o755
BACKUP_DIR_MODE = 0o700
DEFAULT_BACKUP_DIR = "/var/backups/k8sgpu.nvidia"
# AnsibleModule.backup_local's names: <file>.<pid>.<YYYY-mm-dd@HH:MM:SS>~ (what earlier versions wrote).
_LEGACY_BACKUP = r"\.\d+\.\d{4}-\d{2}-\d{2}@\d{2}:\d{2}:\d{2}~"


class ConfigFileError(OSError):
    """Reading or writing failed; the message names the file. A file that was to be replaced is unchanged."""


def read_file(path: str) -> bytes | None:
    """Return the content of path; None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigFileError(f"{path} is a directory, not a file.") from None
    except OSError as exc:
        raise ConfigFileError(f"Could not read {path}: {exc.strerror}.") from None


def make_parents(directory: str, mode: int = NEW_DIR_MODE) -> None:
    """Create directory and its missing parents, each with the given mode (0755 by default) whatever the umask."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for created in reversed(missing):
        os.mkdir(created, mode)
        os.chmod(created, mode)


def backup_target(path: str, backup_dir: str) -> str:
    """Where the backup of (or an old backup found beside) the absolute path goes: backup_dir + path."""
    return os.path.join(backup_dir, path.lstrip("/"))


def check_backup_dir(path: str, backup_dir: str) -> None:
    """Refuse a backup directory that is (inside) the directory of path: a runtime reading that directory, as
    CRI-O reads crio.conf.d and every directory under it, would load the backups."""
    if not os.path.isabs(backup_dir):
        raise ConfigFileError(f"The backup directory {backup_dir!r} is not an absolute path.")
    directory = os.path.realpath(os.path.dirname(path))
    target = os.path.realpath(backup_dir)
    if target == directory or target.startswith(directory.rstrip("/") + "/"):
        raise ConfigFileError(
            f"The backup directory {backup_dir} is inside {directory}, where the runtime would read the backups of "
            f"{path}; choose a directory outside it."
        )


def make_backup(path: str, backup_dir: str) -> str:
    """Copy path to backup_dir/<path>.<local time to the microsecond>, keeping mode, times, owner and group.

    Directories created for it get mode 0700 (configuration may hold credentials). Returns the backup's path.
    """
    check_backup_dir(path, backup_dir)
    base = backup_target(path, backup_dir) + "." + datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S.%f")
    make_parents(os.path.dirname(base), BACKUP_DIR_MODE)
    target = base if not os.path.lexists(base) else f"{base}.{os.getpid()}"
    shutil.copy2(path, target)
    st = os.stat(path)
    if os.geteuid() == 0:
        os.chown(target, st.st_uid, st.st_gid)
    return target


def legacy_backups(path: str) -> list[str]:
    """Backups of path that earlier versions made beside it with AnsibleModule.backup_local, oldest first."""
    directory = os.path.dirname(path) or "."
    pattern = re.compile(re.escape(os.path.basename(path)) + _LEGACY_BACKUP + "$")
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise ConfigFileError(f"Could not read the directory {directory}: {exc.strerror}.") from None
    found = [os.path.join(directory, n) for n in names if pattern.match(n)]
    return sorted((p for p in found if os.path.isfile(p) and not os.path.islink(p)), key=os.path.getmtime)


def move_legacy_backups(path: str, backup_dir: str, check_mode: bool = False) -> list[dict]:
    """Move the legacy backups of path (legacy_backups) to backup_dir, keeping their names.

    Returns [{src, dest}] for each (in check mode: each that would be moved, and nothing moves).
    """
    moves = []
    for found in legacy_backups(path):
        check_backup_dir(path, backup_dir)
        dest = backup_target(found, backup_dir)
        moves.append({"src": found, "dest": dest})
        if check_mode:
            continue
        try:
            make_parents(os.path.dirname(dest), BACKUP_DIR_MODE)
            shutil.move(found, dest)
        except OSError as exc:
            raise ConfigFileError(f"Could not move the old backup {found} to {dest}: {exc.strerror or exc}.") from None
    return moves


def write_file(
    module, path: str, data: bytes, exists: bool, backup: bool, backup_dir: str = DEFAULT_BACKUP_DIR,
    new_mode: int | None = None,
) -> str | None:
    """Atomically replace (or create) path with data; return the backup's path, if one was made.

    The backup goes to backup_dir (make_backup), never beside the file. An existing file keeps its owner, group,
    mode and SELinux context (module.atomic_move copies them from it); a new one gets new_mode (0644 by default;
    callers give SECRET_FILE_MODE, 0600, for content holding a secret), set on the temporary file (mkstemp's 0600
    while the data is written) before the rename, so a secret is never readable by others; missing parent
    directories get 0755. Raises ConfigFileError when something fails; the file is then unchanged, and the backup
    made for it removed.
    """
    backup_file = None
    directory = os.path.dirname(path) or "."
    tmp = None
    moved = False
    try:
        if exists and backup:
            backup_file = make_backup(path, backup_dir)
        elif not exists:
            make_parents(directory)
        mode = NEW_FILE_MODE if new_mode is None else new_mode
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not exists:
            os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
        moved = True
        if not exists:
            os.chmod(path, mode)
    except Exception as exc:
        if isinstance(exc, ConfigFileError):
            raise
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.filename:
            detail = f"{detail}: {exc.filename}"
        elif exc.__cause__ is not None:
            detail = f"{detail} ({exc.__cause__})"
        raise ConfigFileError(f"Could not write {path}: {detail}.") from exc
    finally:
        for leftover in () if moved else (tmp, backup_file):
            if leftover is not None and os.path.lexists(leftover):
                os.unlink(leftover)
    return backup_file
