"""Cooperative stacks: raydbg-activated workers dump their own threads, no ptrace.

The first way, asked first (`listen` / `ask`): a daemon thread of the worker ("raydbg-stacks")
blocks reading a FIFO `<pid>-<start>.req` in the private stacks dir; a byte written there
wakes it, it writes `snapshot()` as JSON to `<pid>-<start>.json` (temp name, then rename).
The same thread takes `raydbg pause` requests (another byte; on_demand.py), answered in
`<pid>-<start>.pause`.
It needs the GIL only for the snapshot, so it answers while the main thread sits in C (Ray's
task loop, a collective that released the GIL), where a signal's Python handler would wait.
A worker without the thread (not activated, or it died: opening the FIFO fails with ENXIO)
is left to py-spy.

The fallback, when py-spy fails too (no ptrace rights): a signal. Worker side (`install`,
at worker setup, costs one open file and two handlers):
SIGUSR2 (unused by Ray workers; Tune owns SIGUSR1, Ray's dashboard agent uses SIGUSR2
in its own process only) triggers two writers:
  1. faulthandler, from C inside the signal handler: every thread's Python stack as text,
     even while the main thread is blocked in C (a Ray worker's main thread always is:
     it sits in Ray's task loop) -> `<pid>-<start>.txt`, opened O_APPEND so the agent
     can truncate it between requests.
  2. a Python handler (chained): thread names and which threads raydbg has paused, as
     JSON (temp name, then rename) -> `<pid>-<start>.json`. It runs only when the main
     thread reaches Python bytecode, which in a Ray worker can be much later or never.
Agent side (`request`): truncate, signal, take the JSON if it comes within a short grace,
else the faulthandler text. A process is signalled only if it has our file for its own
start time *and* catches SIGUSR2 (/proc/PID/status SigCgt): the default action kills. The
signal goes through a pidfd opened before the last check (`signal_if_same`), so a worker
that exits meanwhile and whose pid goes to another process never has that process signalled.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import re
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raydbg import proc_identity, ray_context
from raydbg.gang import own_threads
from raydbg.gang.frames import looks_idle
from raydbg.record_rules import TRAIN_NAMES

SIGNUM = signal.SIGUSR2
THREAD_NAME = "raydbg-stacks"
STACKS_REQUEST, PAUSE_REQUEST = b"?", b"p"  # the bytes written to a worker's FIFO
PAUSE_ANSWER = ".pause"  # suffix of the file a pause request is answered in
# A snapshot's "train": the stacks contract's labels from the session record's Train fields.
TRAIN_LABELS = {label: field for field, label in TRAIN_NAMES.items()}
_installed: dict[str, Any] = {}
_listening: dict[str, Any] = {}


def stacks_dir() -> Path:
    from raydbg.private_dir import private_dir, temp_base

    return private_dir(os.environ.get("RAYDBG_STACKS_DIR") or temp_base(), "stacks")


def start_ticks(pid: int) -> str:
    """The process's start time in clock ticks (/proc/PID/stat field 22), as file names carry it:
    a pid plus this is unique. OSError when it is gone."""
    return str(proc_identity.start_ticks(pid))


def _paths(pid: int, base: Path | None = None, ticks: str | None = None) -> tuple[Path, Path]:
    stem = (base or stacks_dir()) / f"{pid}-{ticks or start_ticks(pid)}"
    return stem.with_suffix(".txt"), stem.with_suffix(".json")


def _request_path(pid: int, base: Path | None = None) -> Path:
    return _paths(pid, base)[0].with_suffix(".req")


# --- worker side ------------------------------------------------------------------
def install() -> bool:
    """Register the handlers in this process; False (and nothing changed) if SIGUSR2 is taken."""
    if _installed or threading.current_thread() is not threading.main_thread():
        return bool(_installed)
    if signal.getsignal(SIGNUM) not in (signal.SIG_DFL, None):
        return False  # the user's own handler: leave it alone
    from raydbg.private_dir import create_new

    text, _ = _paths(os.getpid())
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
    fifo = _request_path(os.getpid())
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
        final = _paths(os.getpid())[1].with_suffix(suffix)
        tmp = final.with_suffix(f".tmp{threading.get_ident()}")
        from raydbg.private_dir import open_private

        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w") as fh:
            json.dump(answer(), fh)
        os.replace(tmp, final)
    except Exception:
        pass  # a request must never disturb the worker


# --- parsing faulthandler's text ------------------------------------------------------
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler(text: str) -> list[dict[str, Any]]:
    """faulthandler's all-threads dump -> contract threads (names unknown: `Thread-0x...`)."""
    threads: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            ident = int(m.group(2), 16)
            current = {"thread_id": ident, "name": f"Thread-{m.group(2)}", "idle": False, "frames": []}
            threads.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None:
            current["frames"].append({"function": m.group(3), "file": m.group(1), "line": int(m.group(2))})
    for t in threads:
        t["idle"] = looks_idle(t["frames"])
    return threads


# --- agent side -------------------------------------------------------------------
def catches_signal(pid: int, signum: int = SIGNUM) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def available(pid: int, base: Path | None = None) -> bool:
    try:
        text, _ = _paths(pid, base)
        return text.exists() and catches_signal(pid)
    except OSError:
        return False


