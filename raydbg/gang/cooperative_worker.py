"""Cooperative stacks, worker side (runs in every raydbg-activated worker): the worker dumps its own threads, no ptrace.

The first way, asked first: a daemon thread of the worker ("raydbg-stacks", `listen`)
blocks reading a FIFO `<pid>-<start>.req` in the private stacks dir; a byte written there
wakes it, it writes `snapshot()` as JSON to `<pid>-<start>.json` (temp name, then rename).
The same thread takes `raydbg pause` requests (another byte; on_demand.py), answered in
`<pid>-<start>.pause`.
It needs the GIL only for the snapshot, so it answers while the main thread sits in C (Ray's
task loop, a collective that released the GIL), where a signal's Python handler would wait.

The fallback (`install`, at worker setup, costs one open file and two handlers):
SIGUSR2 (unused by Ray workers; Tune owns SIGUSR1, Ray's dashboard agent uses SIGUSR2
in its own process only) triggers two writers:
  1. faulthandler, from C inside the signal handler: every thread's Python stack as text,
     even while the main thread is blocked in C (a Ray worker's main thread always is:
     it sits in Ray's task loop) -> `<pid>-<start>.txt`, opened O_APPEND so the agent
     can truncate it between requests.
  2. a Python handler (chained): thread names and which threads raydbg has paused, as
     JSON (temp name, then rename) -> `<pid>-<start>.json`. It runs only when the main
     thread reaches Python bytecode, which in a Ray worker can be much later or never.
The agent's side, which asks, is cooperative_agent.py; the file names, cooperative_files.py.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from raydbg import ray_context
from raydbg.gang import own_threads
from raydbg.gang.cooperative_files import (
    PAUSE_ANSWER,
    PAUSE_REQUEST,
    SIGNUM,
    STACKS_REQUEST,
    THREAD_NAME,
    paths,
    request_path,
)
from raydbg.record_rules import TRAIN_NAMES

# A snapshot's "train": the stacks contract's labels from the session record's Train fields.
TRAIN_LABELS = {label: field for field, label in TRAIN_NAMES.items()}
_installed: dict[str, Any] = {}
_listening: dict[str, Any] = {}


def install() -> bool:
    """Register the handlers in this process; False (and nothing changed) if SIGUSR2 is taken."""
    if _installed or threading.current_thread() is not threading.main_thread():
        return bool(_installed)
    if signal.getsignal(SIGNUM) not in (signal.SIG_DFL, None):
        return False  # the user's own handler: leave it alone
    from raydbg.private_dir import create_new

    text, _ = paths(os.getpid())
    try:
        os.unlink(text)  # a file from an earlier process is not ours to append to
    except FileNotFoundError:
        pass
    fd = create_new(text)
    os.close(fd)
    fd = os.open(text, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    signal.signal(SIGNUM, _on_signal)
    faulthandler.register(SIGNUM, file=fd, all_threads=True, chain=True)
    _installed.update(fd=fd, path=str(text))
    return True


def listen() -> bool:
    """Start this process's stacks thread (idempotent); OSError if its FIFO cannot be made."""
    if _listening:
        return True
    fifo = request_path(os.getpid())
    try:
        os.unlink(fifo)  # an earlier process's: not ours
    except FileNotFoundError:
        pass
    os.mkfifo(fifo, 0o600)
    # Read and write: the open never blocks, and the read never sees EOF between requests.
    fd = os.open(fifo, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    threading.Thread(target=_answer_requests, args=(fd,), name=THREAD_NAME, daemon=True).start()
    _listening.update(fd=fd, path=str(fifo))
    return True


def _answer_requests(fd: int) -> None:
    """The stacks thread: blocked in read (no CPU, no GIL) until a request comes:
    STACKS_REQUEST for a snapshot, PAUSE_REQUEST for `raydbg pause` (on_demand.py)."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        if PAUSE_REQUEST in data:
            _write_json(PAUSE_ANSWER, _pause_answer)
        if STACKS_REQUEST in data:
            _write_snapshot(None, skip_self=True)


def _pause_answer() -> dict[str, Any]:
    from raydbg.gang import on_demand  # a pause is rare: its modules load at the first

    return on_demand.request()


def uninstall() -> None:
    """Undo install() (tests and the overhead benchmark toggle it)."""
    if not _installed:
        return
    faulthandler.unregister(SIGNUM)
    signal.signal(SIGNUM, signal.SIG_DFL)
    os.close(_installed["fd"])
    try:
        os.unlink(_installed["path"])
    except OSError:
        pass
    _installed.clear()


def snapshot(interrupted: Any = None, skip_self: bool = False) -> dict[str, Any]:
    """Every thread of this process (own_threads.threads: the arguments are its), and a
    collective-running rank's Flight Recorder view (which collective it is in), process
    groups and send/recv peers (the wait-for graph's inputs)."""
    out: dict[str, Any] = {"pid": os.getpid(), "ts": time.time(), "threads": own_threads.threads(interrupted, skip_self)}
    train = ray_context.train_fields()  # a rank that never reported is still known by its rank
    if train.get("train_run") is not None:
        out["train"] = {label: train[field] for label, field in TRAIN_LABELS.items()}
    if "torch.distributed" in sys.modules:
        from raydbg.gang.flight_recorder import local_groups, local_view

        view = local_view()
        if view is not None:
            out["collectives"] = view
        out.update(local_groups())  # its groups' members, its threads' send/recv peers
    return out


def _on_signal(signum: int, frame: Any) -> None:
    _write_snapshot(frame)


def _write_snapshot(interrupted: Any, skip_self: bool = False) -> None:
    _write_json(".json", lambda: snapshot(interrupted, skip_self))


def _write_json(suffix: str, answer: Callable[[], Any]) -> None:
    """`answer()` as JSON to `<pid>-<start><suffix>` (temp name, then rename)."""
    try:
        final = paths(os.getpid())[1].with_suffix(suffix)
        tmp = final.with_suffix(f".tmp{threading.get_ident()}")
        from raydbg.private_dir import open_private

        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w") as fh:
            json.dump(answer(), fh)
        os.replace(tmp, final)
    except Exception:
        pass  # a request must never disturb the worker


def worker_setup() -> None:
    """Called from the worker hook: the stacks thread and the signal handlers, unless
    RAYDBG_STACKS_COOPERATIVE=0; never raises."""
    if os.environ.get("RAYDBG_STACKS_COOPERATIVE", "1") == "0":
        return
    for start in (listen, install):
        try:
            start()
        except Exception:
            pass  # no cooperative stacks this way; py-spy still works where ptrace does
