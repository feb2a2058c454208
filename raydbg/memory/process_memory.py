"""What each process costs the node: its private memory (RssAnon or USS), start, parent.

Two readings: RssAnon from /proc/PID/status (fast), USS from smaps_rollup (detailed).
smaps_rollup walks every mapping and page table of the process, measured here at 0.5-3
ms per Ray worker (150 ms for 64 processes), too slow for a monitor racing a 1 GB/s
allocation. /proc/PID/status costs ~20 us and its RssAnon is what a Ray worker frees when
killed (workers are exec'd, not forked, so their anonymous memory is private). The
monitor scans with the fast path; `detailed=True` gives USS. The node's memory:
node_memory.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from raydbg.memory.kernel_files import Roots, parse_meminfo, read_text
from raydbg.proc_identity import parse_stat

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
    _HZ = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
    _PAGE, _HZ = 4096, 100


@dataclass(frozen=True)
class ProcMem:
    """What one process costs the node, and enough to name it."""

    pid: int
    ppid: int
    name: str
    uss: int  # private memory: USS (smaps_rollup) or RssAnon (status)
    rss: int
    pss: int | None
    swap: int
    source: str  # "smaps_rollup", "status" or "statm"
    start_time: float  # epoch seconds
    oom_score_adj: int | None
    start_ticks: int = -1  # /proc/PID/stat field 22: with the pid, names the process for good

    @property
    def memory(self) -> int:
        """Best estimate of what killing it frees."""
        return self.uss


def boot_time(roots: Roots) -> float:
    for line in (read_text(roots.proc / "stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def _identity(base: Path, btime: float) -> tuple[str, int, float, int] | None:
    stat = read_text(base / "stat")
    if stat is None:
        return None
    try:
        found = parse_stat(stat)
    except (ValueError, IndexError):
        return None
    return found.comm, found.ppid, btime + found.start_ticks / _HZ, found.start_ticks


def read_proc(
    pid: int,
    roots: Roots | None = None,
    btime: float | None = None,
    detailed: bool = False,
    known: dict[int, tuple[str, int, float, int]] | None = None,
) -> ProcMem | None:
    """One process, or None when it is gone or unreadable.

    `known` caches (comm, ppid, start time, start ticks) per pid across scans: they never
    change for one process (a pid reused meanwhile is caught at the kill, killer.py).
    """
    roots = roots or Roots()
    base = roots.proc / str(pid)
    if btime is None:
        btime = boot_time(roots)
    ident = known.get(pid) if known is not None else None
    if ident is None:
        ident = _identity(base, btime)
        if ident is None:
            return None
        if known is not None:
            known[pid] = ident
    comm, ppid, start, ticks = ident
    if detailed:
        adj_text = read_text(base / "oom_score_adj")
        try:
            adj: int | None = int(adj_text) if adj_text is not None else None
        except ValueError:
            adj = None
        rollup = parse_meminfo(read_text(base / "smaps_rollup") or "")
        if "Rss" in rollup:
            uss = (
                rollup.get("Private_Clean", 0)
                + rollup.get("Private_Dirty", 0)
                + rollup.get("Private_Hugetlb", 0)
            )
            pss, swap = rollup.get("Pss"), rollup.get("Swap", 0)
            return ProcMem(
                pid, ppid, comm, uss, rollup["Rss"], pss, swap, "smaps_rollup", start, adj,
                ticks,
            )  # fmt: skip
    status = parse_meminfo(read_text(base / "status") or "")
    if "RssAnon" in status:
        rss = status.get("VmRSS", 0)
        swap = status.get("VmSwap", 0)
        return ProcMem(
            pid, ppid, comm, status["RssAnon"], rss, None, swap, "status", start, None, ticks
        )
    statm = (read_text(base / "statm") or "").split()
    if len(statm) < 3:
        return None  # gone, or a kernel thread
    rss = int(statm[1]) * _PAGE
    anon = max(0, int(statm[1]) - int(statm[2])) * _PAGE  # resident - file/shmem
    return ProcMem(pid, ppid, comm, anon, rss, None, 0, "statm", start, None, ticks)


def scan(
    pids: list[int],
    roots: Roots | None = None,
    detailed: bool = False,
    known: dict[int, tuple[str, int, float, int]] | None = None,
) -> dict[int, ProcMem]:
    """Many processes; the vanished are left out (and dropped from `known`)."""
    roots = roots or Roots()
    btime = boot_time(roots)
    out: dict[int, ProcMem] = {}
    for pid in pids:
        pm = read_proc(pid, roots, btime, detailed, known)
        if pm is not None:
            out[pid] = pm
    if known is not None:
        for pid in list(known):
            if pid not in out:
                del known[pid]
    return out
