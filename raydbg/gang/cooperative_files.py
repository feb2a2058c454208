"""Cooperative stacks, both sides: the files an agent and an activated worker talk through.

Every file is named `<pid>-<start>` (the pid and its start time in clock ticks: a pid
reused later never reads another process's files) in the private stacks dir:
`.req` the worker's FIFO (a request is one byte), `.json` its snapshot, `.txt`
faulthandler's text after a signal, `.pause` the answer to a pause request. The worker's
side is cooperative_worker.py, the agent's cooperative_agent.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from raydbg import proc_identity

SIGNUM = signal.SIGUSR2
THREAD_NAME = "raydbg-stacks"
STACKS_REQUEST, PAUSE_REQUEST = b"?", b"p"  # the bytes written to a worker's FIFO
PAUSE_ANSWER = ".pause"  # suffix of the file a pause request is answered in


def stacks_dir() -> Path:
    from raydbg.private_dir import private_dir, temp_base

    return private_dir(os.environ.get("RAYDBG_STACKS_DIR") or temp_base(), "stacks")


def start_ticks(pid: int) -> str:
    """The process's start time in clock ticks (/proc/PID/stat field 22), as file names carry it:
    a pid plus this is unique. OSError when it is gone."""
    return str(proc_identity.start_ticks(pid))


def paths(pid: int, base: Path | None = None, ticks: str | None = None) -> tuple[Path, Path]:
    """The worker's faulthandler text and its JSON answer."""
    stem = (base or stacks_dir()) / f"{pid}-{ticks or start_ticks(pid)}"
    return stem.with_suffix(".txt"), stem.with_suffix(".json")


def request_path(pid: int, base: Path | None = None) -> Path:
    """The worker's FIFO, which its stacks thread reads."""
    return paths(pid, base)[0].with_suffix(".req")

