"""Whether a held task may start now: the node's marks, its room and the reservations
of admitted tasks, decided under one lock (gate.py holds the tasks; no Ray import).

A task's expected peak (`room`) is what its whole worker process is expected to reach.
An admitted task reserves it (local.py) until it returns, so tasks starting together do
not count the same free room twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from raydbg.memory import local
from raydbg.memory.measure import NodeMeasurer

_measurer: NodeMeasurer | None = None
_sleep = time.sleep  # admit()'s pause between checks (tests replace it)


def env_float(name: str, default: float) -> float:
    """A float setting from the environment; a missing or bad value gives `default`."""
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def marks() -> tuple[float, float]:
    """(low, high) fractions of the node limit."""
    thr = env_float("RAYDBG_MEMORY_THRESHOLD", 0.9)
    margin = env_float("RAYDBG_MEMORY_MARGIN", 0.05)
    return thr - margin, thr - margin / 2


def node_memory() -> tuple[int, int]:
    """(used, limit) of this worker's node, as the monitor measures it."""
    global _measurer
    if _measurer is None:
        _measurer = NodeMeasurer(psi=False)
    n = _measurer.read()
    return n.used, n.limit


def fits(low: float, extra: int, read: Callable[[], tuple[int, int]] | None = None) -> bool:
    """Does `extra` fit under `low`, counting what admitted tasks reserved (local.py)?"""
    used, limit = (read or node_memory)()
    return used + extra + local.reserved() < low * limit


def admit(
    room: int,
    strict: bool,
    max_hold_s: float,
    on_hold: Callable[[], None] = lambda: None,
    read: Callable[[], tuple[int, int]] | None = None,
    function_id: str = "",
    learned: bool = True,
) -> float:
    """Hold until this task's expected peak (`room`, its whole process) fits, then reserve
    it until the task returns; seconds waited.

    Fits: under the high mark when `room` is a complete learned peak (the most its
    function's tasks held here, one of them to its end: a sound estimate, and the high
    mark is still below the kill threshold, so one more task fits more often), else under
    the low mark (a killed attempt's memory or an incomplete peak: lower bounds).

    Check and reserve happen under one lock, so tasks starting together do not take the
    same room. `strict` (a retry after a raydbg kill): only room, or `max_hold_s`, lets it
    go. Otherwise (a function learned to be big) it also goes when no other admitted task
    holds a reservation, no other task of `function_id` runs here (one that will end and
    free its memory) and the node is below the high mark: waiting would then free nothing."""
    low, high = marks()
    start = time.monotonic()
    delay = 0.02
    held = False
    while True:
        with local.admission_lock():
            used, limit = (read or node_memory)()
            have = local.anon(os.getpid()) or 0
            pending = local.reservations()
            room_now = (
                used + max(0, room - have) + sum(pending) < (high if learned else low) * limit
            )
            alone = not strict and not pending and used < high * limit and not siblings(function_id)
            if room_now or alone or time.monotonic() - start >= max_hold_s:
                _reserve(room)
                return time.monotonic() - start
        if not held:
            held = True
            on_hold()
        _sleep(delay)
        delay = min(0.25, delay * 2)


def siblings(function_id: str) -> int:
    """Other workers of this machine running a task of `function_id` now (not held at its
    start): their memory comes back when they return. Two small reads per worker (record,
    title); only on the admission path of big functions."""
    if not function_id:
        return 0
    from raydbg.memory.whois import ray_title

    d = local.run_dir()
    try:
        pids = [int(n) for n in os.listdir(d) if n.isdigit() and int(n) != os.getpid()]
    except OSError:
        return 0
    n = 0
    for pid, r in local.read_running(pids, d).items():
        if r.get("fn") != function_id or r.get("held"):
            continue
        if local.matches_title(str(r.get("name", "")), ray_title(pid)):
            n += 1
    return n


def wait_until(
    ok: Callable[[], bool],
    max_hold_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Sleep with backoff (0.05 s doubling to 0.5 s) until `ok()`; seconds waited.

    The check is three small file reads, so the cap is low: a held task starts soon
    after its memory fits."""
    start = clock()
    delay = 0.05
    while not ok() and clock() - start < max_hold_s:
        sleep(delay)
        delay = min(0.5, delay * 2)
    return clock() - start


_reserving = False  # this worker's running attempt holds a reservation (local.py)


def _reserve(room: int) -> None:
    """Admitted: keep `room` counted for other held tasks until this one returns."""
    global _reserving
    local.reserve(room)
    _reserving = True


def release() -> None:
    global _reserving
    if _reserving:
        _reserving = False
        local.release()
