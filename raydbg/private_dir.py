"""Per-uid private directories and files in shared places (/tmp, /dev/shm).

Every directory raydbg creates where other users can write is `<base>/raydbg-<uid>`,
mode 0700, owned by us: we refuse one that is a symlink, owned by someone else or
open to others (another user could have made it first to read or plant our files).
The base itself must be sticky (/tmp, /dev/shm) or writable by its owner only: in a
directory anyone may write without the sticky bit (Ray's /tmp/ray and session dirs),
another user can rename our folder away after any check and put a symlink in its place.
Files inside are opened without following symlinks, and files we read back are checked
on the open descriptor (a regular file of ours), never by path.
"""

from __future__ import annotations

import os
import re
import stat
import sys
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
        raise UnsafeDirError(f"raydbg: {path} belongs to uid {st.st_uid}, not {uid}; refusing to use it "
                             "(another user made it first: have it removed, or set TMPDIR to a directory of your own)")
    if st.st_mode & 0o077:
        raise UnsafeDirError(
            f"raydbg: {path} has mode {stat.S_IMODE(st.st_mode):o}, open to other users; "
            "refusing to use it (chmod 700 it or remove it)"
        )
    return path


def check_base(base: Path) -> Path:
    """Raise UnsafeDirError unless another user cannot rename what we put in `base`:
    it is sticky, or owned by us or root and writable by nobody else."""
    st = os.stat(base)
    if st.st_mode & stat.S_ISVTX:
        return base
    if st.st_mode & 0o022 or st.st_uid not in (0, os.getuid()):
        raise UnsafeDirError(
            f"raydbg: {base} lets other users rename what is in it (mode {stat.S_IMODE(st.st_mode):o}, "
            "no sticky bit); refusing to keep files there (set TMPDIR to a directory of your own)"
        )
    return base


def private_name() -> str:
    """Our folder's name in a shared place: `raydbg-<uid>`."""
    return f"raydbg-{os.getuid()}"


def private_dir(base: str | os.PathLike[str], *sub: str) -> Path:
    """`<base>/raydbg-<uid>[/sub...]`, created 0700 if missing, checked either way. A base
    named in the environment (RAYDBG_PROGRESS_BASE and the like) that does not exist yet is
    created 0700: otherwise every record under it would fail, silently, in the workers."""
    os.makedirs(base, 0o700, exist_ok=True)
    path = _made_private(check_base(Path(base)) / private_name())
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


def temp_base() -> str:
    """The temp dir, as `tempfile.gettempdir()` finds it in a sane environment, without
    importing tempfile (~4 ms at every CLI start) nor writing a probe file there."""
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None and tempfile.tempdir:
        return str(tempfile.tempdir)  # decided (or set by a test) in this process already
    for var in ("TMPDIR", "TEMP", "TMP"):
        d = os.environ.get(var)
        if d and os.path.isdir(d):
            return os.path.abspath(d)
    return "/tmp"


def runtime_root() -> Path:
    """`<tmp>/raydbg-<uid>` (TMPDIR read at call time), not created: raydbg's per-user,
    per-machine state (debug doors, stacks requests, forward's sockets, the Ray sessions'
    folders)."""
    return Path(temp_base()) / private_name()


def runtime_dir(*sub: str) -> Path:
    """`<tmp>/raydbg-<uid>[/sub...]`, created 0700 if missing, checked either way."""
    return private_dir(temp_base(), *sub)


def private_dir_problem() -> str | None:
    """None when `<tmp>/raydbg-<uid>` is (or can be made) ours and private; else why not,
    in one line that names the way out (without it raydbg cannot pause on this node)."""
    try:
        runtime_dir()
    except OSError as exc:
        return str(exc)
    return None


SESSION_NAME = re.compile(r"session_[A-Za-z0-9_.-]{1,200}")


def session_name(session_dir: str | os.PathLike[str]) -> str:
    """A Ray session directory's name (`session_<date>_<pid>`), checked: it names a folder of ours."""
    name = Path(session_dir).name
    if not SESSION_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"not a Ray session directory name: {name!r}")
    return name


def session_path(session: str, *sub: str) -> Path:
    """`<tmp>/raydbg-<uid>/sessions/<session name>[/sub...]`, not created: what raydbg keeps
    per Ray session (the gateway file, the embedded telemetry). Ray's session dir itself is
    writable by every local user, so nothing of ours lives there."""
    return runtime_root().joinpath("sessions", session_name(session), *sub)


def session_dir(session: str, *sub: str) -> Path:
    """`session_path(...)`, each level created 0700 if missing and checked."""
    return runtime_dir("sessions", session_name(session), *sub)


def make_dirs(directory: str | os.PathLike[str]) -> Path:
    """Create `directory` for writing: one under our runtime root level by level, 0700 and
    checked; any other (a directory the user named) as asked, theirs to secure."""
    path = Path(directory)
    root = runtime_root()
    if path == root or root in path.parents:
        return runtime_dir(*path.relative_to(root).parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_own_file(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of a regular file we own at `path`; a symlink, a FIFO (which
    would block the reader for ever), a device or another user's file raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeDirError(f"raydbg: {path} is not a regular file; not reading it")
        if st.st_uid != os.getuid():
            raise UnsafeDirError(f"raydbg: {path} belongs to uid {st.st_uid}, not {os.getuid()}; not reading it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_own_text(path: str | os.PathLike[str], limit: int = 1 << 20) -> str:
    """The text of a regular file of ours (open_own_file), at most `limit` bytes."""
    with os.fdopen(open_own_file(path), "rb") as f:
        return f.read(limit).decode("utf-8")


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
