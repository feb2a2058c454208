"""A handle on one process for good (a pidfd), for signals that must never reach a pid's next owner; used by the agents' signal senders.

A pid names a process only while it lives: once it exits, the kernel gives the number to
the next process started. A pidfd (Linux 5.3+) names the process it was opened on, and a
signal through it fails with ESRCH once that process is gone. The senders open one first,
then check through /proc that the pid still names the process they mean (its start time):
if it does, the pidfd names it (a pid is not reused while its process lives).
"""

from __future__ import annotations

import os


def open_pidfd(pid: int) -> int | None:
    """A pidfd on `pid`; None where the system has none (old kernel, seccomp, not Linux).
    Raises ProcessLookupError when no process has that pid."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:  # pragma: no cover - Linux < 5.3 / non-Linux
        return None
    try:
        return int(opener(pid))
    except ProcessLookupError:
        raise
    except OSError:  # pragma: no cover - seccomp or an old kernel
        return None
