"""Progress beats: one fixed-size record per worker process, rewritten in place, read by the node's agent.

`raydbg.progress()` (and, in activated Train workers, every `ray.train.report` and the
process-group setup) rewrites this process's record: one `pwrite` of a fixed-size block
to a file kept open in a per-uid 0700 directory (a few microseconds; no Ray call, no
lock). At the end of each timed step the step listeners a feature registered may add a few
hundred bytes (raydbg/gang/arrival_reader.py: the rank's arrivals at its collectives). The
node's agent reads every record of its node (`read_all`); the gateway merges nodes and the
hang and straggler detectors decide from the merged view. No Ray import here at module
level: identity comes from `raydbg.ray_context` on the first beat only.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raydbg.private_dir import UnsafeDirError, open_private, private_dir
from raydbg.proc_identity import pid_alive
from raydbg.record_rules import TRAIN_NAMES

RECORD_SIZE = 2048  # fixed, padded with spaces: a rewrite always covers the previous one
IDENTITY_RETRY_S = 10.0  # a worker that beat before its Train context existed looks again
RECENT_STEPS = 8  # step times kept in the record: what straggler detection looks back over



@dataclass(frozen=True)
class StepEnd:
    """A step just ended, on this process's clock: what a step listener is told."""

    step: int
    start: float
    end: float
    released: bool  # it started when a sync point every rank shares returned (a Train report)
    at_sync: bool  # it ended arriving at such a sync point (its wait there is known once it returns)
    data_s: float  # of it, the time waiting for data
    last_sync: tuple[int, float] | None  # (step, wait) of the newest sync point that returned


# Filled by the worker's setup (a feature's hook; this module imports none): called under the
# beat's lock at the end of each timed step. Each returns fields for the record (a few hundred
# bytes: raydbg/gang/arrival_reader.py) or None.
StepListener = Callable[[StepEnd], "dict[str, Any] | None"]
STEP_LISTENERS: list[StepListener] = []


def progress_dir() -> Path:
    base = os.environ.get("RAYDBG_PROGRESS_BASE")
    if not base:
        shm = Path("/dev/shm")
        base = str(shm if shm.is_dir() and os.access(shm, os.W_OK) else Path("/tmp"))
    return private_dir(base, "progress")


def _identity() -> dict[str, Any]:
    from raydbg import ray_context

    ctx = ray_context.ray_context()
    return {
        "job_id": ctx.get("job_id", ""),
        "node_id": ctx.get("node_id", ""),
        "task_id": ctx.get("task_id"),
        "actor_id": ctx.get("actor_id"),
        **{name: ctx.get(session_name) for session_name, name in TRAIN_NAMES.items()},
    }


