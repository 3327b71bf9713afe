# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: read a configuration file, and replace it atomically with a backup.

Not a public API; modules of this collection only (docker_daemon_config, container_runtime_config).
"""
from __future__ import annotations

import os
import tempfile

NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755


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


def make_parents(directory: str) -> None:
    """Create directory and its missing parents, each with mode 0755 whatever the umask."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for created in reversed(missing):
        os.mkdir(created)
        os.chmod(created, NEW_DIR_MODE)


def write_file(module, path: str, data: bytes, exists: bool, backup: bool) -> str | None:
    """Atomically replace (or create) path with data; return the backup's path, if one was made.

    An existing file keeps its owner, group, mode and SELinux context (module.atomic_move copies them from it);
    a new one gets mode 0644, and missing parent directories mode 0755. Raises ConfigFileError when something
    fails; the file is then unchanged, and the backup made for it removed.
    """
    backup_file = None
    directory = os.path.dirname(path) or "."
    tmp = None
    moved = False
    try:
        if exists and backup:
            backup_file = module.backup_local(path) or None
        elif not exists:
            make_parents(directory)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not exists:
            os.chmod(tmp, NEW_FILE_MODE)
        module.atomic_move(tmp, path)
        moved = True
        if not exists:
            os.chmod(path, NEW_FILE_MODE)
    except Exception as exc:
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
