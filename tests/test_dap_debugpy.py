"""The DAP client against a real debugpy in a subprocess, over TCP and over a WebSocket hop."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from raydbg.dap import DapClient, attach_session, open_tcp, open_websocket

DEBUGGEE = textwrap.dedent(
    """
    import sys
    import debugpy

    host, port = debugpy.listen(("127.0.0.1", 0))
    print(port, flush=True)
    debugpy.wait_for_client()

    def work():
        x = 41
        names = {"a": [1, 2, 3]}
        debugpy.breakpoint()
        y = x + 1
        return y + len(names)

    result = work()
    print("result", result, flush=True)
    sys.exit(0 if result == 43 else 3)
    """
)


@pytest.fixture
def debuggee(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    script = tmp_path / "debuggee.py"
    script.write_text(DEBUGGEE)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"debuggee did not start: {line!r} {proc.stderr}"
        yield proc, int(line)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def inspect_and_continue(client: DapClient, thread_id: int) -> None:
    frames = await client.stack_trace(thread_id)
    top = frames[0]
    assert top["name"] == "work"
    assert top["source"]["path"].endswith("debuggee.py")
    source_line = Path(top["source"]["path"]).read_text().splitlines()[top["line"] - 1]
    assert "y = x + 1" in source_line  # debugpy stops on the line after its breakpoint()

    scopes = await client.scopes(top["id"])
    local = next(s for s in scopes if s["name"].lower().startswith("locals"))
    variables = {v["name"]: v for v in await client.variables(local["variablesReference"])}
    assert variables["x"]["value"] == "41"
    names = await client.variables(variables["names"]["variablesReference"])
    assert any(v["name"] == "'a'" and v["value"] == "[1, 2, 3]" for v in names)

    assert (await client.evaluate("x * 2", frame_id=top["id"]))["result"] == "82"

    # `next` moves one line; register for the event before sending the request.
    stopped = client.expect_event("stopped")
    await client.next(thread_id)
    await client.wait_for_event("stopped", future=stopped)
    moved = (await client.stack_trace(thread_id))[0]
    assert moved["name"] == "work" and moved["line"] > top["line"]

    await client.continue_(thread_id)
    await client.disconnect()


async def test_attach_over_tcp(debuggee: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = debuggee
    reader, writer = await open_tcp("127.0.0.1", port)
    client, stopped = await attach_session(reader, writer, timeout=15)
    assert stopped["body"]["reason"] in ("breakpoint", "pause", "step")
    threads = await client.threads()
    assert stopped["body"]["threadId"] in [t["id"] for t in threads]
    await inspect_and_continue(client, stopped["body"]["threadId"])
    out, _ = await asyncio.to_thread(proc.communicate, timeout=20)
    assert proc.returncode == 0, out
    assert "result 43" in out


@contextlib.asynccontextmanager
async def websocket_bridge(port: int) -> AsyncIterator[str]:
    """A stand-in for the relay: bytes between a WebSocket and debugpy's TCP port."""

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def upstream() -> None:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    writer.write(msg.data)
                    await writer.drain()
            writer.close()

        task = asyncio.create_task(upstream())
        while data := await reader.read(1000):  # re-chunked: boundaries carry no meaning
            await ws.send_bytes(data)
        await ws.close()
        await task
        return ws

    app = web.Application()
    app.router.add_get("/api/v1/sessions/{id}/dap", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"ws://127.0.0.1:{runner.addresses[0][1]}/api/v1/sessions/s1/dap"
    finally:
        await runner.cleanup()


async def test_attach_over_websocket(debuggee: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = debuggee
    async with websocket_bridge(port) as url:
        reader, writer = await open_websocket(url, "token")
        client, stopped = await attach_session(reader, writer, timeout=15)
        await inspect_and_continue(client, stopped["body"]["threadId"])
        out, _ = await asyncio.to_thread(proc.communicate, timeout=20)
    assert proc.returncode == 0, out
