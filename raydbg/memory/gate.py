"""Worker side: hold a task attempt at its start while the node is short of memory.

Why: a kill from outside Ray spends the task's `max_retries`, and Ray starts the next
attempt at once; without a pause the monitor kills the same growing task again and
again until it fails for good. So, at the start of each normal task:
  * an attempt that follows a raydbg kill (KV `killed/...`, written by the monitor)
    waits until the memory its killed attempt held fits under the low mark
    (threshold - margin) again: it would otherwise grow back and be killed again;
  * a task of a function whose tasks were seen to grow big on this node (learn.py)
    waits until that peak fits: the second wave of such tasks needs no kill;
  * any other attempt waits while the node is above the high mark (threshold - margin/2)
    or, says the monitor, its growth will take it there within RAYDBG_MEMORY_HOLD_HORIZON_S
    (2 s): a task started now would be among the newest at the crossing, the first victims;
all with backoff, never longer than RAYDBG_MEMORY_MAX_HOLD_S (60 s). An admitted task
that was held for its peak reserves it until it returns (local.py), so tasks starting
together do not count the same free room twice. While held, the task's local record
says so and the monitor leaves it alone.

Cost: this runs before every task, so the common case is one `stat` of the node's
pressure flag (the monitor keeps it while the node is above the high mark), one dict
lookup of the function's learned peak and one `pwrite` of the local record; memory is
read only while the flag is up or for a function learned to be big.

`install_worker_gate()` is called by raydbg's worker setup hook. It wraps what
`FunctionActorManager.get_execution_info` returns for task functions (not actor methods,
not async): plain and generator functions; everything else passes through untouched.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raydbg.memory import local
from raydbg.memory.learn import PeakTable, peaks_path
from raydbg.memory.measure import NodeMeasurer

log = logging.getLogger("raydbg.memory")
_MARK = "__raydbg_gate__"
_measurer: NodeMeasurer | None = None
_flag: str | Path | None = None  # this node's pressure flag; None: unknown node, always measure
_peaks: PeakTable | None = None  # what big functions' tasks reach on this node (learn.py)
_sleep = time.sleep  # admit()'s pause between checks (tests replace it)


def _f(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def marks() -> tuple[float, float]:
    """(low, high) fractions of the node limit."""
    thr = _f("RAYDBG_MEMORY_THRESHOLD", 0.9)
    margin = _f("RAYDBG_MEMORY_MARGIN", 0.05)
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


def _current() -> tuple[str | None, int]:
    import ray

    w: Any = ray._private.worker.global_worker
    tid = w.current_task_id.hex()
    try:
        attempt = int(w.core_worker.get_current_task_attempt_number())
    except Exception:
        attempt = 0
    return tid, attempt


def _task_name(default: str) -> str:
    """The running task's name (the process title's, `ray::<name>`; options(name=...) and
    Ray Data's operator names differ from the function's), ~0.2 us."""
    try:
        import ray

        return str(ray._private.worker.global_worker.current_task_name or default)
    except Exception:
        return default


def _monitor_off() -> bool:
    return os.environ.get("RAYDBG_MEMORY_MONITOR", "on").strip().lower() in ("0", "off", "false")


_statics: dict[tuple[str, str, str], str] = {}  # (name, job, function id) -> encoded fields


def _static(name: str, job_id: str, function_id: str) -> str:
    k = (name, job_id, function_id)
    got = _statics.get(k)
    if got is None:
        if len(_statics) > 1000:  # task names made per call (options(name=f"...{i}"))
            _statics.clear()
        got = _statics[k] = local.static_fields(name, job_id, function_id)
    return got


def _peak(function_id: str) -> int:
    return _peaks.get(function_id) if _peaks is not None else 0


def _peak_complete(function_id: str) -> bool:
    return _peaks is not None and _peaks.is_complete(function_id)


_reserving = False  # this worker's running attempt holds a reservation (local.py)


def _reserve(room: int) -> None:
    """Admitted after a kill: keep `room` counted for other held retries until it returns."""
    global _reserving
    local.reserve(room)
    _reserving = True


def _release() -> None:
    global _reserving
    if _reserving:
        _reserving = False
        local.release()


def under_pressure() -> str:
    """Why fresh task starts wait now: "memory" (the node is above the high mark),
    "trend" (the monitor sees it heading there), or "". One stat when the flag is down."""
    if _flag is not None:
        if not local.flag_up(_flag):
            return ""
        if local.flag_reason(_flag) == "trend":
            return "trend"
    return "" if fits(marks()[1], 0) else "memory"


def hold(pressure: str, max_hold_s: float) -> float:
    """Wait out `pressure` (under_pressure()); seconds waited."""
    if pressure == "trend" and _flag is not None:
        # The monitor drops the flag once growth no longer heads past the high mark.
        flag = _flag
        return wait_until(lambda: not local.flag_up(flag), max_hold_s)
    low = marks()[0]
    return wait_until(lambda: fits(low, 0), max_hold_s)


def before_task(name: str = "", function_id: str = "") -> None:
    """The gate itself; never raises (a broken gate must not break the task)."""
    if _monitor_off():
        return
    try:
        tid, attempt = _current()

        record = local.record()
        static = _static(_task_name(name), tid[-8:], function_id) if tid else ""

        held = [False]

        def note(now_held: bool) -> None:
            # Tell the node's monitor what runs here now (GCS learns it ~1 s later), and
            # whether it is held here: a held task holds nothing worth a kill.
            held[0] = now_held
            if tid:
                record.write_static(tid, attempt, static, now_held)

        note(False)
        killed: dict[str, Any] | None = None
        if attempt > 0 and tid:
            from raydbg.memory import budget

            got = budget._multi_get([budget.killed_key(tid)])
            if got:
                import json

                killed = json.loads(next(iter(got.values())))
        max_hold = _f("RAYDBG_MEMORY_MAX_HOLD_S", 60.0)
        waited = 0.0
        why = "for memory"
        if killed is not None:
            peak = _peak(function_id)
            room = max(int(killed.get("memory", 0)), peak)
            learned = peak >= room and _peak_complete(function_id)
            # One line in the task's log naming the event that explains the last kill.
            print(
                f"raydbg: attempt {attempt} of this task follows a raydbg memory-monitor kill "
                f"(event {killed.get('event')}); waiting until {room >> 20} MiB fit under "
                f"{marks()[1 if learned else 0]:.0%} of node memory",
                file=sys.stderr,
                flush=True,
            )
            waited = admit(room, True, max_hold, lambda: note(True), learned=learned)
        else:
            pressure = under_pressure()
            if pressure:
                note(True)
                waited = hold(pressure, max_hold)
                if pressure == "trend":
                    why = "while node memory grew toward its limit"
            # Looked up after the hold: the growth it waited out may have taught it.
            peak = _peak(function_id)
            if peak:
                # Its function's tasks were seen to reach `peak` on this node (learn.py).
                waited += admit(
                    peak,
                    False,
                    max(0.0, max_hold - waited),
                    lambda: note(True),
                    function_id=function_id,
                    learned=_peak_complete(function_id),
                )
                why = f"until the {peak >> 20} MiB its function's tasks reach on this node fit"
            elif not pressure:
                return
        if held[0]:
            note(False)
        if waited > 0.05:
            print(f"raydbg: task start held {waited:.1f}s {why}", file=sys.stderr, flush=True)
    except Exception as e:
        log.debug("raydbg memory gate skipped: %s", e)


def _gated(fn: Callable[..., Any], name: str, function_id: str = "") -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):
        # A generator task (Ray Data's map tasks, num_returns="streaming"): Ray iterates
        # what the call returns, so the gate runs before the first item and the
        # reservation lasts until the generator is done.
        @functools.wraps(fn)
        def run_gen(*args: Any, **kwargs: Any) -> Any:
            before_task(name, function_id)
            try:
                yield from fn(*args, **kwargs)
            finally:
                _release()

        setattr(run_gen, _MARK, True)
        return run_gen

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        before_task(name, function_id)
        try:
            return fn(*args, **kwargs)
        finally:
            _release()

    setattr(run, _MARK, True)
    return run


def _plain(fn: Any) -> bool:
    """A function the gate wraps: sync, a plain function or a generator function (async
    ones run on an event loop Ray owns; their budget stays unknown)."""
    return (
        callable(fn)
        and not getattr(fn, _MARK, False)
        and not inspect.iscoroutinefunction(fn)
        and not inspect.isasyncgenfunction(fn)
    )


def _gated_info(info: Any, descriptor: Any, make: Any) -> Any:
    """`info` with its function gated, or `info` itself for what the gate leaves alone."""
    try:
        if descriptor.is_actor_method() or not _plain(info.function):
            return info
        fid = descriptor.function_id.hex()  # joins the function's budget (budget.py)
    except Exception:
        return info
    fn = _gated(info.function, str(info.function_name), fid)
    return make(fn, info.function_name, info.max_calls)


def install_worker_gate() -> bool:
    """Patch this worker's function lookup; idempotent; False if Ray lacks the hook point."""
    try:
        from ray._private.function_manager import FunctionActorManager, FunctionExecutionInfo
    except Exception:
        return False
    orig = FunctionActorManager.get_execution_info
    if getattr(orig, _MARK, False):
        return True

    @functools.wraps(orig)
    def get_execution_info(self: Any, job_id: Any, descriptor: Any) -> Any:
        info = orig(self, job_id, descriptor)
        # Called before every task: decide once per function, then one dict lookup.
        cache = self.__dict__.setdefault("_raydbg_gated", {})
        k = (id(info.function), descriptor.is_actor_method())
        got = cache.get(k)
        if got is None:
            got = cache[k] = _gated_info(info, descriptor, FunctionExecutionInfo)
        return got

    setattr(get_execution_info, _MARK, True)
    FunctionActorManager.get_execution_info = get_execution_info  # type: ignore[method-assign,assignment]
    return True


def worker_setup() -> None:
    """What raydbg's worker setup hook calls: budgets for nested submissions + the start gate."""
    global _flag, _peaks
    from raydbg.memory import budget
    from raydbg.memory.whois import node_id_of_self

    budget.install_submit_hook()
    node_id = node_id_of_self()
    _flag = str(local.flag_path(node_id)) if node_id else None
    learn = os.environ.get("RAYDBG_MEMORY_LEARN", "1").strip().lower() not in ("0", "off")
    _peaks = PeakTable(str(peaks_path(node_id))) if node_id and learn else None
    install_worker_gate()


def driver_setup() -> None:
    """What raydbg's driver-side activation calls: record budgets of submitted tasks."""
    from raydbg.memory import budget

    budget.install_submit_hook()
