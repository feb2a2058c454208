"""What this worker runs: the functions its tasks were given, its actors' classes, a Train run's loop.

Written for Ray 2.51.x to 2.60.x (read in 2.60.0). Relies on `ray._private.worker.global_worker`'s
`function_actor_manager._function_execution_info` (function id -> FunctionExecutionInfo, whose
`function` is the task's function, or for an actor method Ray's executor closure with the method
as its `method` attribute) and `actors` (actor id -> the instance); and on Ray Train V2 running
the training function in a thread named `TrainingThread(...)` (`ThreadRunner.run`) whose target
reaches the user's function through Ray's closures and `functools.wraps` (`construct_train_func`).
Reads only; nothing is imported (no Ray loaded: no task functions).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

TRAINING_THREAD_PREFIX = "TrainingThread("


def signature() -> tuple[int, int, tuple[int, ...]]:
    """Changes when what `objects()` returns may have: how many functions and actors Ray has
    loaded here, and which training threads run (cheap: a few len() and one thread list)."""
    manager, actors = _tables()
    return (len(manager), len(actors), tuple(t.ident or 0 for t in _training_threads()))


def objects() -> list[Any]:
    """The functions and classes Ray hands this worker's work to (wrappers included:
    raydbg/user_code.entry_points looks through them)."""
    manager, actors = _tables()
    out: list[Any] = [getattr(info, "function", None) for info in list(manager.values())]
    out += [type(actor) for actor in list(actors.values())]
    out += [getattr(t, "_target", None) for t in _training_threads()]  # deleted once the target returns
    return [o for o in out if o is not None]


def _tables() -> tuple[dict[Any, Any], dict[Any, Any]]:
    ray = sys.modules.get("ray")
    try:
        worker = ray._private.worker.global_worker  # type: ignore[union-attr]
        manager = getattr(worker.function_actor_manager, "_function_execution_info", None)
        actors = getattr(worker, "actors", None)
    except Exception:
        return {}, {}
    return (manager if isinstance(manager, dict) else {}), (actors if isinstance(actors, dict) else {})


def _training_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(TRAINING_THREAD_PREFIX)]
