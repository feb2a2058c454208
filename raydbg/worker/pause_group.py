"""Pause groups, worker side (runs in every activated worker): which group a Train rank's breakpoint session joins.

With pause-all (`raydbg.breakpoint(all_ranks=True)`, or RAYDBG_TRAIN_PAUSE=all), every rank
that reaches the same line for the same time gets the same group id, computed alone on
each rank; `raydbg continue GROUP` resumes them all (gang/pause.py on the gateway, the
resume keys in worker/resume.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PAUSE_ENV = "RAYDBG_TRAIN_PAUSE"
_local = threading.local()
_occurrences: dict[tuple[str, int], int] = {}
_occ_lock = threading.Lock()


@contextmanager
def pausing_all_ranks(on: bool) -> Iterator[None]:
    """Within: this thread's pause groups the Train ranks that reach the same line (if `on`)."""
    _local.all_ranks = on
    try:
        yield
    finally:
        _local.all_ranks = False


def pause_all_requested() -> bool:
    return bool(getattr(_local, "all_ranks", False)) or (
        os.environ.get(PAUSE_ENV, "").strip().lower() == "all"
    )


def group_id(job_id: str, run: str, file: str, line: int, occurrence: int) -> str:
    """Same on every rank that reaches the same line for the same time: 'g' + 11 hex digits."""
    digest = hashlib.sha1(f"{job_id}\0{run}\0{file}\0{line}\0{occurrence}".encode()).hexdigest()
    return "g" + digest[:11]


def assign_group(rec: Any) -> None:
    """Give a Train rank's breakpoint session its pause group when pause-all applies."""
    if rec.reason != "breakpoint" or rec.train_run is None or not pause_all_requested():
        return
    # The group key uses the file's base name: ranks may run from different directories.
    where = (os.path.basename(rec.file), int(rec.line))
    with _occ_lock:
        _occurrences[where] = occurrence = _occurrences.get(where, 0) + 1
    rec.group = group_id(rec.job_id, rec.train_run, where[0], where[1], occurrence)
