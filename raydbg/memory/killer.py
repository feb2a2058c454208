"""Kills a chosen worker only if it is still that process: same start time, our uid, our raylet's child (monitor side).

Why: the monitor decides on a snapshot of /proc and kills a moment later. In between
the chosen worker can exit and its pid go to another process (another user's, or a
system one). So the kill goes through a pidfd (`os.pidfd_open`), which names one
process for good, and before the signal we check, through /proc, that the pid still
names the snapshot's process: its start time (/proc/PID/stat field 22, clock ticks
since boot) is unchanged, its real and effective uid are ours, and its parent is our
raylet, itself the same process the monitor started beside (pid plus start time).
A pid reused before the pidfd was opened fails the start-time check; one reused after
it cannot be reached through the pidfd (the signal fails with ESRCH).

After the signal the same pidfd frees the victim's memory at once (`process_mrelease`,
Linux 5.15+, as the kernel's OOM reaper does): a killed worker otherwise holds its memory
until it runs its own exit, and Ray's workers run at nice 15, last on a busy node, while
the rest of the node keeps growing towards the kernel's limit.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raydbg.memory.process_memory import ProcMem
from raydbg.proc_identity import open_pidfd, parse_stat

# process_mrelease(2): the same number on x86_64 and arm64 (the generic table).
_SYS_PROCESS_MRELEASE = {"x86_64": 448, "aarch64": 448}.get(platform.machine())


def release_memory(pidfd: int) -> bool:
    """Free the memory of a process already sent SIGKILL, from this process: True if freed
    (False: no such call here, or the process is not dying)."""
    if _SYS_PROCESS_MRELEASE is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.syscall(_SYS_PROCESS_MRELEASE, pidfd, 0) == 0)
    except (OSError, AttributeError):
        return False


class KillRefused(OSError):
    """The pid no longer names a process this monitor may kill; nothing was signalled."""


@dataclass(frozen=True)
class ProcIdentity:
    """What names a process for good: pid plus start time (clock ticks since boot)."""

    pid: int
    ppid: int
    start_ticks: int
    uids: tuple[int, ...]  # real, effective, saved, filesystem


def _read(path: Path) -> str:
    # os.read, not Path.read_text: measured ~4x cheaper on a loaded node, and this runs
    # between the decision and the signal.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode(errors="replace")
    finally:
        os.close(fd)


def identity(pid: int, proc: Path = Path("/proc"), uids: bool = True) -> ProcIdentity | None:
    """The process's identity now, or None when it is gone or unreadable.

    Start time and parent come from one read of /proc/PID/stat; the uids from
    /proc/PID/status, read after it (a pid that changed hands in between shows another
    start time on the next look, and a pidfd opened before never reaches the newcomer).
    """
    try:
        stat_text = _read(proc / str(pid) / "stat")
        status = _read(proc / str(pid) / "status") if uids else ""
        stat = parse_stat(stat_text)
    except (OSError, ValueError, IndexError):
        return None
    found: tuple[int, ...] = ()
    for line in status.splitlines():
        if line.startswith("Uid:"):
            found = tuple(int(x) for x in line.split()[1:])
    return ProcIdentity(pid, stat.ppid, stat.start_ticks, found)


def is_raylet_of(pid: int, node_id: str, proc: Path = Path("/proc")) -> bool:
    """Is `pid` the raylet of node `node_id` (its command line says `--node_id=<id>`)?"""
    try:
        if (proc / str(pid) / "comm").read_text().strip() != "raylet":
            return False
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"--node_id={node_id}".encode() in args


def find_raylet(node_id: str, prefer: int = 0, proc: Path = Path("/proc")) -> int | None:
    """The pid of this machine's raylet for `node_id` (several raylets can share a machine)."""
    if not node_id:
        return None
    if prefer and is_raylet_of(prefer, node_id, proc):
        return prefer
    for entry in proc.iterdir():
        if entry.name.isdigit() and is_raylet_of(int(entry.name), node_id, proc):
            return int(entry.name)
    return None


