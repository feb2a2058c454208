"""Worker side: hold a task attempt at its start while the node is short of memory.

Why: a kill from outside Ray spends the task's `max_retries`, and Ray starts the next
attempt at once; without a pause the monitor kills the same growing task again and
again until it fails for good. So, at the start of each normal task:
  * an attempt that follows a raydbg kill (KV `killed/...`, written by the monitor)
    waits until the memory its killed attempt held (or its function's learned peak, if
    larger) fits again: it would otherwise grow back and be killed again;
  * a task of a function whose tasks were seen to grow big on this node (learn.py)
    waits until that peak fits: the second wave of such tasks needs no kill;
  * any other attempt waits while the node is above the high mark (threshold - margin/2)
    or, says the monitor, its growth will take it there within RAYDBG_MEMORY_HOLD_HORIZON_S
    (2 s): a task started now would be among the newest at the crossing, the first victims;
all with backoff, never longer than RAYDBG_MEMORY_MAX_HOLD_S (60 s). When a held task
has room, and what it reserves until it returns, is admission.py's decision. While
held, the task's local record says so and the monitor leaves it alone.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raydbg.memory import admission, local
from raydbg.memory.learn import PeakTable, peaks_path

log = logging.getLogger("raydbg.memory")
_MARK = "__raydbg_gate__"
_flag: str | Path | None = None  # this node's pressure flag; None: unknown node, always measure
_peaks: PeakTable | None = None  # what big functions' tasks reach on this node (learn.py)


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


def under_pressure() -> str:
    """Why fresh task starts wait now: "memory" (the node is above the high mark),
    "trend" (the monitor sees it heading there), or "". One stat when the flag is down."""
    if _flag is not None:
        if not local.flag_up(_flag):
            return ""
        if local.flag_reason(_flag) == "trend":
            return "trend"
    return "" if admission.fits(admission.marks()[1], 0) else "memory"


def hold(pressure: str, max_hold_s: float) -> float:
    """Wait out `pressure` (under_pressure()); seconds waited."""
    if pressure == "trend" and _flag is not None:
        # The monitor drops the flag once growth no longer heads past the high mark.
        flag = _flag
        return admission.wait_until(lambda: not local.flag_up(flag), max_hold_s)
    low = admission.marks()[0]
    return admission.wait_until(lambda: admission.fits(low, 0), max_hold_s)


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
        max_hold = admission.env_float("RAYDBG_MEMORY_MAX_HOLD_S", 60.0)
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
                f"{admission.marks()[1 if learned else 0]:.0%} of node memory",
                file=sys.stderr,
                flush=True,
            )
            waited = admission.admit(room, True, max_hold, lambda: note(True), learned=learned)
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
                waited += admission.admit(
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
                admission.release()

        setattr(run_gen, _MARK, True)
        return run_gen

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        before_task(name, function_id)
        try:
            return fn(*args, **kwargs)
        finally:
            admission.release()

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