class Beat:
    """This process's progress record, opened on the first beat and kept open.

    Each beat also records the step's work time: from the end of the previous beat's sync
    point (`resumed`, called when `ray.train.report` returns; the beat itself for `raydbg.progress()`)
    to this beat. In lock-step training every rank's beat-to-beat time is the same (the fast
    ranks wait in the report's barrier), so the wall time between beats cannot show a
    straggler; the time worked before arriving can. The time spent in the sync point itself
    is kept as `wait_s`.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = -1
        self._static = ""
        self._identity_at = 0.0
        self._train = False
        self.steps = 0
        self._lock = threading.Lock()
        self._resumed_at: float | None = None  # when the last sync point returned
        self._released = False  # the current step started at a sync point's return
        self._arrived_step = 0  # the step whose beat arrived at the sync point now waited in
        self._last_sync: tuple[int, float] | None = None
        self._arrived_at: float | None = None
        self._busy: deque[float] = deque(maxlen=RECENT_STEPS)
        self._wait: deque[float] = deque(maxlen=RECENT_STEPS)
        # Of each step's work time, how much went waiting for data (waited_for_data).
        self._data: deque[float] = deque(maxlen=RECENT_STEPS)
        self._data_now = 0.0

    def _ensure(self, now: float) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._pid = os.getpid()
            self._fd = open_private(progress_dir() / str(self._pid), os.O_WRONLY | os.O_CREAT)
            self._static = ""
        if not self._static or (not self._train and now - self._identity_at > IDENTITY_RETRY_S):
            ident = dict(_identity(), pid=self._pid)
            self._train = ident.get("train_run") is not None
            self._identity_at = now
            self._static = json.dumps(ident)[1:-1]
        return self._fd

    def beat(self, step: int | None = None, source: str = "progress", sync: bool = False,
             timed: bool = True) -> None:
        """`sync`: this beat arrives at a sync point whose return the caller marks with `resumed`;
        `timed=False`: not the end of a step (a Train group's setup), so no step time is kept."""
        now = time.time()
        with self._lock:
            fd = self._ensure(now)
            self.steps = self.steps + 1 if step is None else int(step)
            extra = ""
            if not timed:
                self._resumed_at = self._arrived_at = None  # the first step's time starts after it
            elif self._resumed_at is not None:
                self._busy.append(round(now - self._resumed_at, 4))
                self._data.append(round(self._data_now, 4))
                extra = self._listeners(StepEnd(self.steps, self._resumed_at, now, self._released, sync,
                                                round(self._data_now, 4), self._last_sync))
            self._data_now = 0.0
            if timed:
                self._arrived_at = now if sync else None
                self._arrived_step = self.steps
                self._resumed_at = None if sync else now
                self._released = False
            times = f'"busy_s": {list(self._busy)}, "wait_s": {list(self._wait)}, "data_s": {list(self._data)}'
            head = f'{{"ts": {now}, "step": {self.steps}, "source": "{source}"'
            # Never cut the identity: drop the listeners' fields, then the step times, instead.
            for body in (f"{times}{extra}", times, ""):
                data = f"{head}, {body}, {self._static}}}" if body else f"{head}, {self._static}}}"
                if len(data) <= RECORD_SIZE:
                    break
            # One write of the whole block: a reader racing it gets bad JSON and skips it once.
            os.pwrite(fd, data.encode()[:RECORD_SIZE].ljust(RECORD_SIZE), 0)

    def _listeners(self, end: StepEnd) -> str:
        """The step listeners' fields for this record (`, "key": value...`); a failing one adds nothing."""
        out = ""
        for listener in STEP_LISTENERS:
            try:
                fields = listener(end)
                if fields:
                    out += ", " + json.dumps(fields, separators=(",", ":"))[1:-1]
            except Exception:
                pass
        return out

    def resumed(self) -> None:
        """The sync point the last beat arrived at returned: the next step's work starts now, at the
        same moment on every rank (a release)."""
        now = time.time()
        with self._lock:
            if self._arrived_at is not None:
                self._wait.append(round(now - self._arrived_at, 4))
                self._last_sync = (self._arrived_step, self._wait[-1])
                self._arrived_at = None
            self._resumed_at = now
            self._released = True

    def waited_for_data(self, seconds: float) -> None:
        """Part of this step's work time went waiting for data (a batch iterator's next())."""
        with self._lock:
            self._data_now += seconds

    def done(self) -> None:
        """The work this record tracked ended (the Train run shut down): no more a candidate."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
                try:
                    os.unlink(progress_dir() / str(self._pid))
                except OSError:
                    pass
            self._fd = None


_beat = Beat()


def beat(step: int | None = None, source: str = "progress", sync: bool = False, timed: bool = True) -> None:
    """Record that this process made progress now; never raises into the caller's step."""
    try:
        _beat.beat(step, source, sync, timed)
    except (OSError, UnsafeDirError, ValueError):
        pass


def resumed() -> None:
    """After the sync point of a beat (a Train report) returned: see Beat."""
    _beat.resumed()


def waited_for_data(seconds: float) -> None:
    """`seconds` of the current step went waiting for data; never raises into the caller."""
    try:
        _beat.waited_for_data(seconds)
    except Exception:
        pass


def done() -> None:
    try:
        _beat.done()
    except (OSError, UnsafeDirError):
        pass


def read_all(directory: Path | None = None) -> list[dict[str, Any]]:
    """Every live worker's last beat on this node (each a schema.ProgressBeat, the listeners'
    fields kept); records of dead pids are removed, those that are not a beat skipped."""
    import msgspec  # the agent's side: a worker never reads beats

    from raydbg.schema import ProgressBeat

    try:
        directory = directory or progress_dir()
        names = os.listdir(directory)
    except (OSError, UnsafeDirError):
        return []
    out = []
    for name in names:
        if not name.isdigit():
            continue
        path = directory / name
        if not pid_alive(int(name)):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        try:
            fd = open_private(path, os.O_RDONLY)
            try:
                raw = os.pread(fd, RECORD_SIZE, 0)
            finally:
                os.close(fd)
            rec = json.loads(raw)
            msgspec.convert(rec, ProgressBeat)
        except (OSError, ValueError):  # a torn write, or not a beat (ValidationError is one)
            continue
        out.append(rec)
    return out


def key(rec: dict[str, Any]) -> tuple[str, str, str]:
    """(job, run, rank): a Train rank by its world rank, any other worker by node and pid."""
    if rec.get("train_run") is not None and rec.get("world_rank") is not None:
        return (str(rec.get("job_id", "")), str(rec["train_run"]), f"rank {rec['world_rank']}")
    return (str(rec.get("job_id", "")), "", f"{rec.get('node_id', '')}:{rec.get('pid')}")


def latest(recs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The newest record per key (a restarted rank's new process wins over a stale one)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rec in recs:
        k = key(rec)
        if k not in out or float(rec.get("ts", 0)) >= float(out[k].get("ts", 0)):
            out[k] = rec
    return out


def as_progress_map(recs: list[dict[str, Any]]) -> dict[Any, float]:
    """Last beat time by (job_id, train_run, world_rank) and by pid: what stack_classes.runs() takes."""
    out: dict[Any, float] = {}
    for rec in recs:
        ts = float(rec.get("ts", 0))
        if rec.get("train_run") is not None and rec.get("world_rank") is not None:
            out[(rec.get("job_id"), rec["train_run"], rec["world_rank"])] = ts
        if rec.get("pid") is not None:
            out[rec["pid"]] = max(ts, out.get(rec["pid"], 0.0))
    return out
