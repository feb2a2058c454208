"""Code that pauses for tests/e2e/test_attach_thread.py; pause lines carry `# BP:<name>` markers."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from bp_markers import marker_line

FILE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


class TwoCalls:
    """A threaded actor (max_concurrency > 1): each call pauses in its own thread.

    Call `late_n`'s thread is the last to stop under an attaching client (by `delay` s): the
    other paused thread's `stopped` event reaches the relay first, every time.
    """

    def __init__(self, late_n: int = 1, delay: float = 0.5) -> None:
        from raydbg.worker import debugpy_control

        self.late_n = late_n
        late: set[int] = set()
        self.late_threads = late
        original = debugpy_control.suspend

        def late_suspend(frame: Any, exc_info: Any = None) -> bool:
            if threading.get_ident() in late:
                time.sleep(delay)
            return original(frame, exc_info)

        debugpy_control.suspend = late_suspend

    def work(self, n: int) -> int:
        ident = threading.get_ident()  # the thread ident the session record holds
        if n == self.late_n:
            self.late_threads.add(ident)
        local_value = n + 100
        breakpoint()  # BP:same_line
        self.late_threads.discard(ident)
        return local_value


class SlowDoor:
    """Its pauses stay listed as `starting` for `delay` s: the debugger's door opens late."""

    def __init__(self, delay: float) -> None:
        from raydbg.worker import debugpy_control

        original = debugpy_control.open_door

        def late_door() -> str:
            time.sleep(delay)
            return original()

        debugpy_control.open_door = late_door

    def work(self, n: int) -> int:
        local_value = n * 2
        breakpoint()  # BP:slow_door
        return local_value


# Workers cannot import the tests' modules: this one travels by value (file and lines kept).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
