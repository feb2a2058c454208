"""Reading a job's record in e2e tests: `raydbg history show` (no cluster needed) until it holds what is awaited."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster import RAYDBG, REPO


def history(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`raydbg history ARGS` with no RAY_ADDRESS: it needs no cluster."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYDBG_GATEWAY")}
    return subprocess.run([*RAYDBG, "history", *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def shown_until(name: str, where: Path, ready: Callable[[dict[str, Any]], bool], timeout: float = 90) -> dict[str, Any]:
    """`history show NAME WHERE --json` once `ready(view)` (the writer flushes every few seconds)."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        out = history("show", name, str(where), "--json")
        last = out.stdout[-2000:] + out.stderr[-2000:]
        if out.returncode == 0:
            view = json.loads(out.stdout)
            if ready(view):
                return dict(view)
        time.sleep(2.0)
    raise AssertionError(f"the record of {name} never held what was awaited:\n{last}")
