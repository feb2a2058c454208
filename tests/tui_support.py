"""Test support for the TUI: a scripted in-process gateway and a real debugpy debuggee."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from raydbg.client import GatewayError
from raydbg.dap import open_tcp
from raydbg.dap.framing import ByteReader, ByteWriter
from raydbg.tui.app import RaydbgApp

DEBUGGEE = textwrap.dedent(
    """
    import sys
    import debugpy

    host, port = debugpy.listen(("127.0.0.1", 0))
    print(port, flush=True)
    debugpy.wait_for_client()

    def work(n):
        total = n * 10
        config = {"lr": 0.001, "layers": [64, 64]}
        debugpy.breakpoint()
        total += 1
        total += len(config)
        return total

    result = work(4)
    print("result", result, flush=True)
    sys.stdin.readline()  # stay alive like a Ray worker until the test lets go
    sys.exit(0 if result == 43 else 3)
    """
)


def record(sid: str, since: float, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": sid,
        "job_id": "01000000",
        "task_id": "ab" * 12,
        "task_name": f"train_step_{sid[:3]}",
        "actor_id": None,
        "actor_name": None,
        "train_rank": None,
        "node_id": "n1" * 14,
        "node_ip": "10.0.0.1",
        "pid": 4242,
        "thread_id": 1,
        "thread_name": "MainThread",
        "file": "/app/train.py",
        "line": 12,
        "function": "work",
        "reason": "breakpoint",
        "exception": None,
        "since": since,
        "state": "waiting",
        "attachable": True,
        "cwd": "/app",
    }
    rec.update(extra)
    return rec


class FakeGateway:
    """Implements the TUI's gateway protocol from lists a test edits as it goes."""

    def __init__(self) -> None:
        self.address = "127.0.0.1:9999"
        self.sessions_list: list[dict[str, Any]] = []
        self.nodes_list: list[dict[str, Any]] = []
        self.events_list: list[dict[str, Any]] = []
        self.dap_ports: dict[str, int] = {}
        self.failure: str | None = None
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.failure:
            raise GatewayError(self.failure)

    async def sessions(self) -> list[dict[str, Any]]:
        self._check()
        return list(self.sessions_list)

    async def session(self, sid: str) -> dict[str, Any]:
        self._check()
        for rec in self.sessions_list:
            if rec["id"] == sid:
                return rec
        raise GatewayError(f"no paused session {sid}")

    async def nodes(self) -> list[dict[str, Any]]:
        self._check()
        return list(self.nodes_list)

    async def events(self, limit: int = 100) -> list[dict[str, Any]]:
        self._check()
        return list(self.events_list)[:limit]

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]:
        self._check()
        if sid not in self.dap_ports:
            raise GatewayError(f"no paused session {sid}")
        return await open_tcp("127.0.0.1", self.dap_ports[sid])


def start_debuggee(tmp: Path) -> tuple[subprocess.Popen[str], int, Path]:
    script = tmp / "train.py"
    script.write_text(DEBUGGEE)
    proc = subprocess.Popen(
        [sys.executable, "-Xfrozen_modules=off", str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"debuggee did not start: {line!r}"
    return proc, int(line), script


def now() -> float:
    return time.time()


def record_notices(app: RaydbgApp) -> list[str]:
    notices: list[str] = []
    original = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        notices.append(message)
        original(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return notices


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.05)
