"""Per-process memory: USS from /proc/PID/smaps_rollup, RSS (statm) as the fallback."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from raydbg.memory.measure import Roots, parse_meminfo

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
    uss: int  # memory freed if this process dies
    rss: int
    pss: int | None
    swap: int
    source: str  # "smaps_rollup" or "statm"
    start_time: float  # epoch seconds
    oom_score_adj: int | None

    @property
    def memory(self) -> int:
        """Best estimate of what killing it frees."""
        return self.uss if self.source == "smaps_rollup" else self.rss


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def boot_time(roots: Roots) -> float:
    for line in (_read(roots.proc / "stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def parse_stat(text: str) -> tuple[str, int, int]:
    """/proc/PID/stat -> (comm, ppid, starttime in clock ticks)."""
    # comm may contain spaces and parentheses: split at the LAST ')'.
    lpar, rpar = text.find("("), text.rfind(")")
    comm = text[lpar + 1 : rpar]
    rest = text[rpar + 2 :].split()
    # rest[0] is field 3 (state); ppid is field 4, starttime field 22.
    return comm, int(rest[1]), int(rest[19])


def read_proc(pid: int, roots: Roots | None = None, btime: float | None = None) -> ProcMem | None:
    """One process, or None when it is gone or unreadable."""
    roots = roots or Roots()
    base = roots.proc / str(pid)
    stat = _read(base / "stat")
    if stat is None:
        return None
    try:
        comm, ppid, ticks = parse_stat(stat)
    except (ValueError, IndexError):
        return None
    if btime is None:
        btime = boot_time(roots)
    adj_text = _read(base / "oom_score_adj")
    try:
        adj: int | None = int(adj_text) if adj_text is not None else None
    except ValueError:
        adj = None
    rollup = parse_meminfo(_read(base / "smaps_rollup") or "")
    if "Rss" in rollup:
        uss = (
            rollup.get("Private_Clean", 0)
            + rollup.get("Private_Dirty", 0)
            + rollup.get("Private_Hugetlb", 0)
        )
        return ProcMem(
            pid,
            ppid,
            comm,
            uss,
            rollup["Rss"],
            rollup.get("Pss"),
            rollup.get("Swap", 0),
            "smaps_rollup",
            btime + ticks / _HZ,
            adj,
        )
    statm = (_read(base / "statm") or "").split()
    if len(statm) < 2:
        return None
    rss = int(statm[1]) * _PAGE
    return ProcMem(pid, ppid, comm, rss, rss, None, 0, "statm", btime + ticks / _HZ, adj)


def scan(pids: list[int], roots: Roots | None = None) -> dict[int, ProcMem]:
    """Many processes; the vanished are left out."""
    roots = roots or Roots()
    btime = boot_time(roots)
    out: dict[int, ProcMem] = {}
    for pid in pids:
        pm = read_proc(pid, roots, btime)
        if pm is not None:
            out[pid] = pm
    return out
