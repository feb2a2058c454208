"""Which process a pid names, for good: its start time, its owner and this machine's boot.

A pid alone is reused within minutes on a busy node; a pid with its start time (clock
ticks since boot, /proc/PID/stat field 22) and the boot id names one process. Any process
of ours that leaves a record for others to find (the head agent's gateway file) writes
its identity, and readers check all of it before trusting the record. A signal that must
never reach the pid's next owner goes through a pidfd (`open_pidfd`), opened before the
last check: if the pid still names the process meant then, the pidfd names it too (a pid
is not reused while its process lives), and a signal through it fails with ESRCH once that
process is gone. Any process: no Ray import here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
BOOT_ID_PATH = PROC / "sys/kernel/random/boot_id"


@dataclass(frozen=True)
class ProcStat:
    """The fields raydbg reads from /proc/PID/stat."""

    comm: str
    state: str  # R, S, D, Z (zombie), X (dead), ...
    ppid: int
    start_ticks: int  # field 22: clock ticks since boot


def _after_comm(text: str) -> tuple[str, list[str]]:
    # comm (field 2) may hold spaces and ')': the fields after it start at the last ')'.
    lpar, rpar = text.find("("), text.rfind(")")
    return text[lpar + 1 : rpar], text[rpar + 2 :].split()


def parse_stat(text: str) -> ProcStat:
    """/proc/PID/stat's text -> its fields. Raises ValueError or IndexError on a short or bad line."""
    comm, rest = _after_comm(text)
    # rest[0] is field 3 (state); ppid is field 4, starttime field 22.
    return ProcStat(comm, rest[0], int(rest[1]), int(rest[19]))


def start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot. Raises OSError if it is gone."""
    return parse_stat((PROC / str(pid) / "stat").read_text()).start_ticks


def pid_alive(pid: int, proc: Path = PROC) -> bool:
    """False once the process is gone or a zombie (it holds no memory and runs no code then).
    Any user's process: /proc/PID/stat is world-readable, where a signal 0 is not allowed."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    fields = _after_comm(text)[1]
    return not fields or fields[0] not in ("Z", "X")


def open_pidfd(pid: int) -> int | None:
    """A pidfd on `pid` (Linux 5.3+); None where the system has none (an old kernel, seccomp).
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


def owner_uid(pid: int) -> int:
    """The uid that owns /proc/PID (the process's real uid). Raises OSError if it is gone."""
    return os.stat(f"/proc/{pid}").st_uid


def boot_id() -> str:
    """This machine's boot id: a record from another machine or an earlier boot never matches."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int
    uid: int
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity:
        return cls(pid, start_ticks(pid), owner_uid(pid), boot_id())

    @classmethod
    def mine(cls) -> ProcessIdentity:
        return cls.of(os.getpid())

    def fields(self) -> dict[str, Any]:
        """What a record carries: `pid`, `start_time`, `uid`, `boot_id`."""
        return {"pid": self.pid, "start_time": self.start_time, "uid": self.uid, "boot_id": self.boot_id}

    @classmethod
    def from_record(cls, rec: Any) -> ProcessIdentity | None:
        """The identity a record names, or None when a field is missing or of the wrong type."""
        if not isinstance(rec, dict):
            return None
        pid, start, uid, boot = (rec.get(k) for k in ("pid", "start_time", "uid", "boot_id"))
        # exact ints: a bool is an int to isinstance
        if type(pid) is not int or type(start) is not int or type(uid) is not int:
            return None
        if not isinstance(boot, str) or not boot:
            return None
        return cls(pid, start, uid, boot)

    def why_not_alive(self) -> str | None:
        """None when this very process runs here now as our uid; else what differs, in words."""
        if self.uid != os.getuid():
            return f"it names uid {self.uid}, not ours ({os.getuid()})"
        if self.boot_id != boot_id():
            return "it was written on another machine or before a reboot"
        try:
            now = ProcessIdentity.of(self.pid)
        except (OSError, ValueError, IndexError):
            return f"pid {self.pid} is gone"
        if now.uid != self.uid:
            return f"pid {self.pid} now belongs to uid {now.uid}"
        if now.start_time != self.start_time:
            return f"pid {self.pid} is another process now (started later)"
        return None
