"""Where a job's record lives: a private local directory or any filesystem pyarrow reaches (runs in the
gateway agent, which writes, and in `raydbg history`, which reads).

`RAYDBG_HISTORY` names a directory or a URI (`s3://bucket/prefix`, `gs://...`, `file:///...`);
unset, the record is `~/.raydbg/history/` (0700, ours, checked by raydbg/private_dir.py).
Layout: `<root>/<job>/manifest.json` (small, rewritten whole) and `<root>/<job>/seg-*.jsonl`
(JSON lines, one writer per file). A local segment is appended to; an object store has no
append, so a remote segment is written whole again at each flush (segments roll at
SEGMENT_MAX bytes, so a rewrite stays small). Nothing here imports Ray.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Protocol

from raydbg import private_dir

ENV = "RAYDBG_HISTORY"
MANIFEST = "manifest.json"
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SEGMENT_NAME = re.compile(r"seg-\d{13}-[0-9a-f]{8}-\d{4}\.jsonl")
READ_LIMIT = 256 << 20  # a segment larger than this is not ours (they roll at a few MiB)


class StoreError(OSError):
    """The store cannot be used (said in one line)."""


class Store(Protocol):
    """What the writer and the reader need of a place."""

    where: str

    def jobs(self) -> list[str]: ...

    def names(self, job: str) -> list[str]: ...

    def read(self, job: str, name: str) -> bytes: ...

    def append(self, job: str, name: str, chunk: bytes, offset: int) -> None:
        """Add `chunk` (whole lines) to segment `name`, which holds `offset` bytes (0: a new one)."""

    def close(self, job: str, name: str) -> None:
        """The writer will not append to `name` again."""

    def replace(self, job: str, name: str, data: bytes) -> None: ...


def checked_job(job: str) -> str:
    if not JOB_NAME.fullmatch(job) or job in (".", ".."):
        raise StoreError(f"raydbg history: {job[:80]!r} is not a job or run name")
    return job


class LocalStore:
    """A directory on this machine. The default one is private (0700, ours); in any, job folders
    are made 0700 and files 0600 without following links, and only files of ours are read."""

    def __init__(self, root: Path, private: bool) -> None:
        self.root = root
        self.private = private
        self.where = str(root)

    def _root(self, create: bool) -> Path:
        if self.private:
            return private_dir.private_home_dir("history") if create else private_dir.check_private(self.root)
        if create:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.root

    def _job_dir(self, job: str, create: bool) -> Path:
        path = self._root(create) / checked_job(job)
        if create:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        return private_dir.check_private(path)

    def jobs(self) -> list[str]:
        try:
            root = self._root(False)
            entries = os.listdir(root)
        except FileNotFoundError:
            return []
        out = []
        for name in entries:
            try:  # a planted symlink or someone else's folder is not a job of ours
                if JOB_NAME.fullmatch(name):
                    private_dir.check_private(root / name)
                    out.append(name)
            except OSError:
                continue
        return out

    def names(self, job: str) -> list[str]:
        return os.listdir(self._job_dir(job, False))

    def read(self, job: str, name: str) -> bytes:
        fd = private_dir.open_own_file(self._job_dir(job, False) / name)
        with os.fdopen(fd, "rb") as f:
            return f.read(READ_LIMIT)

    def append(self, job: str, name: str, chunk: bytes, offset: int) -> None:
        path = self._job_dir(job, True) / name
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT | os.O_EXCL if offset == 0 else 0)
        fd = private_dir.open_private(path, flags)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                raise StoreError(f"raydbg history: {path} is not a file of ours")
            if st.st_size != offset:  # a short write before, or someone else: the writer starts a new segment
                raise StoreError(f"raydbg history: {path} changed under the writer ({st.st_size} != {offset} bytes)")
            os.write(fd, chunk)  # whole lines in one write: a kill loses at most the line in flight
        finally:
            os.close(fd)

    def close(self, job: str, name: str) -> None:
        pass

    def replace(self, job: str, name: str, data: bytes) -> None:
        d = self._job_dir(job, True)
        tmp = d / f".{name}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fd = private_dir.create_new(tmp)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, d / name)  # in our 0700 folder: nobody else can swap it


class ArrowStore:
    """A pyarrow filesystem (`s3://bucket/prefix`, ...): objects written whole."""

    def __init__(self, uri: str) -> None:
        from pyarrow import fs  # only for a URI: the local default never pays for pyarrow

        try:
            self.fs, self.base = fs.FileSystem.from_uri(uri)
        except Exception as exc:
            raise StoreError(f"raydbg history: cannot use {uri!r}: {exc}") from None
        self.base = self.base.rstrip("/")
        self.where = uri
        self._open: dict[tuple[str, str], bytes] = {}  # the segments still written to, as written

    def _path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def jobs(self) -> list[str]:
        from pyarrow import fs

        infos = self.fs.get_file_info(fs.FileSelector(self.base, allow_not_found=True))
        return [i.base_name for i in infos if i.type == fs.FileType.Directory and JOB_NAME.fullmatch(i.base_name)]

    def names(self, job: str) -> list[str]:
        from pyarrow import fs

        infos = self.fs.get_file_info(fs.FileSelector(self._path(checked_job(job)), allow_not_found=True))
        return [i.base_name for i in infos if i.type == fs.FileType.File]

    def read(self, job: str, name: str) -> bytes:
        with self.fs.open_input_stream(self._path(checked_job(job), name)) as f:
            return bytes(f.read(READ_LIMIT))

    def append(self, job: str, name: str, chunk: bytes, offset: int) -> None:
        before = self._open.get((job, name), b"")
        if len(before) != offset:
            raise StoreError(f"raydbg history: {name} holds {len(before)} bytes, not {offset}")
        self.replace(job, name, before + chunk)  # no append on an object store: the segment again, whole
        self._open[(job, name)] = before + chunk

    def close(self, job: str, name: str) -> None:
        self._open.pop((job, name), None)

    def replace(self, job: str, name: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._path(checked_job(job), name)) as f:
            f.write(data)


def disabled() -> bool:
    """RAYDBG_HISTORY=off (or 0, none): no record is kept."""
    return os.environ.get(ENV, "").strip().lower() in ("off", "0", "none", "false")


def open_store(where: str | None = None) -> Store:
    """The store `where` names (a path or URI), else RAYDBG_HISTORY's, else `~/.raydbg/history`."""
    where = where if where is not None else os.environ.get(ENV, "").strip()
    if not where:
        return LocalStore(private_dir.home_dir("history"), private=True)
    if "://" in where and not where.startswith("file://"):
        return ArrowStore(where)
    path = Path(where[len("file://"):] if where.startswith("file://") else where).expanduser()
    default = private_dir.home_dir("history")
    return LocalStore(path, private=path.absolute() == default.absolute())


def describe(store: Any) -> str:
    return str(getattr(store, "where", store))
