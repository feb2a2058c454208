"""Retry budgets recorded where tasks are submitted, since Ray's state API does not expose them.

Every side: the submit hook runs in drivers and workers, the monitor and the start gate read,
the head's agent prunes ended jobs.

`install_submit_hook()` has Ray call `after_submit` once each task submitted from
this process is submitted (the hook point is Ray's: _ray_internals.wrap_task_submit).
It then knows the effective `max_retries` and the task id (the returned ObjectRef's
`task_id()`).

Most calls use their function's default, so the GCS internal KV (namespace
"raydbg") holds that default once per job and function, `fn/<job_hex>/<function_id>`,
and a per-task record `budget/<job_hex>/<task_hex>` only for a call whose
`max_retries` differs from it. The start gate writes each running task's function
id in its local record (node_files.py), so the monitor can join the two. A per-task
record for every call cost a GCS write per task (measured: it halved no-op task
throughput together with the old gate).

A record not written yet (or a job without the hook) reads as unknown, which the
policy treats as non-retriable: sound, never optimistic. So a call that *lowers*
the budget is written before `.remote()` returns; one that raises it goes through
a batching background thread (until it lands, the task looks less retriable than
it is).

Actors need no record: GCS's actor table carries `max_restarts`/`num_restarts`.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from typing import Any

from raydbg import _ray_internals, registry
from raydbg.config import NAMESPACE

log = logging.getLogger("raydbg.memory")

PREFIX = "budget/"
FUNCTION = "fn/"  # fn/<job_hex>/<function_id_hex> -> max_retries of calls that set none
KILLED = "killed/"  # killed/<job_hex>/<task_hex> -> raydbg kills of that task (burn-out guard)
_NS = NAMESPACE.encode()
_FLUSH_S = 0.02
_TIMEOUT = 5.0

_queue: queue.Queue[tuple[str, bytes]] = queue.Queue()
_flusher: threading.Thread | None = None
_lock = threading.Lock()
# (job, function id) -> the default the KV holds for it (this process's, or an earlier writer's)
_function_defaults: dict[tuple[str, str], int] = {}


def key(task_id_hex: str) -> str:
    # A TaskID ends with its JobID (4 bytes): group by job so a finished job is one prefix delete.
    return f"{PREFIX}{task_id_hex[-8:]}/{task_id_hex}"


def function_key(job_hex: str, function_id_hex: str) -> str:
    return f"{FUNCTION}{job_hex}/{function_id_hex}"


def killed_key(task_id_hex: str) -> str:
    return f"{KILLED}{task_id_hex[-8:]}/{task_id_hex}"


def use_client(client: Any) -> None:
    """Read/write through this GcsClient (a process that never called ray.init): the
    registry's, so raydbg has one; what was memoized from another client is dropped."""
    registry.use_client(client)
    _function_defaults.clear()


def effective_max_retries(task_options: dict[str, Any]) -> int:
    """What Ray will use: the call's option, else RAY_TASK_MAX_RETRIES, else Ray's default."""
    value = task_options.get("max_retries")
    if value is not None:
        return int(value)
    return int(os.environ.get("RAY_TASK_MAX_RETRIES", _ray_internals.default_task_max_retries()))


def task_id_of(result: Any) -> str | None:
    """The task id behind what `.remote()` returned (ref, list of refs, generator)."""
    if isinstance(result, list):
        result = result[0] if result else None
    completed = getattr(result, "completed", None)  # ObjectRefGenerator: its task's ref
    ref = completed() if callable(completed) else result
    tid = getattr(ref, "task_id", None)
    if tid is None:
        return None  # num_returns=0, client mode: unknown budget
    try:
        return str(tid().hex())
    except Exception:
        return None


def _current_task_hex() -> str | None:
    return _ray_internals.current_task_id_hex()


def record(task_id_hex: str, max_retries: int, name: str, parent: str | None) -> None:
    """Queue one per-task budget record for the background writer."""
    _queue.put((key(task_id_hex), _value(max_retries, name, parent)))
    _ensure_flusher()


def _value(max_retries: int, name: str, parent: str | None) -> bytes:
    value = {"max_retries": max_retries, "name": name, "parent": parent, "ts": time.time()}
    return json.dumps(value).encode()


def function_default(job_hex: str, function_id_hex: str, mine: int) -> int:
    """The default recorded for this job's function: this process's `mine` unless another
    process recorded one first (first writer wins; later calls compare against it)."""
    cached = _function_defaults.get((job_hex, function_id_hex))
    if cached is not None:
        return cached
    k = function_key(job_hex, function_id_hex).encode()
    gcs = registry.client()
    if gcs.internal_kv_put(k, str(mine).encode(), False, _NS, timeout=_TIMEOUT):
        held = mine
    else:
        raw = gcs.internal_kv_get(k, _NS, timeout=_TIMEOUT)
        held = int(raw) if raw else mine
    _function_defaults[(job_hex, function_id_hex)] = held
    return held


def record_call(
    task_id_hex: str,
    function_id_hex: str,
    max_retries: int,
    function_max_retries: int,
    name: str,
) -> bool:
    """What the submit hook does per call: nothing beyond the function's default, unless
    this call's budget differs from it (then with the caller, for the policy's groups).
    True when it is the default: nothing recorded for this call."""
    default = function_default(task_id_hex[-8:], function_id_hex, function_max_retries)
    if max_retries == default:
        return True
    parent = _current_task_hex()
    if 0 <= max_retries < default or default < 0 <= max_retries:
        # Fewer retries than the default says: must be readable before the task can grow.
        registry.client().internal_kv_put(
            key(task_id_hex).encode(), _value(max_retries, name, parent), True, _NS,
            timeout=_TIMEOUT,
        )  # fmt: skip
    else:
        record(task_id_hex, max_retries, name, parent)
    return False


