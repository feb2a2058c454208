"""Worker side: hold a task attempt at its start until the memory it will need fits (the start gate).

Why: a kill from outside Ray spends the task's `max_retries`, and Ray starts the next
attempt at once; without a pause the monitor kills the same growing task again and
again until it fails for good. So, at the start of each normal task:
  * an attempt that follows a raydbg kill (KV `killed/...`, written by the monitor)
    waits until the memory its killed attempt held (or its function's learned peak, if
    larger) fits again: it would otherwise grow back and be killed again;
  * a task of a function whose tasks were seen to grow big on this node (learn.py)
    waits until that peak fits: the second wave of such tasks needs no kill;
  * any other attempt waits while the node is above the high mark or, says the
    monitor, its growth will take it there within the hold horizon: a task started now
    would be among the newest at the crossing, the first victims.
All in one wait loop with backoff, never longer than the longest hold (settings.py).
An admitted task reserves the room it was let in with (its whole process's expected
peak) until it returns, so tasks starting together do not count the same free room
twice; the monitor reads that reservation as the task's expected peak. While held,
the task's local record says so and the monitor leaves it alone.

Cost: this runs before every task, so the common case is short: a full check (one byte
of the node's pressure flag, which the monitor keeps up while the node is above the high
mark and this worker keeps mapped, a dict lookup of the function's learned peak, the
local record written) at most every TICKET_S, and in between, for tasks of the same
function and name while the flag stays down, the record's task id rewritten in place by
the wrapper (before_task's ticket).
Memory is read only while the flag is up or for a function learned to be big.

`install()` (raydbg's worker setup hook) makes Ray's task executor call `before_task`
and `after_task` around every plain or generator task function (not actor methods,
not async), without a frame of raydbg's in the task's stack (_ray_internals.task_start).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raydbg.memory import budgets, node_files, settings
from raydbg.memory.learn import PeakTable, peaks_path
from raydbg.memory.node_memory import NodeMeasurer

log = logging.getLogger("raydbg.memory")
LOW, HIGH = 0, 1  # which mark (settings.py)

_flag: str | Path | None = None  # this node's pressure flag; None: unknown node, always measure
_peaks: PeakTable | None = None  # what big functions' tasks reach on this node (learn.py)
_measurer: NodeMeasurer | None = None
_sleep = time.sleep  # the wait loop's pause (tests replace it, with the two clocks)
_clock = time.monotonic  # the gate's intervals: holds, the flag's recheck and remap
_wall = time.time  # a record's start and a ticket's end (the wrapper compares it with time.time())
_reserving = False  # this worker's running attempt holds a reservation (node_files.py)


# --- room on the node ---------------------------------------------------------------


def node_memory() -> tuple[int, int]:
    """(used, limit) of this worker's node, as the monitor measures it."""
    global _measurer
    if _measurer is None:
        _measurer = NodeMeasurer(psi=False)
    n = _measurer.read()
    return n.used, n.limit


def fits(extra: int, read: Callable[[], tuple[int, int]] | None = None, mark: int = LOW) -> bool:
    """Does `extra` fit under the mark, counting what admitted tasks reserved?"""
    used, limit = (read or node_memory)()
    return used + extra + node_files.reserved() < settings.current().marks(limit)[mark]


