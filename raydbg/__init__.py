"""raydbg: debug and observe distributed training on Ray."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from raydbg.version import __version__

if TYPE_CHECKING:
    from raydbg.activation import runtime_env

__all__ = ["runtime_env", "progress", "data_wait", "breakpoint", "__version__"]


def progress(step: int | None = None) -> None:
    """Mark that this worker made progress (one small file write): hang detection watches it."""
    from raydbg.progress_records import beat

    beat(step)


@contextlib.contextmanager
def data_wait() -> Iterator[None]:
    """Time spent inside is this step's wait for data (`raydbg steps`, straggler events); Ray
    Data's batch iterators count by themselves in an activated job."""
    from raydbg.progress_records import waited_for_data

    start = time.perf_counter()
    try:
        yield
    finally:
        waited_for_data(time.perf_counter() - start)


def breakpoint(all_ranks: bool = False) -> None:  # noqa: A001  (mirrors the builtin on purpose)
    """Pause here for a raydbg client; `all_ranks=True` groups the Train ranks that reach this line."""
    from raydbg.worker.hook import breakpoint_here

    breakpoint_here(sys._getframe(1), all_ranks)


def __getattr__(name: str) -> Any:
    # `raydbg.runtime_env` loads activation when asked: the CLI (and any process that only
    # imports a part of raydbg) does not pay for it.
    if name == "runtime_env":
        from raydbg.activation import runtime_env

        return runtime_env
    raise AttributeError(f"module 'raydbg' has no attribute {name!r}")
