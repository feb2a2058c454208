"""Node-local files shared by the workers and the node's monitor, in a tmpfs.

Records of "what runs in this worker now", written at task start, read by the monitor.
Why: GCS task events reach GCS about a second after a task starts (Ray batches
them), and a task growing at 1 GB/s can fill a node within that second; a busy
worker GCS does not know yet would count as unknown (non-retriable) and could not
be marked for the start gate. The start gate (start_gate.py) already runs at every task
start, so it rewrites one small file per worker, which it keeps mapped: a copy into
memory, no system call (a new file + rename per task cost ~100x that, measured).

The pressure flag `pressure-<node_id>`: up while the node is above the gate's high mark
or its growth will take it there within a short horizon ("1 <time> used limit
memory|trend"), zero bytes otherwise. The monitor rewrites it in place, never truncated or
replaced, so that each worker keeps it mapped and a task start reads one byte of
shared memory (start_gate.py), not the node's memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raydbg.private_dir import check_private, open_private, private_dir, private_name

RECORD_SIZE = 1024  # fixed, padded with spaces: a rewrite always covers the last one
FLAG_SIZE = 64  # fixed: a reader's map of it never reaches past the end
FLAG_FRESH_S = 2.0  # an older flag is a monitor that died with it set: ignored


_run_dirs: dict[str | None, Path] = {}
_checked: set[Path] = set()


def _shared_root() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path("/tmp")


def run_dir() -> Path:
    """Where the records live; the same Path object every call (the gate runs per task)."""
    base = os.environ.get("RAYDBG_RUN_DIR")
    found = _run_dirs.get(base)
    if found is None:
        found = Path(base) if base else _shared_root() / private_name() / "tasks"
        found = _run_dirs[base] = found
    return found


def ensure_run_dir(directory: Path | None = None) -> Path:
    """The run dir, created 0700 and checked (ours, closed to others) once per process.

    Raises UnsafeDirError (an OSError) otherwise: another user who made it first could
    read what runs here or plant records and flags that steer the monitor and the gate.
    """
    d = directory or run_dir()
    if d not in _checked:
        root = _shared_root()
        if d == root / private_name() / "tasks":
            private_dir(root, "tasks")
        else:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            check_private(d)
        _checked.add(d)
    return d


def write_file(path: Path, text: str) -> None:
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write(text)


# A record starts with the task id at a fixed place, so that the gate's quick path (a task
# of the same function and name as the last one, on a calm node: _ray_internals.
# gate_task_functions) rewrites only that, in place: one small copy, no formatting. The
# record's start then stays the full check's, at most a ticket (start_gate.TICKET_S) earlier.
TASK_ID_LEN = 48  # Ray task ids in hex
_QUICK_AT = len('{"task_id": "')


class RunningRecord:
    """This worker's record file, kept open (mapped) for the life of the process."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or run_dir()
        self._map: mmap.mmap | None = None

    def write_static(self, task_id: str, attempt: int, static: str, held: bool = False,
                     start: float | None = None) -> None:
        """`static`: the record's fields that do not change between this function's tasks,
        JSON-encoded once by the caller (this runs before every task). `start`: the
        record's start (time.time()), now if not given."""
        # Only a Ray worker runs this, at its task starts; a child it forks never does.
        m = self._map
        if m is None:
            m = self._open()
        data = (
            f'{{"task_id": "{task_id}", "attempt": {attempt}, "start": {time.time() if start is None else start}, '
            f'"held": {"true" if held else "false"}, {static}}}'
        ).encode()[:RECORD_SIZE]
        # One copy of the whole fixed-size block into the shared page: no system call, so
        # the task's thread never lets go of the GIL here (with a pwrite, getting it back
        # cost a busy worker more than the write). A reader that races it gets bad JSON
        # and skips the record for that round (unknown = non-retriable: sound).
        m[:RECORD_SIZE] = data.ljust(RECORD_SIZE)

    def id_field(self) -> memoryview:
        """The task id's place in the record, for `field[:] = task_id (hex, ASCII)` (the
        quick path: an id written last with write_static, full length, attempt 0 and not
        held; what changes between such tasks)."""
        m = self._map
        if m is None:
            m = self._open()
        return memoryview(m)[_QUICK_AT : _QUICK_AT + TASK_ID_LEN]

    def _open(self) -> mmap.mmap:
        self.close()
        ensure_run_dir(self.directory)
        fd = open_private(self.directory / str(os.getpid()), os.O_RDWR | os.O_CREAT)
        try:
            os.ftruncate(fd, RECORD_SIZE)
            self._map = mmap.mmap(fd, RECORD_SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file
        return self._map

    def close(self) -> None:
        if self._map is not None:
            with contextlib.suppress(BufferError, ValueError):
                self._map.close()
            self._map = None


_record: RunningRecord | None = None


def record() -> RunningRecord:
    """This process's record in the current run dir."""
    global _record
    directory = run_dir()
    if _record is None or _record.directory is not directory:  # run_dir() caches its Paths
        if _record is not None:
            _record.close()
        _record = RunningRecord(directory)
    return _record


def static_fields(name: str, job_id: str, function_id: str) -> str:
    """The per-function part of a record, encoded once (see RunningRecord.write_static)."""
    return json.dumps({"name": name[:200], "job_id": job_id, "fn": function_id})[1:-1]


def matches_title(name: str, title: str | None) -> bool:
    """Does a record's task `name` name what the worker's process title (`ray::<task
    name>`, worker_tasks.ray_title: up to the first space) says it runs now? A record outlives
    its task; the title does not."""
    if not title:
        return False
    first = name.split(" ", 1)[0]
    return first == title or first.rsplit(".", 1)[-1] == title  # or a qualified function name


def write_running(
    task_id: str,
    attempt: int,
    name: str,
    job_id: str,
    directory: Path | None = None,
    held: bool = False,
    function_id: str = "",
) -> None:
    rec = RunningRecord(directory) if directory is not None else record()
    rec.write_static(task_id, attempt, static_fields(name, job_id, function_id), held)
    if directory is not None:
        rec.close()


def flag_path(node_id: str, directory: Path | None = None) -> Path:
    return (directory or run_dir()) / f"pressure-{node_id}"


def set_flag(path: Path, on: bool, info: str = "") -> None:
    """The monitor's side: "1 <time> <info>" while `on` (rewritten each poll: fresh),
    zero bytes once down; in place, the same size every time (workers keep it mapped)."""
    data = f"1 {time.time():.3f} {info}".encode()[:FLAG_SIZE].ljust(FLAG_SIZE) if on else bytes(FLAG_SIZE)
    try:
        ensure_run_dir(path.parent)
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
    except OSError:
        pass


def _read_flag(path: Path | str) -> list[str]:
    """The flag's words while it is up and fresh, else []."""
    try:
        fd = open_private(path, os.O_RDONLY)
        try:
            words = os.read(fd, FLAG_SIZE).decode(errors="replace").split()
        finally:
            os.close(fd)
        if words[:1] == ["1"] and time.time() - float(words[1]) < FLAG_FRESH_S:
            return words
    except (OSError, IndexError, ValueError):
        pass
    return []


def flag_up(path: Path | str) -> bool:
    return bool(_read_flag(path))


def flag_reason(path: Path | str) -> str:
    """Why the flag is up: "memory" (above the high mark) or "trend" (heading there)."""
    words = _read_flag(path)
    return (words[-1] if len(words) > 2 else "memory") if words else ""


def map_flag(path: Path | str) -> tuple[mmap.mmap, int] | None:
    """The flag, mapped read-only (its first byte is 0 while down), and its file's inode;
    None until the node's monitor made it."""
    try:
        fd = open_private(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_size < FLAG_SIZE:  # not written yet: a map would fault
            return None
        return mmap.mmap(fd, FLAG_SIZE, prot=mmap.PROT_READ), st.st_ino
    except OSError:
        return None
    finally:
        os.close(fd)


def inode(path: Path | str) -> int:
    """The file's inode; 0 when there is none."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return 0


def reserve(nbytes: int, directory: Path | None = None) -> None:
    """An admitted retry says how much it will need (`reserve-<pid>`), so that the next
    held retry does not take the same room before this one has grown into it."""
    try:
        d = ensure_run_dir(directory)
        write_file(d / f"reserve-{os.getpid()}", str(int(nbytes)))
    except OSError:
        pass


def release(directory: Path | None = None) -> None:
    try:
        ((directory or run_dir()) / f"reserve-{os.getpid()}").unlink(missing_ok=True)
    except OSError:
        pass


def anon(pid: int, proc: Path = Path("/proc")) -> int | None:
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def reservations(directory: Path | None = None, proc: Path = Path("/proc")) -> list[int]:
    """Per admitted task of another live process: bytes it reserved and has not allocated
    yet (gone ones are removed)."""
    d = directory or run_dir()
    out: list[int] = []
    try:
        names = [n for n in os.listdir(d) if n.startswith("reserve-")]
    except OSError:
        return out
    for name in names:
        pid = int(name[8:]) if name[8:].isdigit() else -1
        if pid == os.getpid():
            continue
        have = anon(pid, proc)
        if have is None:  # the process is gone: so is what it reserved
            try:
                (d / name).unlink()
            except OSError:
                pass
            continue
        try:
            out.append(max(0, int((d / name).read_text()) - have))
        except (OSError, ValueError):
            continue
    return out


def rooms(directory: Path | None = None) -> dict[int, int]:
    """pid -> the whole room each admitted task reserved (the monitor's side: what the
    gate admitted it to reach)."""
    d = directory or run_dir()
    out: dict[int, int] = {}
    try:
        names = [n for n in os.listdir(d) if n.startswith("reserve-") and n[8:].isdigit()]
    except OSError:
        return out
    for name in names:
        try:
            out[int(name[8:])] = int((d / name).read_text())
        except (OSError, ValueError):
            continue
    return out


def reserved(directory: Path | None = None, proc: Path = Path("/proc")) -> int:
    """Bytes other admitted tasks reserved and have not allocated yet."""
    return sum(reservations(directory, proc))


_lock_fd: int | None = None


@contextlib.contextmanager
def admission_lock(directory: Path | None = None) -> Iterator[None]:
    """One admission decision at a time on this machine: two tasks starting together
    must not both take the same free room (check, then reserve, under the lock)."""
    global _lock_fd
    if _lock_fd is None:
        d = ensure_run_dir(directory)
        _lock_fd = open_private(d / "admit.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(_lock_fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(_lock_fd, fcntl.LOCK_UN)


def read_running(pids: list[int], directory: Path | None = None) -> dict[int, dict[str, Any]]:
    d = directory or run_dir()
    out: dict[int, dict[str, Any]] = {}
    for pid in pids:
        try:
            out[pid] = json.loads((d / str(pid)).read_bytes())
        except (OSError, ValueError):
            continue
    return out


def prune(directory: Path | None = None, proc: Path = Path("/proc")) -> int:
    """Remove the records of processes that are gone (the monitor does this now and then)."""
    d = directory or run_dir()
    n = 0
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for name in names:
        if name.isdigit() and not (proc / name).exists():
            try:
                (d / name).unlink()
                n += 1
            except OSError:
                pass
    return n
