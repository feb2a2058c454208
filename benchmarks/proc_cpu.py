"""CPU time of processes from /proc/<pid>/task/*/schedstat: nanoseconds, where psutil's
cpu_times (user + sys) count clock ticks of 10 ms, 5 us a task in a 2,000-task round.

A thread that ended takes its time with it: fine for processes whose threads live as
long as they do (Ray's workers and daemons), not for short-lived threads."""

from __future__ import annotations

import os


def cpu_ns(pid: int, main_only: bool = False) -> int:
    """CPU nanoseconds of `pid`'s threads (its main thread only with `main_only`); 0 once
    it is gone."""
    try:
        tids = [str(pid)] if main_only else os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended
    return total
