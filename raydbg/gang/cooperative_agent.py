"""Cooperative stacks, agent side (runs in the node agent): ask an activated worker for its stacks, no ptrace.

First through its stacks thread (`ask`, `ask_snapshot`, `ask_pause`): a byte written to
the worker's FIFO, its JSON answer read back. A worker without the thread (not activated,
or it died: opening the FIFO fails with ENXIO) is left to py-spy.

The fallback, when py-spy fails too (no ptrace rights): a signal (`request`): truncate,
signal, take the JSON if it comes within a short grace, else the faulthandler text. A
process is signalled only if it has our file for its own start time *and* catches SIGUSR2
(/proc/PID/status SigCgt): the default action kills. The signal goes through a pidfd opened
before the last check (`signal_if_same`), so a worker that exits meanwhile and whose pid goes
to another process never has that process signalled. The worker's side is
cooperative_worker.py; the file names, cooperative_files.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import time
from pathlib import Path
from typing import Any

from raydbg.gang.cooperative_files import (
    PAUSE_ANSWER,
    PAUSE_REQUEST,
    SIGNUM,
    STACKS_REQUEST,
    paths,
    request_path,
    stacks_dir,
    start_ticks,
)
from raydbg.gang.frames import looks_idle

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
        text, _ = paths(pid, base)
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
        return request_path(pid, base).exists()
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
        fifo = request_path(pid, base)
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
        text, final = paths(pid, base, ticks)
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
