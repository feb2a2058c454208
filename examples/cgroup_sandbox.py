"""A small memory-limited "node": a child memory cgroup (v1 or v2) of our own, for tests and benchmarks.

The kernel's OOM killer inside it can only hit processes in it. Needs write access
to our own cgroup directory (root here). Remove it with `destroy()` (processes are
killed, then the directory is removed).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from raydbg.memory.node_memory import NodeMeasurer


class SandboxError(RuntimeError):
    pass


def own_memory_cgroup() -> tuple[Path, str]:
    """(directory of this process's memory cgroup, "cgroup1"|"cgroup2")."""
    m = NodeMeasurer(psi=False)
    if m.cgroup_dir is None or m.cgroup_kind is None:
        raise SandboxError("no memory cgroup found for this process")
    return m.cgroup_dir, m.cgroup_kind


class ChildCgroup:
    def __init__(
        self, limit_bytes: int, name: str | None = None, parent: Path | None = None
    ) -> None:
        if parent is None:
            parent, self.kind = own_memory_cgroup()
        else:
            self.kind = "cgroup2" if (parent / "memory.max").exists() else "cgroup1"
        self.path = parent / (name or f"raydbg-sandbox-{secrets.token_hex(3)}")
        self.limit = limit_bytes
        try:
            self.path.mkdir()
            if self.kind == "cgroup1":
                (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                try:  # no swap escape hatch: the limit is the limit
                    (self.path / "memory.swappiness").write_text("0")
                except OSError:
                    pass
            else:
                (self.path / "memory.max").write_text(str(limit_bytes))
                try:
                    (self.path / "memory.swap.max").write_text("0")
                except OSError:
                    pass
        except OSError as e:
            raise SandboxError(f"cannot create a child memory cgroup under {parent}: {e}") from e

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def popen(self, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start `cmd` inside the cgroup (it joins before exec, so all its children do too)."""
        procs = str(self.path / "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return subprocess.Popen(cmd, preexec_fn=join, **kw)

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d, _dirs, files in os.walk(self.path):
            if "cgroup.procs" in files:
                text = (Path(d) / "cgroup.procs").read_text()
                out.update(int(x) for x in text.split())
        return sorted(out)

    def oom_kills(self) -> int:
        """Kernel OOM kills inside the cgroup so far."""
        name = "memory.oom_control" if self.kind == "cgroup1" else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        except OSError:
            pass
        return 0

    def usage(self) -> int:
        name = "memory.usage_in_bytes" if self.kind == "cgroup1" else "memory.current"
        return int((self.path / name).read_text())

    def max_usage(self) -> int | None:
        p = self.path / ("memory.max_usage_in_bytes" if self.kind == "cgroup1" else "memory.peak")
        try:
            return int(p.read_text())
        except (OSError, ValueError):
            return None

    def destroy(self, timeout: float = 20.0) -> None:
        """SIGKILL everything left inside, wait for it to go, remove the directory."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids() if self.path.exists() else []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not pids:
                break
            if time.monotonic() > deadline:
                raise SandboxError(f"processes {pids} still in {self.path}")
            time.sleep(0.1)
        while self.path.exists():
            try:
                for d in sorted(self.path.rglob("*"), reverse=True):
                    if d.is_dir():
                        d.rmdir()
                self.path.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def __enter__(self) -> ChildCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
