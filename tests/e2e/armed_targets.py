"""Code that armed breakpoints (raydbg break add) pause in; no breakpoint() anywhere. Lines marked `# BP:<name>`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import ray
from bp_markers import marker_line

FILE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


def scaled(n: int) -> int:
    local_value = n * 10  # BP:first
    return local_value + 1  # BP:armed


def slow_scaled(n: int) -> int:
    time.sleep(0.2)
    out = scaled(n)  # BP:call
    return out  # BP:caller


class Keeper:
    """An actor: a worker whose process lives on between calls."""

    def pid(self) -> int:
        return os.getpid()

    def call(self, n: int) -> int:
        return scaled(n)

    def loaded(self) -> bytes | None:
        """The breakpoint version this worker has armed (raydbg's poll thread)."""
        from raydbg.breakpoints.worker import loaded_version

        return loaded_version()


ray.cloudpickle.register_pickle_by_value(__import__("sys").modules[__name__])
