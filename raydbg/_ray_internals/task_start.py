"""The memory monitor's start gate hooked around every normal task a worker runs.

Written for Ray 2.51.x to 2.60.x (each name below read in 2.51.2, 2.55.1 and 2.60.0). Relies on `ray._private.worker.global_worker`'s
`record_task_log_start` / `record_task_log_end` (called by `execute_task` in _raylet.pyx),
`actors` and `core_worker` (`get_current_task_function_name`, `get_current_task_name`),
and on `ray._private.function_manager.FunctionActorManager.get_execution_info` with its
descriptor's `function_id`, `module_name`, `class_name`, `function_name` and
`is_actor_method()`.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

# --- The memory monitor and its start gate (raydbg/memory/) ----------------------------
# Per task, `execute_task` in _raylet.pyx calls `worker.record_task_log_start(task_id,
# attempt_number)` after the arguments are deserialized and the process title names the
# task (`ray::<name>`), just before the function runs; and `record_task_log_end(task_id,
# attempt_number)` in the `finally` after it (a streaming generator is iterated to its end
# in between). Both are Python methods of `ray._private.worker.Worker`, called on
# `global_worker`: hooking them there runs the gate around every task without a frame of
# ours in the task's stack. `FunctionActorManager.get_execution_info(job_id, descriptor)`
# is called once per function per worker; `descriptor.function_id` is the id the submit
# side keys budgets by, and `get_task_function_name()` (public) names the running one.


def _function_key(descriptor: Any) -> str:
    """What `ray.get_runtime_context().get_task_function_name()` says for this function: the
    descriptor's call string, module and the last part of the qualified name
    (`m.driver.<locals>.grow` -> `m.grow`, measured)."""
    cls = getattr(descriptor, "class_name", "") or ""
    return f"{descriptor.module_name}.{cls + '.' if cls else ''}{_default_task_name(descriptor)}"


def _default_task_name(descriptor: Any) -> str:
    """The name Ray gives a task of this function without options(name=...) (measured:
    the last part of the qualified name)."""
    return str(descriptor.function_name).rsplit(".", 1)[-1]


def gate_task_functions(
    before: Callable[[str, int, str, str], tuple[float, Any, Any] | None],
    after: Callable[[], None],
) -> bool:
    """Call `before(task id hex, attempt, task name, function id)` before every normal sync
    task (not actor methods, not async functions) of this worker, and `after()` once such a
    task ended (returned, raised, or its generator ran out); idempotent; False when this
    Ray lacks the hook points.

    When `before` returns (until, field, flag), first attempts of the same function and
    task name that start before `until` (time.time()) while `flag[0]` is 0 only do
    `field[:] = task_id.hex().encode()`.
    "The same function" is taken from the task's name alone where that name has named one
    function only: the name is one function's default name, or a name the full path saw on
    one function only (the function-name getter costs a busy worker ~11 us, the name's ~1,
    measured). A function newly loaded here sends its first task down the full path, which
    sees a custom name shared with another function; tasks of two functions sharing a
    custom name that no full path has seen yet can take the other's ticket (its record
    then names the other function) until the full path sees them.
    One Python function wrapped by `ray.remote` more than once (`ray.remote(f)` called
    again, Ray Data's map function once per dataset) has one function id per wrapper, and
    a task's own id cannot be told from what the core worker says: its tasks pass all the
    ids loaded here, space-separated (the monitor takes the smallest of their retry
    budgets), up to MAX_IDS of them. Two different functions under one function key (two
    nested `grow`s of one module) go ungated rather than mixed up.
    A worker that becomes an actor's (it never runs a normal task again) gets Ray's own
    start back: its calls cost nothing here."""
    import ray

    try:
        from ray._private.function_manager import FunctionActorManager
    except Exception:
        return False
    worker: Any = ray._private.worker.global_worker
    start = getattr(worker, "record_task_log_start", None)
    end = getattr(worker, "record_task_log_end", None)
    if start is None or end is None or getattr(start, "_raydbg", False):
        return start is not None and getattr(start, "_raydbg", False)
    # function key -> the function ids (space-separated) of the functions we gate; "" when
    # two different functions share a key, or past MAX_IDS wrappers of one: ungated.
    gated: dict[str, str] = {}
    code_of: dict[str, Any] = {}  # function key -> what its function runs (_code)
    # task name -> the one function key seen with it; "" once two were.
    named: dict[str, str] = {}
    # The ticket of the last full call (see `before`), the function key and task name it is
    # for, and whether the name alone stands for that function. `flag` starts up: no ticket.
    until, field, flag, key, name, alone = 0.0, None, b"\1", "", "", False

    def learn(names: dict[str, str], name: str, key: str) -> None:
        names[name] = key if names.get(name, key) == key else ""

    def gate(key: str, fid: str, code: Any) -> None:
        ids = gated.get(key)
        if ids is None:
            gated[key], code_of[key] = fid, code
        elif ids and fid not in ids.split():
            more = [*ids.split(), fid]
            # Another wrapper of the same function: its id joins; another function: ungated.
            gated[key] = " ".join(more) if code_of[key] == code and len(more) <= MAX_IDS else ""

    lookup = FunctionActorManager.get_execution_info
    if not getattr(lookup, "_raydbg", False):

        @functools.wraps(lookup)
        def get_execution_info(self: Any, job_id: Any, descriptor: Any) -> Any:
            nonlocal until
            info = lookup(self, job_id, descriptor)
            try:
                until = 0.0  # a function new here: its first task takes the full path
                if descriptor.is_actor_method():
                    _ungate(worker)
                else:
                    key = _function_key(descriptor)
                    learn(named, _default_task_name(descriptor), key)
                    fn = info.function
                    if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
                        gate(key, descriptor.function_id.hex(), _code(fn))
            except Exception:
                pass
            return info

        get_execution_info._raydbg = True  # type: ignore[attr-defined]
        FunctionActorManager.get_execution_info = get_execution_info  # type: ignore[method-assign,assignment]
    # This runs before every task, each time with a cold cache (every step and object it
    # touches costs 0.5-2 us then, measured): the core worker's getters are taken directly
    # (not through the runtime context's mode checks), and the quick path is a handful of
    # steps on closure variables.
    core = worker.core_worker
    function_name, task_name, actors, now = (
        core.get_current_task_function_name, core.get_current_task_name, worker.actors, time.time,
    )  # fmt: skip
    # Only a task that took the full path ends through raydbg: the others cost no frame.
    ends = [end]  # what the task's end called before (Ray's, or another tool's wrapper)

    def record_task_log_start(task_id: Any, attempt_number: int) -> None:
        try:  # never the reason a task fails
            if (
                not attempt_number and not flag[0] and task_name() == name and now() < until
                and (alone or function_name() == key)
            ):  # fmt: skip
                field[:] = task_id.hex().encode()  # type: ignore[index]
            else:
                full(task_id, attempt_number)
        except Exception:
            pass
        start(task_id, attempt_number)

    def full(task_id: Any, attempt_number: int) -> None:
        nonlocal until, field, flag, key, name, alone
        until = 0.0
        if not gated or actors:
            return
        task = task_name() or ""
        fn = function_name() or ""
        if task in named or len(named) < 1000:  # not names made per call, unbounded
            learn(named, task, fn)
        fid = gated.get(fn)
        if not fid:
            return
        if worker.record_task_log_end is not record_task_log_end:  # after() at its end
            ends[0] = worker.record_task_log_end
            worker.record_task_log_end = record_task_log_end
        ticket = before(task_id.hex(), int(attempt_number), task, fid)
        if ticket is not None:
            until, field, flag = ticket
            key, name, alone = fn, task, named.get(task) == fn

    def record_task_log_end(task_id: Any, attempt_number: int) -> None:
        worker.record_task_log_end = ends[0]
        ends[0](task_id, attempt_number)
        after()

    record_task_log_start._raydbg = True  # type: ignore[attr-defined]
    record_task_log_start._ray_start = start  # type: ignore[attr-defined]
    worker.record_task_log_start = record_task_log_start
    return True


# The most wrappers of one function whose tasks are still gated: each task's record carries
# all their ids, and the monitor reads each one's retry budget.
MAX_IDS = 8


def _code(fn: Any) -> Any:
    """What a loaded task function runs, the same for two wrappers of one function: its
    code (under wrappers such as Ray's tracing, which keep `__wrapped__`), else itself."""
    try:
        inner = inspect.unwrap(fn)
    except ValueError:
        inner = fn
    return getattr(inner, "__code__", None) or inner


def _ungate(worker: Any) -> None:
    """Ray's own task start again in this worker (it became an actor's)."""
    current = worker.record_task_log_start
    if getattr(current, "_raydbg", False):
        worker.record_task_log_start = current._ray_start
