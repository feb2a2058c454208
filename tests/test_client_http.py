"""The gateway client against a real local HTTP server: JSON in and out, one-line errors,
and discovery through the head's gateway file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from raydbg import client
from raydbg.client import Gateway, GatewayError
from raydbg.private_dir import private_dir


async def _serve(routes: list[web.RouteDef]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"127.0.0.1:{port}"


async def test_json_body_token_and_errors() -> None:
    seen: dict[str, Any] = {}

    async def echo(request: web.Request) -> web.Response:
        seen["auth"] = request.headers.get("Authorization")
        seen["body"] = await request.json()
        return web.json_response({"got": seen["body"], "method": request.method})

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "nope"}, status=401)

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"error": "no breakpoint b1"}, status=404)

    async def text(request: web.Request) -> web.Response:
        return web.Response(text="<html>hi</html>")

    runner, address = await _serve([web.put("/echo", echo), web.get("/refuse", refuse),
                                    web.delete("/missing", missing), web.get("/text", text)])
    try:
        gw = Gateway(address, "tok")
        assert await gw.put("/echo", {"a": [1, 2]}) == {"got": {"a": [1, 2]}, "method": "PUT"}
        assert seen == {"auth": "Bearer tok", "body": {"a": [1, 2]}}
        with pytest.raises(GatewayError, match="refused the token"):
            await gw.get("/refuse")
        with pytest.raises(GatewayError, match="^no breakpoint b1$"):
            await gw.delete("/missing")
        with pytest.raises(GatewayError, match="not JSON"):
            await gw.get("/text")
    finally:
        await runner.cleanup()


async def test_unreachable_and_bad_address_are_one_line_errors() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(GatewayError, match="cannot connect to the raydbg gateway"):
        await Gateway(f"127.0.0.1:{port}", "t").get("/api/v1/status")
    with pytest.raises(GatewayError, match="is not HOST:PORT"):
        await Gateway("nowhere", "t").get("/api/v1/status")


def test_ray_address_uses_the_head_gateway_file_of_that_cluster_only(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    gw_file = private_dir(str(tmp_path)) / "gateway.json"
    assert gw_file.parent.name == f"raydbg-{os.getuid()}"
    gw_file.write_text(json.dumps({"address": "10.0.0.1:7000", "gcs_address": "10.0.0.1:6379"}))
    assert client._local_gateway_file(tmp_path, gcs_address="10.0.0.1:6379") == "10.0.0.1:7000"
    assert client._local_gateway_file(tmp_path, gcs_address="10.0.0.2:6379") is None
    assert client._local_gateway_file(tmp_path) == "10.0.0.1:7000"
    monkeypatch.setattr(client, "LOCAL_SESSION", tmp_path)
    monkeypatch.delenv("RAYDBG_GATEWAY", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert client.find_gateway() == "10.0.0.1:7000"


def test_a_gateway_file_left_by_a_dead_agent_is_ignored(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that existed and is gone (not reused this quickly)
    gw_file = private_dir(str(tmp_path)) / "gateway.json"
    gw_file.write_text(json.dumps({"address": "10.0.0.1:7000", "pid": gone.pid}))
    assert client._local_gateway_file(tmp_path) is None
    gw_file.write_text(json.dumps({"address": "10.0.0.1:7000", "pid": os.getpid()}))
    assert client._local_gateway_file(tmp_path) == "10.0.0.1:7000"
