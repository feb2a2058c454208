"""torch's DataLoader iteration, timed (rank side): the time a rank waits in it is its wait for data.

Written for torch 2.13.x. `torch.utils.data.dataloader._BaseDataLoaderIter.__next__` is the
one path of every DataLoader iterator, single- and multi-process (`_next_data` is what the
two subclasses differ in); it returns when the next batch is ready: loaded and collated in
this process, or handed over by a loader worker. What the caller does between two `next()`s
is its compute.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

LOADER_MODULE = "torch.utils.data.dataloader"


def wrap_loader_next(module: Any, on_wait: Callable[[float], None]) -> bool:
    """Make every DataLoader iterator of `module` report how long each `next()` took; False when
    this torch has no such path (or it is wrapped already)."""
    cls = getattr(module, "_BaseDataLoaderIter", None)
    original = getattr(cls, "__next__", None)
    if cls is None or original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self)
        finally:
            on_wait(time.perf_counter() - start)

    __next__._raydbg = True  # type: ignore[attr-defined]
    cls.__next__ = __next__
    return True
