"""Node-local "what runs in this worker now" records, written at task start, read by the monitor.

Why: GCS task events reach GCS about a second after a task starts (Ray batches
them), and a task growing at 1 GB/s can fill a node within that second; a busy
worker GCS does not know yet would count as unknown (non-retriable) and could not
be marked for the start gate. The start gate (gate.py) already runs at every task
start, so it drops one small file per worker in a tmpfs: ~30 us, no network.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def run_dir() -> Path:
    base = os.environ.get("RAYDBG_RUN_DIR")
    if base:
        return Path(base)
    shm = Path("/dev/shm")
    root = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path("/tmp")
    return root / f"raydbg-{os.getuid()}" / "tasks"


def write_running(
    task_id: str,
    attempt: int,
    name: str,
    job_id: str,
    directory: Path | None = None,
    held: bool = False,
) -> None:
    d = directory or run_dir()
    d.mkdir(parents=True, exist_ok=True)
    rec: dict[str, Any] = {"task_id": task_id, "attempt": attempt, "name": name}
    rec.update(job_id=job_id, start=time.time(), held=held)
    tmp = d / f".{os.getpid()}.tmp"
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, d / str(os.getpid()))  # atomic: a reader never sees half a record


def read_running(pids: list[int], directory: Path | None = None) -> dict[int, dict[str, Any]]:
    d = directory or run_dir()
    out: dict[int, dict[str, Any]] = {}
    for pid in pids:
        try:
            out[pid] = json.loads((d / str(pid)).read_text())
        except (OSError, ValueError):
            continue
    return out


def prune(directory: Path | None = None, proc: Path = Path("/proc")) -> int:
    """Remove the records of processes that are gone (the monitor does this now and then)."""
    d = directory or run_dir()
    n = 0
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for name in names:
        if name.isdigit() and not (proc / name).exists():
            try:
                (d / name).unlink()
                n += 1
            except OSError:
                pass
    return n
