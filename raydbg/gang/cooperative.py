"""Cooperative stacks for when py-spy cannot attach: a signal makes the worker dump its own threads.

Worker side (`install`, at worker setup, costs one open file and two handlers):
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
start time *and* catches SIGUSR2 (/proc/PID/status SigCgt): the default action kills.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from raydbg.gang.frames import Frame, looks_idle

SIGNUM = signal.SIGUSR2
_installed: dict[str, Any] = {}


def stacks_dir() -> Path:
    from raydbg.private_dir import private_dir

    return private_dir(os.environ.get("RAYDBG_STACKS_DIR") or tempfile.gettempdir(), "stacks")


def start_ticks(pid: int) -> str:
    """The process's start time in clock ticks (/proc/PID/stat field 22): a pid plus this is unique."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[19]


def _paths(pid: int, base: Path | None = None) -> tuple[Path, Path]:
    stem = (base or stacks_dir()) / f"{pid}-{start_ticks(pid)}"
    return stem.with_suffix(".txt"), stem.with_suffix(".json")


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


def snapshot(interrupted: Any = None) -> dict[str, Any]:
    """Every thread of this process: id, name, paused by raydbg, frames innermost first.

    `interrupted`: the frame a signal handler interrupted, for the calling thread's stack.
    """
    paused: set[int] = set()
    debugger = sys.modules.get("raydbg.worker.debugger")
    if debugger is not None:
        paused = set(getattr(debugger, "_paused_threads", ()))
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    threads = []
    for ident, top in sys._current_frames().items():
        frames: list[Frame] = []
        frame = (interrupted or top.f_back) if ident == me else top  # not our own frames
        while frame is not None:
            frames.append({"function": frame.f_code.co_name, "file": frame.f_code.co_filename,
                           "line": frame.f_lineno})
            frame = frame.f_back
        threads.append({"thread_id": ident, "name": names.get(ident, f"Thread-{ident}"),
                        "paused": ident in paused, "idle": looks_idle(frames), "frames": frames})
    return {"pid": os.getpid(), "ts": time.time(), "threads": threads}


def _on_signal(signum: int, frame: Any) -> None:
    try:
        _, final = _paths(os.getpid())
        tmp = final.with_suffix(f".tmp{threading.get_ident()}")
        from raydbg.private_dir import open_private

        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w") as fh:
            json.dump(snapshot(frame), fh)
        os.replace(tmp, final)
    except Exception:
        pass  # a stack request must never disturb the worker


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


async def request(pid: int, timeout: float = 3.0, grace: float = 0.25,
                  base: Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """Ask worker `pid` for its stacks; returns (threads, "json"|"faulthandler").

    Raises LookupError when the worker has no cooperative handler, TimeoutError when
    nothing came within `timeout`.
    """
    from raydbg.gang.pyspy import StackError

    if not available(pid, base):
        raise StackError(f"pid {pid} has no raydbg stack handler (not a raydbg-activated worker?)")
    text, final = _paths(pid, base)
    os.truncate(text, 0)
    try:
        os.unlink(final)
    except FileNotFoundError:
        pass
    os.kill(pid, SIGNUM)
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
    """Called from the worker hook: install unless RAYDBG_STACKS_COOPERATIVE=0; never raises."""
    if os.environ.get("RAYDBG_STACKS_COOPERATIVE", "1") == "0":
        return
    try:
        install()
    except Exception:
        pass  # no fallback stacks for this worker; py-spy still works where ptrace does
