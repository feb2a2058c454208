"""Ray Data's batch iteration: the time a Train rank waits in it is its wait for data.

`DataIterator._iter_batches` (private; 2.51-2.60) is the one path under `iter_batches`,
`iter_torch_batches`, `iter_rows` and the TF ones; it returns an iterable whose each
`next()` blocks until a batch is ready. What the caller does between two `next()`s is
its compute.

Written for Ray 2.51.x to 2.60.x (the same method in 2.51.2, 2.55.1 and 2.60.0).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

DATA_ITERATOR_MODULE = "ray.data.iterator"


class _Timed:
    """An iterable whose iterators report how long each `next()` of `inner`'s took."""

    def __init__(self, inner: Iterable[Any], on_wait: Callable[[float], None]) -> None:
        self.inner = inner
        self.on_wait = on_wait

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.inner)
        while True:
            start = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                self.on_wait(time.perf_counter() - start)
            yield item


def wrap_iter_batches(module: Any, on_wait: Callable[[float], None]) -> bool:
    """Make every batch iteration of `module.DataIterator` report its waits; False when this
    Ray has no such path (or it is wrapped already)."""
    cls = getattr(module, "DataIterator", None)
    original = getattr(cls, "_iter_batches", None)
    if cls is None or original is None or getattr(original, "_raydbg", False):
        return False

    @functools.wraps(original)
    def _iter_batches(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _Timed(original(self, *args, **kwargs), on_wait)

    _iter_batches._raydbg = True  # type: ignore[attr-defined]
    cls._iter_batches = _iter_batches
    return True