def signal_if_same(pid: int, ticks: str, signum: int = SIGNUM) -> bool:
    """Send `signum` to `pid` only while it is the process started at `ticks` and catches the
    signal, through a pidfd (raydbg/proc_identity.py): a pid reused since is never signalled.
    False, and nothing sent, otherwise (or where the system has no pidfd)."""
    from raydbg.proc_identity import open_pidfd

    try:
        fd = open_pidfd(pid)
    except ProcessLookupError:
        return False
    if fd is None:
        return False  # by pid alone the signal could reach the next owner of the number
    try:
        # Checked with the pidfd open: if the pid still names the process started at `ticks`,
        # the pidfd names it too (a pid is not reused while its process lives).
        if start_ticks(pid) != ticks or not catches_signal(pid, signum):
            return False
        signal.pidfd_send_signal(fd, signum)  # ESRCH if it exited since: nobody else
        return True
    except OSError:  # gone meanwhile (ESRCH, its /proc entry vanished)
        return False
    finally:
        os.close(fd)


def listening(pid: int, base: Path | None = None) -> bool:
    """Worker `pid` has made its stacks FIFO (whether its thread still reads it, `ask` finds out)."""
    try:
        return _request_path(pid, base).exists()
    except OSError:
        return False


async def ask(pid: int, timeout: float = 2.0, base: Path | None = None) -> list[dict[str, Any]]:
    """Worker `pid`'s threads from its stacks thread (see ask_snapshot)."""
    return list((await ask_snapshot(pid, timeout, base))["threads"])


async def ask_snapshot(pid: int, timeout: float = 2.0, base: Path | None = None) -> dict[str, Any]:
    """Worker `pid`'s snapshot (threads; its collectives if it is a rank) from its stacks thread
    (no signal, no ptrace stop).

    Raises StackError when it has no stacks thread or none answered within `timeout`.
    """
    snap = await _ask(pid, STACKS_REQUEST, ".json", timeout, base)
    if not isinstance(snap.get("threads"), list):
        from raydbg.gang.pyspy import StackError

        raise StackError(f"pid {pid}'s stacks thread answered without threads")
    return snap


async def ask_pause(pid: int, timeout: float = 5.0, base: Path | None = None) -> dict[str, Any]:
    """Ask worker `pid` to pause the thread doing its work (on_demand.py): its answer,
    {"thread": name} or {"error": why}. Raises StackError as ask_snapshot does."""
    return await _ask(pid, PAUSE_REQUEST, PAUSE_ANSWER, timeout, base)


async def _ask(pid: int, request: bytes, suffix: str, timeout: float, base: Path | None) -> dict[str, Any]:
    """Write `request` to worker `pid`'s FIFO; its stacks thread's JSON answer (a dict)."""
    from raydbg.gang.pyspy import StackError

    try:
        fifo = _request_path(pid, base)
        final = fifo.with_suffix(suffix)
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:  # ENXIO: nobody reads it (the worker is gone); ENOENT: never made
        raise StackError(f"pid {pid} has no raydbg stacks thread ({exc.strerror})") from None
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise StackError(f"pid {pid}: {fifo} is not a FIFO")
        try:
            os.unlink(final)  # an earlier answer; a concurrent asker's answer is the next one
        except FileNotFoundError:
            pass
        os.write(fd, request)
    finally:
        os.close(fd)
    start, pause = time.monotonic(), 0.001
    while time.monotonic() - start < timeout:
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.02)
        try:
            answer = json.loads(final.read_text())
            if isinstance(answer, dict):
                return answer
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, OSError):
            continue  # replaced mid-read: try again
    raise StackError(f"pid {pid}'s stacks thread did not answer within {timeout:g}s")


async def request(pid: int, timeout: float = 3.0, grace: float = 0.25,
                  base: Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """Ask worker `pid` for its stacks; returns (threads, "json"|"faulthandler").

    Raises LookupError when the worker has no cooperative handler, TimeoutError when
    nothing came within `timeout`.
    """
    from raydbg.gang.pyspy import StackError

    try:
        ticks = start_ticks(pid)  # the process asked for: its file, and the one signalled
        text, final = _paths(pid, base, ticks)
        handled = text.exists() and catches_signal(pid)
    except OSError:
        handled = False
    if not handled:
        raise StackError(f"pid {pid} has no raydbg stack handler (not a raydbg-activated worker?)")
    os.truncate(text, 0)
    try:
        os.unlink(final)
    except FileNotFoundError:
        pass
    if not signal_if_same(pid, ticks):
        raise StackError(f"pid {pid} exited or stopped catching the stack signal: not signalled")
    start = time.monotonic()
    stable_since: float | None = None
    size = -1
    while time.monotonic() - start < timeout:
        await asyncio.sleep(0.005)
        if final.exists():
            try:
                return list(json.loads(final.read_text())["threads"]), "json"
            except (ValueError, KeyError, OSError):
                pass  # replaced mid-read: try again
        now_size = text.stat().st_size
        if now_size and now_size == size:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= grace:
                return parse_faulthandler(text.read_text(errors="replace")), "faulthandler"
        else:
            stable_since = None
        size = now_size
    raise StackError(f"pid {pid} did not answer the stack signal within {timeout:g}s")


def prune(base: Path | None = None) -> int:
    """Remove the files of processes that are gone (their pid ended or was reused); returns how many."""
    gone = 0
    try:
        directory = base or stacks_dir()
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        stem = name.split(".", 1)[0]
        pid, _, ticks = stem.partition("-")
        try:
            alive = pid.isdigit() and start_ticks(int(pid)) == ticks
        except OSError:
            alive = False
        if not alive:
            try:
                os.unlink(directory / name)
                gone += 1
            except OSError:
                pass
    return gone


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
