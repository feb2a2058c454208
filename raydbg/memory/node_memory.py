"""Node memory as the kernel's OOM killer will judge it: cgroup v2, cgroup v1 and
/proc/meminfo, the binding one, and memory pressure (PSI).

`NodeMeasurer` resolves the cgroup of a process once; each `read()` is then a handful of
small file reads. Each process's own memory: process_memory.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from raydbg.memory.kernel_files import Roots, parse_meminfo, read_text

# Values at or above this are "no limit" (v1 writes 2**63 rounded down to a page).
UNLIMITED = 1 << 60


@dataclass(frozen=True)
class View:
    """One way of judging the node: a limit and what counts against it."""

    source: str  # "cgroup2", "cgroup1" or "meminfo"
    path: str  # cgroup directory read, or the meminfo file
    limit: int
    usage: int  # everything charged, page cache included
    reclaimable: int  # page cache the kernel can drop before it OOM-kills

    @property
    def used(self) -> int:
        return max(0, self.usage - self.reclaimable)

    @property
    def available(self) -> int:
        return self.limit - self.used


@dataclass(frozen=True)
class NodeMemory:
    """The binding view (least headroom) plus all views that were readable."""

    used: int
    limit: int
    source: str
    path: str
    views: tuple[View, ...]
    psi: dict[str, float] = field(default_factory=dict)
    ts: float = 0.0

    @property
    def fraction(self) -> float:
        return self.used / self.limit if self.limit > 0 else 0.0

    @property
    def available(self) -> int:
        return self.limit - self.used

    def to_dict(self) -> dict[str, object]:
        return {
            "used": self.used,
            "limit": self.limit,
            "fraction": round(self.fraction, 4),
            "source": self.source,
            "path": self.path,
            "psi": dict(self.psi),
            "ts": self.ts,
        }


def _read_int(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    text = text.strip()
    if text == "max":  # cgroup v2 for "no limit"
        return UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def parse_kv(text: str) -> dict[str, int]:
    """`key value` lines (memory.stat) -> dict; junk lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def parse_psi(text: str) -> dict[str, float]:
    """/proc/pressure/memory -> {"some_avg10": ..., "full_avg60": ...}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        for item in parts[1:]:
            key, _, value = item.partition("=")
            if key.startswith("avg"):
                try:
                    out[f"{kind}_{key}"] = float(value)
                except ValueError:
                    continue
    return out


@dataclass(frozen=True)
class Mount:
    root: str  # the cgroup path that is visible at the mount point ("/" normally)
    point: Path


def _mounts(roots: Roots) -> tuple[Mount | None, Mount | None]:
    """(v1 memory mount, v2 mount) from mountinfo; default layout if unreadable."""
    text = read_text(roots.proc / "self" / "mountinfo")
    v1: Mount | None = None
    v2: Mount | None = None
    if text is None:
        if (roots.sys_cgroup / "memory").is_dir():
            v1 = Mount("/", roots.sys_cgroup / "memory")
        if (roots.sys_cgroup / "cgroup.controllers").exists():
            v2 = Mount("/", roots.sys_cgroup)
        return v1, v2
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf, rf = left.split(), right.split()
        if len(lf) < 5 or len(rf) < 1:
            continue
        fstype, opts = rf[0], (rf[2] if len(rf) > 2 else "")
        if fstype == "cgroup" and "memory" in opts.split(",") and v1 is None:
            v1 = Mount(lf[3], Path(lf[4]))
        elif fstype == "cgroup2" and v2 is None:
            v2 = Mount(lf[3], Path(lf[4]))
    return v1, v2


def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """/proc/PID/cgroup -> (v1 memory path, v2 path)."""
    v1: str | None = None
    v2: str | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def resolve_cgroup_dir(mount: Mount, path: str, probe: str) -> Path | None:
    """The directory of `path` under `mount`, handling the container view.

    In a container the mount shows only the container's own cgroup (mount root is
    that path, or the path named in /proc/self/cgroup simply does not exist under
    the mount): fall back to stripping the mount root, then to the mount root itself.
    """
    rel = path.lstrip("/")
    candidates = [mount.point / rel if rel else mount.point]
    root = mount.root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        stripped = path[len(root) :].lstrip("/")
        candidates.append(mount.point / stripped if stripped else mount.point)
    candidates.append(mount.point)
    for cand in candidates:
        if (cand / probe).exists():
            return cand
    return None


def _v1_view(d: Path, mount: Mount) -> View | None:
    usage = _read_int(d / "memory.usage_in_bytes")
    if usage is None:
        return None
    stat = parse_kv(read_text(d / "memory.stat") or "")
    limit = _read_int(d / "memory.limit_in_bytes") or UNLIMITED
    # hierarchical_memory_limit already folds in every ancestor's limit.
    limit = min(limit, stat.get("hierarchical_memory_limit", UNLIMITED))
    reclaimable = stat.get("total_inactive_file", stat.get("inactive_file", 0)) + stat.get(
        "total_active_file", stat.get("active_file", 0)
    )
    return View("cgroup1", str(d), limit, usage, reclaimable)


def _v2_view(d: Path, mount: Mount) -> View | None:
    usage = _read_int(d / "memory.current")
    if usage is None:
        return None
    stat = parse_kv(read_text(d / "memory.stat") or "")
    # v2 has no hierarchical limit file: walk up to the mount point, keep the smallest.
    limit = UNLIMITED
    cur = d
    while True:
        value = _read_int(cur / "memory.max")
        if value is not None:
            limit = min(limit, value)
        if cur == mount.point or cur.parent == cur:
            break
        cur = cur.parent
    reclaimable = stat.get("inactive_file", 0) + stat.get("active_file", 0)
    return View("cgroup2", str(d), limit, usage, reclaimable)


def _meminfo_view(roots: Roots) -> View | None:
    info = parse_meminfo(read_text(roots.proc / "meminfo") or "")
    total = info.get("MemTotal")
    if not total:
        return None
    avail = info.get("MemAvailable")
    if avail is None:  # very old kernels
        avail = info.get("MemFree", 0) + info.get("Buffers", 0) + info.get("Cached", 0)
    # Express as usage/reclaimable so View.used == MemTotal - MemAvailable.
    return View("meminfo", str(roots.proc / "meminfo"), total, total, avail)


class NodeMeasurer:
    """Reads node memory for the cgroup a process is in (default: this one).

    The cgroup directory is resolved once (it does not move); each `read()` is then
    a handful of small file reads, cheap enough for a 50 ms refresh.
    """

    def __init__(
        self,
        roots: Roots | None = None,
        pid: int | str = "self",
        cgroup_dir: Path | None = None,
        psi: bool = True,
    ) -> None:
        self.roots = roots or Roots()
        self._dir: Path | None = None
        self._kind: str | None = None
        self._mount: Mount | None = None
        self._psi_path: Path | None = None
        v1m, v2m = _mounts(self.roots)
        if cgroup_dir is not None:
            self._dir = Path(cgroup_dir)
            is_v2 = (self._dir / "memory.current").exists()
            self._kind = "cgroup2" if is_v2 else "cgroup1"
            self._mount = Mount("/", self._dir)
        else:
            text = read_text(self.roots.proc / str(pid) / "cgroup") or ""
            p1, p2 = parse_proc_cgroup(text)
            if p1 is not None and v1m is not None:
                self._dir = resolve_cgroup_dir(v1m, p1, "memory.usage_in_bytes")
                self._kind, self._mount = "cgroup1", v1m
            if self._dir is None and p2 is not None and v2m is not None:
                self._dir = resolve_cgroup_dir(v2m, p2, "memory.current")
                self._kind, self._mount = "cgroup2", v2m
        if psi:
            for cand in (
                self._dir / "memory.pressure" if self._kind == "cgroup2" and self._dir else None,
                self.roots.proc / "pressure" / "memory",
            ):
                if cand is not None and read_text(cand) is not None:
                    self._psi_path = cand
                    break

    @property
    def cgroup_dir(self) -> Path | None:
        return self._dir

    @property
    def cgroup_kind(self) -> str | None:
        return self._kind

    def views(self) -> list[View]:
        out: list[View] = []
        if self._dir is not None and self._mount is not None:
            reader = _v2_view if self._kind == "cgroup2" else _v1_view
            view = reader(self._dir, self._mount)
            if view is not None:
                out.append(view)
        mi = _meminfo_view(self.roots)
        if mi is not None:
            out.append(mi)
        return out

    def read(self) -> NodeMemory:
        views = self.views()
        if not views:
            raise OSError(f"no memory information under {self.roots.proc} or cgroup")
        # A cgroup without a limit is bounded by the machine; of the rest, the view with
        # the least headroom is the one whose OOM killer fires first.
        limited = [v for v in views if v.limit < UNLIMITED] or views
        best = min(limited, key=lambda v: (v.available, v.limit))
        psi = parse_psi(read_text(self._psi_path) or "") if self._psi_path else {}
        return NodeMemory(
            used=best.used,
            limit=best.limit,
            source=best.source,
            path=best.path,
            views=tuple(views),
            psi=psi,
            ts=time.time(),
        )

    def pids(self) -> list[int]:
        """Processes in the measured cgroup (all processes when there is none)."""
        if self._dir is not None:
            found: set[int] = set()
            # Child cgroups are charged to this one too (hierarchy), so walk them.
            for dirpath, _dirs, files in os.walk(self._dir):
                if "cgroup.procs" in files:
                    text = read_text(Path(dirpath) / "cgroup.procs") or ""
                    found.update(int(x) for x in text.split() if x.isdigit())
            if found or (self._dir / "cgroup.procs").exists():
                return sorted(found)
        try:
            return sorted(int(n) for n in os.listdir(self.roots.proc) if n.isdigit())
        except OSError:
            return []


