"""Test support for the TUI: a scripted in-process gateway and a real debugpy debuggee."""

from __future__ import annotations

import asyncio
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

    def helper(v):
        doubled = v * 2
        return doubled

    def work(n):
        total = n * 10
        config = {"lr": 0.001, "layers": [64, 64]}
        debugpy.breakpoint()
        total += 1
        total += helper(len(config))
        return total

    result = work(4)
    print("result", result, flush=True)
    sys.stdin.readline()  # stay alive like a Ray worker until the test lets go
    sys.exit(0 if result == 45 else 3)
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
        self.scripted: dict[str, ScriptedDebuggee] = {}
        self.sessions_list: list[dict[str, Any]] = []
        self.nodes_list: list[dict[str, Any]] = []
        self.events_list: list[dict[str, Any]] = []
        self.runs_list: list[dict[str, Any]] = []  # the steps answer's runs (the main screen's runs line)
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

    async def steps(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        self._check()
        return {"runs": list(self.runs_list), "errors": []}

    async def connect_dap(self, sid: str) -> tuple[ByteReader, ByteWriter]:
        self._check()
        if sid in self.scripted:
            return await self.scripted[sid].connect()
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


SCRIPTED_SOURCE = '''import torch


def train_step(batch, model, lr=0.001):
    """One optimisation step."""
    loss = model(batch).mean()
    breakpoint()
    loss.backward()
    for p in model.parameters():
        p.data -= lr * p.grad
    return loss.item()
'''


class ScriptedDebuggee:
    """A deterministic debugpy stand-in on an in-memory pipe (for snapshot tests)."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    async def connect(self) -> tuple[ByteReader, ByteWriter]:
        from dap_peer import FakePeer

        peer = FakePeer()
        asyncio.get_running_loop().create_task(self._serve(peer))
        return peer.client_reader, peer.client_writer

    async def _serve(self, peer: Any) -> None:
        replies: dict[str, dict[str, Any]] = {
            "initialize": {"supportsConfigurationDoneRequest": True},
            "threads": {"threads": [{"id": 1, "name": "MainThread"}]},
            "stackTrace": {
                "stackFrames": [
                    {
                        "id": 11,
                        "name": "train_step",
                        "line": 8,
                        "column": 1,
                        "source": {"path": "/app/train.py"},
                    },
                    {
                        "id": 12,
                        "name": "main",
                        "line": 40,
                        "column": 1,
                        "source": {"path": "/app/train.py"},
                    },
                    {
                        "id": 13,
                        "name": "execute_task",
                        "line": 512,
                        "column": 1,
                        "source": {"path": "/ray/_private/worker.py"},
                    },
                ]
            },
            "scopes": {
                "scopes": [
                    {"name": "Locals", "variablesReference": 100},
                    {"name": "Globals", "variablesReference": 200},
                ]
            },
            "evaluate": {"result": repr(SCRIPTED_SOURCE), "variablesReference": 0},
        }
        variables = {
            100: [
                {
                    "name": "batch",
                    "value": "tensor(...)",
                    "type": "Tensor",
                    "variablesReference": 101,
                    "evaluateName": "batch",
                },
                {
                    "name": "loss",
                    "value": "tensor(0.6931)",
                    "type": "Tensor",
                    "variablesReference": 102,
                    "evaluateName": "loss",
                },
                {"name": "lr", "value": "0.001", "type": "float", "variablesReference": 0},
                {
                    "name": "model",
                    "value": "Linear(in_features=8, out_features=1)",
                    "type": "Linear",
                    "variablesReference": 103,
                },
            ],
        }
        tensor_info = {
            "batch": "((32, 8), 'torch.float32', 'cpu')",
            "loss": "((), 'torch.float32', 'cpu')",
        }
        attach: dict[str, Any] | None = None
        while True:
            try:
                request = await peer.read(timeout=3600)
            except Exception:
                return
            command = request["command"]
            self.commands.append(command)
            if command == "attach":
                attach = request
                peer.event("initialized")
                continue
            if command == "configurationDone":
                peer.respond(request)
                assert attach is not None
                peer.respond(attach)
                peer.event("stopped", {"reason": "breakpoint", "threadId": 1})
                continue
            if command == "variables":
                ref = request["arguments"]["variablesReference"]
                peer.respond(request, {"variables": variables.get(ref, [])})
                continue
            if command == "evaluate" and request["arguments"]["context"] == "watch":
                name = request["arguments"]["expression"].split("(")[2].split(".")[0]
                peer.respond(request, {"result": tensor_info[name], "variablesReference": 0})
                continue
            if command == "disconnect":
                peer.respond(request)
                peer.close()
                return
            peer.respond(request, replies.get(command, {}))
