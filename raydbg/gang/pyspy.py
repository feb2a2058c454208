"""Python stacks of one process with py-spy (`py-spy dump --json`), parsed into WorkerStacks threads (agent side)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from typing import Any

from raydbg.gang.frames import Frame

DEFAULT_TIMEOUT_S = 5.0
# --native unwinds every thread's C stack too: seconds per worker on a loaded machine
# (5 s was exceeded by all 4 Train workers of tests/e2e/test_gang_stacks.py at load 28).
NATIVE_TIMEOUT_S = 12.0


class StackError(Exception):
    """Stacks of one process could not be taken; the message says why, in one line."""


def find_pyspy() -> str | None:
    """RAYDBG_PYSPY, else py-spy next to this interpreter (ray[default] installs it there), else PATH."""
    if os.environ.get("RAYDBG_PYSPY"):
        return os.environ["RAYDBG_PYSPY"]
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def parse_dump(data: Any) -> list[dict[str, Any]]:
    """py-spy's JSON (a list of threads, frames innermost first) -> contract threads."""
    threads = []
    for t in data if isinstance(data, list) else []:
        frames: list[Frame] = [
            {"function": str(f.get("name", "?")), "file": str(f.get("filename", "?")),
             "line": int(f.get("line") or 0)}
            for f in t.get("frames") or []
        ]
        threads.append({
            "thread_id": int(t.get("thread_id") or 0),
            "native_id": t.get("os_thread_id"),
            "name": t.get("thread_name") or f"Thread-{t.get('os_thread_id')}",
            "idle": not bool(t.get("active")),
            "frames": frames,
        })
    return threads


async def dump(pid: int, native: bool = False, timeout: float = DEFAULT_TIMEOUT_S,
               pyspy: str | None = None) -> list[dict[str, Any]]:
    """Every thread's stack of `pid` (idle ones too). Raises StackError, never hangs past timeout."""
    exe = pyspy or find_pyspy()
    if exe is None:
        raise StackError("py-spy not found (it ships with ray[default])")
    cmd = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else [])
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise StackError(f"py-spy could not start: {exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise StackError(f"py-spy took longer than {timeout:g}s on pid {pid}") from None
    if proc.returncode != 0:
        # The first line says what happened; py-spy may add a Rust backtrace after it.
        text = [ln for ln in (err or out).decode(errors="replace").splitlines() if ln.strip()]
        raise StackError(f"py-spy failed on pid {pid}: {text[0].strip() if text else f'exit {proc.returncode}'}")
    try:
        return parse_dump(json.loads(out))
    except ValueError as exc:
        raise StackError(f"py-spy printed no JSON for pid {pid}: {exc}") from None
