"""Per-uid private directories and files in shared places (/tmp, /dev/shm, the Ray session dir).

Every directory raydbg creates where other users can write is `<base>/raydbg-<uid>`,
mode 0700, owned by us: we refuse one that is a symlink, owned by someone else or
open to others (another user could have made it first to read or plant our files).
Files inside are opened without following symlinks.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafeDirError(RuntimeError, OSError):
    """A shared directory raydbg would write to is not private to this user.

    Also an OSError: code that already treats a failed write as "not written" (an
    exporter, the start gate) refuses an unsafe directory the same way."""


def check_private(path: Path) -> Path:
    """Raise UnsafeDirError unless `path` is a real directory, ours, closed to others."""
    st = os.lstat(path)
    uid = os.getuid()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirError(f"raydbg: {path} is not a plain directory (a symlink?); remove it and retry")
    if st.st_uid != uid:
        raise UnsafeDirError(f"raydbg: {path} belongs to uid {st.st_uid}, not {uid}; refusing to use it")
    if st.st_mode & 0o077:
        raise UnsafeDirError(
            f"raydbg: {path} has mode {stat.S_IMODE(st.st_mode):o}, open to other users; "
            "refusing to use it (chmod 700 it or remove it)"
        )
    return path


def private_dir(base: str | os.PathLike[str], *sub: str) -> Path:
    """`<base>/raydbg-<uid>[/sub...]`, created 0700 if missing, checked either way."""
    path = _made_private(Path(base) / f"raydbg-{os.getuid()}")
    for part in sub:
        path = _made_private(path / part)
    return path


def _made_private(path: Path) -> Path:
    """`path` created 0700 if missing, and checked either way."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    return check_private(path)


def home_dir(name: str) -> Path:
    """`~/.raydbg/<name>` (HOME read at call time: tests and sandboxes move it)."""
    return Path.home() / ".raydbg" / name


def private_home_dir(name: str) -> Path:
    """`~/.raydbg/<name>`, both levels created 0700 if missing and checked either way."""
    d = home_dir(name)
    _made_private(d.parent)
    return _made_private(d)


def address_file_name(address: str) -> str:
    """A host:port as a file name (what raydbg keeps per gateway or per cluster)."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", address.strip().lower())


def open_private(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """os.open that never follows a symlink planted at `path`; new files are 0600."""
    return os.open(path, flags | NOFOLLOW | CLOEXEC, mode)


def create_new(path: str | os.PathLike[str], mode: int = 0o600) -> int:
    """A new file for writing, failing if anything (a symlink too) is already there."""
    return open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
