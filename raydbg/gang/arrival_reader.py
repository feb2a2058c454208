"""This rank's arrival times at its collectives, step by step, for its progress record (worker side).

`worker_setup` (called by the worker's setup in activation) registers a step listener with
raydbg/progress_records.py: at each step's end (a `ray.train.report`, `raydbg.progress()`,
a finished step span) the listener is told the step's window, on this process's clock. It
reads torch's Flight Recorder in-process (raydbg/gang/flight_recorder.py) at most every
READ_EVERY_S and at most BUDGET of its CPU time (a dump's cost grows faster than the ring:
measured here ~1 ms for 100 entries, tens to hundreds of ms for a full ring of 2,000),
summarizes each recent window still whole in the ring (raydbg/gang/arrivals.py) and
returns the record's `arr`: a few hundred bytes. A process in no torch group, or with
Flight Recorder off, adds nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from raydbg import progress_records
from raydbg.gang import arrivals, flight_recorder

READ_EVERY_S = 1.0  # the gateway judges stragglers every second: no point reading more often
BUDGET = 0.01  # of this process's time that Flight Recorder dumps may take (CPU time: a loaded
# machine stretches a dump's wall time, not the work it costs)


class ArrivalReader:
    """The rolling summary of one process: the windows of its last steps and their arrivals."""

    def __init__(self, entries: Callable[[], list[dict[str, Any]] | None] = flight_recorder.entries,
                 read_every_s: float = READ_EVERY_S, budget: float = BUDGET,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries = entries
        self._read_every_s = read_every_s
        self._budget = budget
        self._clock = clock
        self._windows: deque[arrivals.Window] = deque(maxlen=progress_records.RECENT_STEPS)
        # step -> its arrivals; None: its window was no longer whole in the ring when read
        self._done: dict[int, dict[str, arrivals.GroupArrivals] | None] = {}
        self._next_read = 0.0
        self._in_group = False
        self._lock = threading.Lock()
        self.last_read_s = 0.0  # what the last dump cost (benchmarks/flight_recorder_cost.py)

    def on_step(self, step: int, start: float, end: float, released: bool, now: float) -> dict[str, Any] | None:
        with self._lock:
            self._windows.append(arrivals.Window(step, start, end, released))
            mono = self._clock()
            if mono >= self._next_read:
                self._read(mono)
            if not self._in_group:
                return None
            kept = {w.step for w in self._windows}
            self._done = {k: v for k, v in self._done.items() if k in kept}
            return {"arr": arrivals.encode(((w, g) for w in self._windows
                                            if (g := self._done.get(w.step)) is not None), now)}

    def _read(self, mono: float) -> None:
        start = time.thread_time()
        got = self._entries()
        self.last_read_s = took = time.thread_time() - start
        self._next_read = mono + max(self._read_every_s, took / self._budget)
        if got is None:
            return  # not (yet) in a torch group, or Flight Recorder off
        self._in_group = True
        oldest = None
        if got and len(got) >= _ring_size():
            oldest = min(int(e.get("time_created_ns") or 0) for e in got) / 1e9
        for w in self._windows:
            if w.step in self._done:
                continue
            # A full ring whose oldest entry is younger than the window's start lost some of it.
            self._done[w.step] = None if oldest is not None and oldest > w.start else arrivals.summarize(got, w)


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
