"""`raydbg continue --job ID` / `--all`: the gateway's one route (POST /api/v1/continue), the
client's method and the CLI's flags and one-line errors (a real aiohttp server, the registry faked)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from raydbg import api_errors, cli, registry
from raydbg.client import Gateway, GatewayError
from raydbg.gang import routes
from raydbg.worker import resume

SESSIONS = [
    {"id": "s-a1", "job_id": "01000000", "state": "waiting"},
    {"id": "s-a2", "job_id": "01000000", "state": "attached", "group": "g-7"},
    {"id": "s-a3", "job_id": "01000000", "state": "starting", "group": "g-7"},
    {"id": "s-b1", "job_id": "02000000", "state": "waiting"},
]


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The resume requests the routes write, instead of the registry."""
    out: dict[str, list[str]] = {"session": [], "group": []}
    monkeypatch.setattr(registry, "sessions", lambda: [dict(r) for r in SESSIONS])
    by_key = {registry.SESSION + r["id"]: r for r in SESSIONS}
    monkeypatch.setattr(registry, "get", lambda key, gcs=None: by_key.get(key))
    monkeypatch.setattr(resume, "request_session", out["session"].append)
    monkeypatch.setattr(resume, "request_group", out["group"].append)
    return out


@pytest.fixture
def gateway_address(written: dict[str, list[str]]) -> Iterator[str]:
    """The gang's resume routes served on a loop in a thread (the CLI runs its own asyncio.run)."""
    agent = SimpleNamespace(is_head=True, token="t", node_id="n" * 12)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def start() -> None:
        app = web.Application(middlewares=[api_errors.middleware])  # the agent app's error map
        app.add_routes(routes.resume_and_progress_routes(agent))  # type: ignore[arg-type]
        # The core server's list, for `raydbg continue TARGET` (it resolves the target first).
        app.router.add_get("/api/v1/sessions", _listed)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["runner"] = runner
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        box["address"] = f"127.0.0.1:{port}"
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield str(box["address"])
    finally:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def _listed(request: web.Request) -> web.Response:
    return web.json_response(registry.sessions())


def test_job_continues_that_jobs_sessions_and_groups_only(gateway_address: str,
                                                          written: dict[str, list[str]]) -> None:
    gw = Gateway(gateway_address, "t")
    out = asyncio.run(gw.continue_all("01000000"))
    assert out == {"continued": ["s-a1", "s-a2", "s-a3"], "groups": ["g-7"], "job": "01000000"}
    assert written == {"session": ["s-a1", "s-a2", "s-a3"], "group": ["g-7"]}


def test_all_continues_every_job(gateway_address: str, written: dict[str, list[str]]) -> None:
    out = asyncio.run(Gateway(gateway_address, "t").continue_all())
    assert out["continued"] == ["s-a1", "s-a2", "s-a3", "s-b1"] and out["job"] is None
    assert written["session"] == out["continued"]


def test_bad_bodies_and_nothing_paused_are_one_line_errors(gateway_address: str,
                                                          written: dict[str, list[str]]) -> None:
    gw = Gateway(gateway_address, "t")
    with pytest.raises(GatewayError, match="no paused session of job 03000000"):
        asyncio.run(gw.continue_all("03000000"))
    for body, words in [({}, "job"), ({"job": "01", "all": True}, "job"), ({"all": 1}, "true"),
                        ({"job": "a/b"}, "bad job id"), ({"job": 7}, "bad job id"), ([1], "job"),
                        (None, "job")]:
        with pytest.raises(GatewayError, match=words):
            asyncio.run(gw.post("/api/v1/continue", body=body))
    assert written == {"session": [], "group": []}


def test_all_with_nothing_paused(gateway_address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "sessions", lambda: [])
    with pytest.raises(GatewayError, match="no paused session on the cluster"):
        asyncio.run(Gateway(gateway_address, "t").continue_all())


def _cli(address: str, *args: str) -> list[str]:
    return ["continue", *args, "--address", address]


def test_cli_flags_output_json_and_errors(gateway_address: str, written: dict[str, list[str]],
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAYDBG_TOKEN", "t")
    assert cli.main(_cli(gateway_address, "--job", "01000000")) == 0
    assert capsys.readouterr().out == "raydbg continue: job 01000000: 3 session(s) resume\n"
    assert cli.main(_cli(gateway_address, "--all", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["continued"] == ["s-a1", "s-a2", "s-a3", "s-b1"]
    assert cli.main(_cli(gateway_address, "s-b1")) == 0  # the positional target as before
    assert capsys.readouterr().out == "raydbg continue: session s-b1 resumes\n"

    assert cli.main(_cli(gateway_address, "--job", "0300")) == 1
    assert capsys.readouterr().err == "raydbg: no paused session of job 0300: see `raydbg list`\n"
    assert cli.main(_cli(gateway_address, "--job", "nope!")) == 1
    err = capsys.readouterr().err
    assert err.startswith("raydbg: bad job id 'nope!'") and err.count("\n") == 1
    for argv, words in [(["s-b1", "--job", "01000000"], "not allowed with"),
                        (["--job", "01000000", "--all"], "not allowed with"),
                        ([], "one of the arguments target --job --all is required")]:
        with pytest.raises(SystemExit) as exc:
            cli.main(_cli(gateway_address, *argv))
        assert exc.value.code == 2 and words in capsys.readouterr().err