def _ensure_flusher() -> None:
    global _flusher
    if _flusher is not None and _flusher.is_alive():
        return
    with _lock:
        if _flusher is None or not _flusher.is_alive():
            _flusher = threading.Thread(target=_flush_loop, name="raydbg-budget", daemon=True)
            _flusher.start()


def _flush_loop() -> None:
    while True:
        item = _queue.get()
        batch = [item]
        time.sleep(_FLUSH_S)  # let a burst of submissions gather
        while True:
            try:
                batch.append(_queue.get_nowait())
            except queue.Empty:
                break
        try:
            gcs = registry.client()
            for k, v in batch:
                gcs.internal_kv_put(k.encode(), v, True, _NS, timeout=_TIMEOUT)
        except Exception as e:  # never break submission; those tasks read as unknown
            log.debug("raydbg: could not write %d budget records: %s", len(batch), e)
        finally:
            for _ in batch:
                _queue.task_done()


def flush(timeout: float = 5.0) -> bool:
    """Wait until queued records are written (tests, shutdown); False on timeout."""
    deadline = time.monotonic() + timeout
    while _queue.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.005)
    return not _queue.unfinished_tasks


def after_submit(
    result: Any, function_id: str, function_options: dict[str, Any],
    call_options: dict[str, Any], function_name: str,
) -> bool:
    """What the submit hook does for one `.remote()` (`call_options`: the call's task
    options merged over the function's); never raises. True when the call's budget is
    its function's recorded default, so later calls with the same `max_retries` option
    need no look (RAY_TASK_MAX_RETRIES, which an unset option means, is read once)."""
    try:
        tid = task_id_of(result)
        if tid is not None:
            name = call_options.get("name") or function_name
            default = effective_max_retries(function_options)
            return record_call(tid, function_id, effective_max_retries(call_options), default, str(name))
    except Exception as e:
        log.debug("raydbg: budget not recorded: %s", e)
    return False


def install_submit_hook() -> bool:
    """Record every task submitted from this process. Idempotent; False if Ray lacks the hook point."""
    return _ray_internals.wrap_task_submit(after_submit)


def uninstall_submit_hook() -> None:
    _ray_internals.unwrap_task_submit()


def _multi_get(keys: list[str]) -> dict[str, bytes]:
    return registry.multi_get(keys, timeout=_TIMEOUT)


def lookup(
    task_ids: list[str], functions: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Budgets of these tasks (hex ids): the task's own record, else its function's
    default (`functions`: task id -> function id hex, from the local records; several
    space-separated where the worker could not tell which wrapper of one function the
    task came from: the smallest of their defaults, unknown while one is);
    tasks with neither are unknown and left out."""
    functions = functions or {}
    fn_keys = {t: [function_key(t[-8:], f) for f in functions[t].split()] for t in task_ids if functions.get(t)}
    got = _multi_get([key(t) for t in task_ids] + sorted({k for ks in fn_keys.values() for k in ks}))
    out: dict[str, dict[str, Any]] = {}
    for t in task_ids:
        raw = got.get(key(t))
        if raw:
            try:
                out[t] = json.loads(raw)
                continue
            except ValueError:
                pass
        raws = [got.get(k) for k in fn_keys.get(t, [])]
        if raws and all(raws):
            try:
                defaults = [int(r) for r in raws if r]
            except ValueError:
                continue
            limited = [d for d in defaults if d >= 0]  # -1: no limit
            out[t] = {"max_retries": min(limited) if limited else -1, "parent": None, "name": ""}
    return out


def killed_record(task_id_hex: str) -> dict[str, Any] | None:
    """The monitor's record of its last kill of this task (mark_killed), or None."""
    raw = _multi_get([killed_key(task_id_hex)]).get(killed_key(task_id_hex))
    try:
        got = json.loads(raw) if raw else None
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def killed_counts(task_ids: list[str]) -> dict[str, int]:
    got = _multi_get([killed_key(t) for t in task_ids])
    out: dict[str, int] = {}
    for t in task_ids:
        raw = got.get(killed_key(t))
        if raw:
            try:
                out[t] = int(json.loads(raw).get("kills", 0))
            except (ValueError, AttributeError):
                continue
    return out


def mark_killed(task_id_hex: str, kills: int, event_id: str, memory: int = 0) -> None:
    """The monitor notes a kill (and how big the victim was) so the next attempt can wait
    until that much fits again (see start_gate.py)."""
    value = {"kills": kills, "event": event_id, "memory": memory, "ts": time.time()}
    registry.client().internal_kv_put(
        killed_key(task_id_hex).encode(), json.dumps(value).encode(), True, _NS, timeout=_TIMEOUT
    )


def prune_job(job_id_hex: str) -> None:
    """Drop a finished job's records (prune_ended_jobs, from the head's agent)."""
    gcs = registry.client()
    for prefix in (PREFIX, FUNCTION, KILLED):
        gcs.internal_kv_del(f"{prefix}{job_id_hex}/".encode(), True, _NS, timeout=_TIMEOUT)


def prune_ended_jobs(ended: list[str], done: set[str]) -> list[str]:
    """prune_job for each job in `ended` (Ray's job table) not in `done` yet; adds them to
    `done` and returns them. The head's agent calls this with every pruning of events."""
    pruned = []
    for job in ended:
        if job not in done:
            prune_job(job)
            done.add(job)
            pruned.append(job)
    return pruned