@dataclass
class Killer:
    """Signals a worker of `raylet` (pid plus start ticks) if it is still the chosen one.

    raylet None: no parent check (a monitor run by hand on a single process tree).
    """

    raylet: ProcIdentity | None
    uid: int = -1  # -1: os.getuid()
    proc: Path = Path("/proc")
    sig: int = signal.SIGKILL
    refused: set[tuple[int, int]] = field(default_factory=set)  # (pid, start ticks) refused once

    def may_choose(self, pm: ProcMem) -> bool:
        """From the snapshot alone: worth choosing (a refused pick would cost a round)?"""
        if (pm.pid, pm.start_ticks) in self.refused:
            return False
        return self.raylet is None or pm.ppid == self.raylet.pid

    @classmethod
    def for_raylet(cls, raylet_pid: int, proc: Path = Path("/proc")) -> Killer:
        """Pins the raylet as it is now; raises KillRefused when it is gone already."""
        ident = identity(raylet_pid, proc)
        if ident is None:
            raise KillRefused(f"raydbg memory: raylet pid {raylet_pid} is gone")
        return cls(ident, proc=proc)

    def check(self, pid: int, expected_ticks: int | None) -> ProcIdentity:
        """The process `pid` names now, if it may be killed; else KillRefused (one line)."""
        uid = os.getuid() if self.uid < 0 else self.uid
        if expected_ticks is None or expected_ticks < 0:
            raise KillRefused(f"pid {pid}: no start time from the snapshot; not killed")
        now = identity(pid, self.proc)
        if now is None:
            raise ProcessLookupError(f"pid {pid} is gone")
        if now.start_ticks != expected_ticks:
            raise KillRefused(
                f"pid {pid} now names another process (started at tick {now.start_ticks}, "
                f"not {expected_ticks}): the worker exited and its pid was reused; not killed"
            )
        if not now.uids or any(u != uid for u in now.uids[:2]):
            raise KillRefused(f"pid {pid} runs as uid {now.uids[:2]}, not {uid}; not killed")
        if self.raylet is not None:
            if now.ppid != self.raylet.pid:
                raise KillRefused(
                    f"pid {pid} is not a worker of this raylet (parent {now.ppid}, "
                    f"raylet {self.raylet.pid}); not killed"
                )
            parent = identity(self.raylet.pid, self.proc, uids=False)
            if parent is None or parent.start_ticks != self.raylet.start_ticks:
                raise KillRefused(f"raylet {self.raylet.pid} is gone or replaced; not killed")
        return now

    def kill(
        self, pid: int, expected_ticks: int | None, before: Callable[[], object] | None = None
    ) -> None:
        """Check, then signal through a pidfd. `before`: a callable run after the check and
        before the signal (e.g. a line in the worker's log)."""
        fd = open_pidfd(pid)
        try:
            # Checked after the pidfd is open: if /proc still shows the snapshot's process
            # now, the pidfd names it (a pid is not reused while its process lives).
            try:
                self.check(pid, expected_ticks)
            except KillRefused:
                self.refused.add((pid, -1 if expected_ticks is None else expected_ticks))
                raise
            if before is not None:
                before()
            if fd is not None:
                signal.pidfd_send_signal(fd, self.sig)  # ESRCH if it died since: nobody else
                if self.sig == signal.SIGKILL:
                    release_memory(fd)
            else:  # pragma: no cover - no pidfd: pid plus start time, checked just above
                os.kill(pid, self.sig)
        finally:
            if fd is not None:
                os.close(fd)


class Killable:
    """A monitor's `Who` (worker_tasks.Resolver) without the processes its Killer would refuse:
    not a child of the raylet, or refused before. Otherwise a refused top pick would be
    chosen again every round while the node fills up."""

    def __init__(self, who: Any, killer: Killer) -> None:
        self.who = who
        self.killer = killer

    def candidates(self, procs: dict[int, ProcMem], growth: dict[int, float]) -> list[Any]:
        return [
            c
            for c in self.who.candidates(procs, growth)
            if c.pid in procs and self.killer.may_choose(procs[c.pid])
        ]
