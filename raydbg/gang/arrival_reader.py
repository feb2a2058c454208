"""This rank's arrival times at its collectives, step by step, for its progress record (worker side).

`worker_setup` (called by the worker's setup in activation) registers a step listener with
raydbg/progress_records.py: at each step's end (a `ray.train.report`, `raydbg.progress()`,
a finished step span) the listener is told the step's window, on this process's clock. Now
and then it reads torch's Flight Recorder in-process (raydbg/gang/flight_recorder.py),
summarizes the steps since the last read that are still whole in the ring
(raydbg/gang/arrivals.py) and keeps the newest RECENT_STEPS of them in the record's `arr`:
a few hundred bytes.

When to read: a dump's cost grows with the ring (measured here, CPU time: ~3 ms for 256
entries, ~20 ms for a full ring of 2,000), so at most every READ_EVERY_S and at most BUDGET
of the process's CPU time (the median of the last reads' costs). And at the same steps on every rank, so that the gateway finds the
same steps read on all of them: at steps whose number is a multiple of a power of two, the
smallest whose steps (at this rank's step period) span that interval. In lock-step training
every rank finds the same period, and where two ranks round to different powers, the larger is
a multiple of the smaller. A process in no torch group, or with Flight Recorder off, adds nothing.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from raydbg import progress_records
from raydbg.gang import arrivals, flight_recorder
from raydbg.progress_records import StepEnd

READ_EVERY_S = 1.0  # the gateway judges stragglers every second: no point reading more often
BUDGET = 0.01  # of this process's CPU time that reading Flight Recorder may take (CPU time: a
# loaded machine stretches a dump's wall time, not the work it costs)
KEPT = progress_records.RECENT_STEPS


class ArrivalReader:
    """The rolling summary of one process: its steps not read yet, and the newest ones read."""

    def __init__(self, entries: Callable[[], list[dict[str, Any]] | None] = flight_recorder.entries,
                 read_every_s: float = READ_EVERY_S, budget: float = BUDGET) -> None:
        self._entries = entries
        self._read_every_s = read_every_s
        self._budget = budget
        self._pending: deque[StepEnd] = deque(maxlen=KEPT)  # older ones are no longer whole in a busy ring
        self._kept: dict[int, arrivals.StepArrivals] = {}
        self._syncs: dict[int, float] = {}  # step -> wait at the sync point that ended it, until read
        self._ends: deque[float] = deque(maxlen=KEPT)
        self._costs: deque[float] = deque(maxlen=5)  # CPU s of the last reads: one slow read (a GC pass) is not the rule
        self._in_group = False
        self._lock = threading.Lock()
        self.last_read_s = 0.0  # what the last read cost, CPU s (benchmarks/flight_recorder_cost.py)

    def on_step(self, end: StepEnd) -> dict[str, Any] | None:
        with self._lock:
            self._pending.append(end)
            self._ends.append(end.end)
            if end.last_sync is not None:
                step, wait = end.last_sync
                if step in self._kept:
                    self._kept[step].sync_wait_s = wait
                elif any(p.step == step for p in self._pending):
                    self._syncs[step] = wait
            if end.step % self.stride() == 0:
                self._read()
            if not self._in_group:
                return None
            return {"arr": arrivals.encode(self._kept, end.end)}

    def stride(self) -> int:
        """Read at steps that are multiples of this (see the module's docstring)."""
        if len(self._ends) < 3 or len(self._costs) < 3:
            return 1  # no step period or read cost to go by yet (and the ring is small: reading is cheap)
        ends = list(self._ends)
        period = statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False))
        cost = statistics.median(self._costs) if self._costs else 0.0
        interval = max(self._read_every_s, cost / self._budget)
        return 1 if period <= 0 or period >= interval else 1 << math.ceil(math.log2(interval / period))

    def _read(self) -> None:
        start = time.thread_time()
        try:
            self._summarize(self._entries())
        finally:
            self.last_read_s = time.thread_time() - start
            self._costs.append(self.last_read_s)

    def _summarize(self, got: list[dict[str, Any]] | None) -> None:
        if got is None:
            return  # not (yet) in a torch group, or Flight Recorder off
        self._in_group = True
        pending, self._pending = list(self._pending), deque(maxlen=KEPT)
        if not pending:
            return
        oldest = None
        if got and len(got) >= _ring_size():
            oldest = min(int(e.get("time_created_ns") or 0) for e in got) / 1e9
        since = min(p.start for p in pending) * 1e9
        recent = [e for e in got if int(e.get("time_created_ns") or 0) > since]
        for p in pending:
            if oldest is not None and oldest > p.start:
                continue  # a full ring whose oldest entry is younger than the step's start lost some of it
            groups = arrivals.summarize(recent, arrivals.Window(p.step, p.start, p.end, p.released))
            sync = self._syncs.pop(p.step, None) if p.at_sync else 0.0
            self._kept[p.step] = arrivals.StepArrivals(p.start, p.end, p.released, p.data_s, sync, groups)
        for k in sorted(self._kept)[:-KEPT]:
            del self._kept[k]
        self._syncs.clear()


def _ring_size() -> int:
    try:
        return int(os.environ.get("TORCH_FR_BUFFER_SIZE") or 0) or 1 << 62
    except ValueError:
        return 1 << 62


_reader = ArrivalReader()


def worker_setup() -> None:
    """In an activated worker: add this rank's arrivals to its progress record at each step."""
    if _reader.on_step not in progress_records.STEP_LISTENERS:
        progress_records.STEP_LISTENERS.append(_reader.on_step)
