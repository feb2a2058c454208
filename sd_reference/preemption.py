"""Preemption: a SIGTERM to a Train worker becomes a checkpoint at the next step boundary.

Schedulers (Kubernetes, Slurm, spot reclaim scripts) send SIGTERM and wait a grace
period before SIGKILL. Ray's own worker handler exits at once; here the first
SIGTERM only sets a flag, the training loop agrees on it across ranks at the next
step (`Control`), every rank saves a checkpoint and the run stops with `Preempted`,
so Ray Train restarts it from that step. A second SIGTERM exits at once (Ray's
handler). The handler must be installed from the process's main thread, while Ray
Train runs the training function in another thread: `SigtermAware` wraps the train
function so that unpickling it, which Ray Train does on the worker's main thread,
installs the handler.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

_received = threading.Event()


class Preempted(RuntimeError):
    """Raised on every rank after the preemption checkpoint; Ray Train restarts from it."""


def requested() -> bool:
    """True once this process got SIGTERM."""
    return _received.is_set()


def install() -> bool:
    """Turn the first SIGTERM into a flag (main thread only; False elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        if not _received.is_set():
            _received.set()
            return
        # A second SIGTERM: stop waiting for the checkpoint, exit as before.
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    return True


class SigtermAware:
    """A train function that installs the SIGTERM handler where it is unpickled (the worker's main thread)."""

    def __init__(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "train_fn")

    def __call__(self, config: dict[str, Any]) -> None:
        self.fn(config)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.fn,))


def _rebuild(fn: Callable[[dict[str, Any]], None]) -> SigtermAware:
    install()
    return SigtermAware(fn)
