"""The VS Code extension's own modules (run in node) against a real local Ray cluster with raydbg.

A task pauses at breakpoint(); the extension's view model lists it through the real
gateway; the extension's inline debug adapter is made in node; a DAP client here plays
VS Code (its messages reach the adapter over a test-only unix socket, as VS Code hands
them over in-process), attaches with the extension's config as its arguments, sees the
breakpoint line as the top frame, continues, and the task returns its result. The node
process listens on no TCP port while attached.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import vscode_targets
from raydbg_cluster import raydbg_cluster
from vscode_support import EXT, npm

from raydbg.client import Gateway
from raydbg.dap.session import attach_session

pytestmark = pytest.mark.e2e
DRIVER = EXT / "out" / "test" / "integration" / "attachDriver.js"


@pytest.fixture(scope="module")
def driver() -> Path:
    """Compile the extension (installing its locked dependencies first if needed)."""
    npm("run", "compile")
    assert DRIVER.exists()
    return DRIVER


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    # Workers cannot import tests/ modules; the target goes by value (file and lines stay).
    with raydbg_cluster(vscode_targets):
        yield Gateway.discover()


class Driver:
    """The node process; its stdout is one JSON event per line."""

    def __init__(self, script: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["node", str(script)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def expect(self, name: str, timeout: float = 150) -> dict[str, Any]:
        while True:
            try:
                ev = self.events.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"node driver sent no {name!r} within {timeout}s") from None
            assert ev["event"] != "fatal", ev["message"]
            if ev["event"] == name:
                return ev

    def finish(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        closed = self.expect("closed", timeout=30)
        assert self.proc.wait(30) == 0
        return closed

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


async def attach_through(path: str, config: dict[str, Any]) -> dict[str, Any]:
    """What VS Code does with the extension's config: attach (the whole config is the
    attach request's arguments, as VS Code sends it), look, continue."""
    reader, writer = await asyncio.open_unix_connection(path)
    args = {**config, "__sessionId": "vscode-session-1"}
    client, stopped = await attach_session(reader, writer, attach_arguments=args, timeout=30)
    thread_id = stopped["body"]["threadId"]
    frames = await client.stack_trace(thread_id)
    await client.continue_(thread_id)
    await client.disconnect()
    return {"top": frames[0], "stopped": stopped}


def test_extension_lists_relays_and_debugs_a_paused_task(gateway: Gateway, driver: Path,
                                                         tmp_path: Path) -> None:
    line = vscode_targets.line_of("vscode")
    ref = ray.remote(vscode_targets.vscode_paused_task).remote(5)
    workspace = str(tmp_path / "workspace")
    env = {**os.environ, "RAYDBG_GATEWAY": gateway.address, "RAYDBG_TOKEN": gateway.token,
           "RAYDBG_FUNCTION": "vscode_paused_task", "RAYDBG_WORKSPACE": workspace}
    node = Driver(driver, env)
    try:
        # 1. The Ray view's model lists the paused task, live from the gateway's stream.
        listed = node.expect("listed")
        rec = listed["session"]
        assert rec["line"] == line and rec["file"] == vscode_targets.FILE
        assert listed["label"].endswith("vscode_paused_task")
        assert listed["description"] == f"vscode_targets.py:{line} · breakpoint"
        assert listed["contextValue"] == "raydbg.session.attachable"
        assert listed["live"] is True

        # 2. Attach: the extension's own debug type naming the session; no host, no port.
        config = node.expect("prepared")["config"]
        assert config["type"] == "raydbg" and config["request"] == "attach"
        assert "connect" not in config and "port" not in config
        assert config["raydbgSessionId"] == rec["id"] and config["raydbgCluster"] == "it"
        assert config["justMyCode"] is False
        cwd = rec["cwd"]
        assert config["pathMappings"] == ([{"localRoot": workspace, "remoteRoot": cwd}] if cwd else [])

        # 3. An adapter with a wrong token: the real gateway refuses; VS Code's request is
        #    answered with the reason and the session ends.
        bad = node.expect("badtoken")
        assert bad["error"]["reason"] == "auth", bad
        assert "rejected the token (HTTP 401)" in bad["error"]["message"]
        answer = next(m for m in bad["messages"] if m["type"] == "response")
        assert answer["command"] == "initialize" and answer["success"] is False
        assert bad["messages"][-1]["event"] == "terminated"

        # 4. A DAP client attaches through the extension's adapter: top frame is the breakpoint.
        path = node.expect("bridge")["path"]
        seen = asyncio.run(attach_through(path, config))
        assert seen["top"]["line"] == line
        mapped = vscode_targets.FILE
        if cwd and vscode_targets.FILE.startswith(cwd.rstrip("/") + "/"):
            mapped = workspace + vscode_targets.FILE[len(cwd.rstrip("/")):]
        assert seen["top"]["source"]["path"] == mapped

        # 5. Continued: the task finishes with its real result.
        assert ray.get(ref, timeout=60) == 16
        closed = node.finish()
        assert closed["errors"] == [], closed
        assert closed["tcpWhileAttached"] == [], closed
    finally:
        node.kill()