def wait_until(
    ok: Callable[[], bool],
    max_hold_s: float,
    on_hold: Callable[[], None] = lambda: None,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> float:
    """The gate's one wait loop: until `ok()` or `max_hold_s`, with backoff (0.02 s doubling
    to 0.25 s: a check is a few small file reads, and a held task should start soon after
    its memory fits); `on_hold()` once before the first pause. Seconds waited."""
    clock = clock or _clock
    start = clock()
    delay = 0.02
    held = False
    while not ok() and clock() - start < max_hold_s:
        if not held:
            held = True
            on_hold()
        (sleep or _sleep)(delay)
        delay = min(0.25, delay * 2)
    return clock() - start


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

    Fits: under the high mark when `room` is a complete learned peak (a sound estimate,
    and the high mark is still below the kill threshold), else under the low mark (a
    killed attempt's memory or an incomplete peak: lower bounds) until the function's
    peak, re-read while waiting, is complete and covers it.

    Check and reserve happen under one lock, so tasks starting together do not take the
    same room. `strict` (a retry after a raydbg kill): only room, or `max_hold_s`, lets it
    go. Otherwise (a function learned to be big) it also goes when no other admitted task
    holds a reservation, no other task of `function_id` runs here (one that will end and
    free its memory) and the node is below the high mark: waiting would then free nothing."""

    need = [room]
    sound = [learned]

    def now() -> bool:
        # A peak learned while this task waits (its function's running tasks still grow)
        # raises what it waits for; once that peak is complete and covers the need, the
        # task waits under the high mark, as a later start would (kept at the low mark, it
        # held its CPU while later starts took the room: `waves` ran 2 at a time, not 3).
        peak, complete = _peak(function_id)
        need[0] = max(need[0], peak)
        sound[0] = sound[0] or (complete and peak >= need[0])
        with node_files.admission_lock():
            used, limit = (read or node_memory)()
            low, high = settings.current().marks(limit)
            have = node_files.anon(os.getpid()) or 0
            pending = node_files.reservations()
            mark = high if sound[0] else low
            room_now = used + max(0, need[0] - have) + sum(pending) < mark
            alone = not strict and not pending and used < high and not siblings(function_id)
            if room_now or alone:
                _reserve(need[0])
            return room_now or alone

    waited = wait_until(now, max_hold_s, on_hold)
    if not _reserving:  # held as long as any task may be: let in without room
        _reserve(need[0])
    return waited


def siblings(function_id: str) -> int:
    """Other workers of this machine running a task of `function_id` now (not held at its
    start): their memory comes back when they return. Two small reads per worker (record,
    title); only on the admission path of big functions."""
    if not function_id:
        return 0
    from raydbg.memory.worker_tasks import ray_title

    d = node_files.run_dir()
    try:
        pids = [int(n) for n in os.listdir(d) if n.isdigit() and int(n) != os.getpid()]
    except OSError:
        return 0
    n = 0
    for pid, r in node_files.read_running(pids, d).items():
        if r.get("fn") != function_id or r.get("held"):
            continue
        if node_files.matches_title(str(r.get("name", "")), ray_title(pid)):
            n += 1
    return n


def _reserve(room: int) -> None:
    global _reserving
    node_files.reserve(room)
    _reserving = True


def release() -> None:
    """The task returned: its room is no longer reserved."""
    global _reserving
    if _reserving:
        _reserving = False
        node_files.release()


# --- the gate at a task's start -----------------------------------------------------


_statics: dict[tuple[str, str, str], str] = {}  # (name, job, function id) -> encoded fields


def _static(name: str, job_id: str, function_id: str) -> str:
    k = (name, job_id, function_id)
    got = _statics.get(k)
    if got is None:
        if len(_statics) > 1000:  # task names made per call (options(name=f"...{i}"))
            _statics.clear()
        got = _statics[k] = node_files.static_fields(name, job_id, function_id)
    return got


def _peak(function_id: str) -> tuple[int, bool]:
    """(learned peak, complete?) of the function on this node; (0, False): not a big one."""
    if _peaks is None:
        return 0, False
    peak = _peaks.get(function_id)
    return peak, peak > 0 and _peaks.is_complete(function_id)


# Until the node's monitor has made its flag, it counts as down this long between looks
# (a look costs a busy worker more than the rest of the gate). Once made, the flag is
# mapped and each start reads its first byte.
FLAG_RECHECK_S = 0.02
_flag_down_until = 0.0  # time.monotonic() until which the missing flag counts as down
_flag_view: Any = None  # the flag, mapped (node_files.map_flag)
# A mapped flag is checked to still be the node's file this often: a run dir removed and
# made again would leave the map on a file the monitor no longer writes (never up).
FLAG_REMAP_S = 1.0
_flag_inode = 0
_flag_remap_at = 0.0  # time.monotonic() of the next such check
# How long the quick path may go on from one full check: the record's start stays that
# check's (worker_tasks.merge_local allows 0.5 s); a full check every 20 ms cost a busy worker
# ~6 us a task, spread over the tasks (measured).
TICKET_S = 0.1


def under_pressure() -> str:
    """Why fresh task starts wait now: "memory" (the node is above the high mark),
    "trend" (the monitor sees it heading there), or "". While the flag is down: one byte
    read from its map, or, until the monitor made it, at most one look per FLAG_RECHECK_S."""
    global _flag_down_until, _flag_view, _flag_inode, _flag_remap_at
    if _flag is not None:
        now = _clock()
        if _flag_view is not None and now >= _flag_remap_at:
            _flag_remap_at = now + FLAG_REMAP_S
            if node_files.inode(_flag) != _flag_inode:
                _flag_view = None
        if _flag_view is None:
            if now < _flag_down_until:
                return ""
            mapped = node_files.map_flag(_flag)
            if mapped is None:
                _flag_down_until = now + FLAG_RECHECK_S
                return ""
            _flag_view, _flag_inode = mapped
            _flag_remap_at = now + FLAG_REMAP_S
        reason = node_files.flag_reason(_flag) if _flag_view[0] else ""  # "": down or stale
        if not reason:
            return ""
        if reason == "trend":
            return "trend"
    return "" if fits(0, mark=HIGH) else "memory"


def hold(pressure: str, max_hold_s: float, on_hold: Callable[[], None]) -> float:
    """Wait out `pressure` (under_pressure()); seconds waited."""
    if pressure == "trend" and _flag is not None:
        # The monitor drops the flag once growth no longer heads past the high mark.
        flag = _flag
        return wait_until(lambda: not node_files.flag_up(flag), max_hold_s, on_hold)
    return wait_until(lambda: fits(0), max_hold_s, on_hold)


# What before_task hands the wrapper for the tasks that follow (see before_task).
Quick = tuple[float, Any, Any]
_NO_FLAG = bytes(1)  # a ticket's flag where the monitor has made none yet: down


def before_task(tid: str, attempt: int, name: str = "", function_id: str = "") -> Quick | None:
    """The gate itself, for attempt `attempt` of task `tid` (hex) named `name` (the process
    title's: options(name=...) and Ray Data's operator names differ from the function's);
    never raises (a broken gate must not break the task).

    In the common case (a first attempt of a function not learned to be big, the pressure
    flag seen down) it returns (until, field, flag): until that time.time(), first
    attempts of the same function and name may skip this and only copy their task id into
    their record (`field[:] = task id, hex, ASCII`), while `flag[0]` is 0 (the flag down).
    Each step before a task costs a busy worker 1-2 us (cold: measured), so that quick path
    is a few steps in the wrapper itself (_ray_internals.gate_task_functions)."""
    s = settings.current()
    if s.monitor == "off":
        return None
    release()  # an earlier task that ended without after_task (never seen; cheap)
    try:
        record = node_files.record()
        static = _static(name, tid[-8:], function_id) if tid else ""
        if attempt == 0 and not under_pressure() and not _peak(function_id)[0]:
            if not tid:
                return None
            # The ticket runs from the start written: the quick path's record is never
            # more than TICKET_S older than its task.
            now = _wall()
            record.write_static(tid, 0, static, start=now)
            if len(tid) != node_files.TASK_ID_LEN:
                return None
            if _flag_view is not None:
                return now + TICKET_S, record.id_field(), _flag_view
            calm_s = _flag_down_until - _clock()
            if calm_s <= 0:
                return None
            return now + calm_s, record.id_field(), _NO_FLAG
        held = [False]

        def note(now_held: bool) -> None:
            # Tell the node's monitor what runs here now (GCS learns it ~1 s later), and
            # whether it is held here: a held task holds nothing worth a kill.
            held[0] = now_held
            if tid:
                record.write_static(tid, attempt, static, now_held)

        note(False)
        # The monitor's record of the kill this attempt follows, if any (budgets.py).
        killed = budgets.killed_record(tid) if attempt > 0 and tid else None
        waited, why = 0.0, "for memory"
        if killed is not None:
            peak, complete = _peak(function_id)
            room = max(int(killed.get("memory", 0)), peak)
            learned = peak >= room and complete
            # One line in the task's log naming the event that explains the last kill.
            print(
                f"raydbg: attempt {attempt} of this task follows a raydbg memory-monitor kill "
                f"(event {killed.get('event')}); waiting until {room >> 20} MiB fit under the "
                f"{'high' if learned else 'low'} mark of node memory",
                file=sys.stderr,
                flush=True,
            )
            waited = admit(
                room, True, s.max_hold_s, lambda: note(True),
                function_id=function_id, learned=learned,
            )  # fmt: skip
        else:
            pressure = under_pressure()
            if pressure:
                waited = hold(pressure, s.max_hold_s, lambda: note(True))
                if pressure == "trend":
                    why = "while node memory grew toward its limit"
            # Looked up after the hold: the growth it waited out may have taught it.
            peak, complete = _peak(function_id)
            if peak:
                waited += admit(
                    peak, False, max(0.0, s.max_hold_s - waited), lambda: note(True),
                    function_id=function_id, learned=complete,
                )  # fmt: skip
                why = f"until the {peak >> 20} MiB its function's tasks reach on this node fit"
            elif not pressure:
                return None
        if held[0]:
            note(False)
        if waited > 0.05:
            print(f"raydbg: task start held {waited:.1f}s {why}", file=sys.stderr, flush=True)
    except Exception as e:
        log.debug("raydbg memory gate skipped: %s", e)
    return None


def after_task() -> None:
    release()


# --- set-up -------------------------------------------------------------------------


def install() -> bool:
    """Gate this worker's task functions (idempotent); False if Ray lacks the hook point."""
    from raydbg import _ray_internals

    return _ray_internals.gate_task_functions(before_task, after_task)


def worker_setup() -> None:
    """What raydbg's worker setup hook calls: budgets for nested submissions + the start gate."""
    global _flag, _peaks
    from raydbg.memory.worker_tasks import node_id_of_self

    budgets.install_submit_hook()
    node_id = node_id_of_self()
    _flag = str(node_files.flag_path(node_id)) if node_id else None
    learn = settings.current().learn
    _peaks = PeakTable(str(peaks_path(node_id))) if node_id and learn else None
    install()


def driver_setup() -> None:
    """What raydbg's driver-side activation calls: record budgets of submitted tasks."""
    budgets.install_submit_hook()
