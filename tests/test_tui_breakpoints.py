"""The TUI's breakpoints view against a real HTTP gateway speaking the breakpoints API (aiohttp).

The server below implements the issue-18 contract (GET /api/v1/breakpoints, DELETE
/api/v1/breakpoints/{id}, bearer token); the TUI talks to it through its real client
(`HttpGateway`). A snapshot pins the view's looks at 80x24.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from textual.pilot import Pilot
from textual.widgets import Static
from tui_support import FakeGateway, record, until

from raydbg.tui.app import create_app
from raydbg.tui.breakpoint_rows import breakpoint_rows, same_job, summary
from raydbg.tui.breakpoints_view import BreakpointsScreen
from raydbg.tui.format import session_row
from raydbg.tui.gateway import HttpGateway
from raydbg.tui.row_table import RowTable
from raydbg.tui.sessions import with_gang

TOKEN = "bp-s3cret"
JOB_A, JOB_B = "02000000", "03000000"


def bp(bid: str, file: str, line: int, job: str | None, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": bid, "file": file, "line": line, "job": job, "condition": None, "hit_limit": 3,
                           "owner": "cli", "created": 1_780_000_000.0, "hits": 0, "paused": 0}
    out.update(over)
    return out


def armed() -> list[dict[str, Any]]:
    return [
        bp("b0b0", "/app/train.py", 40, JOB_B),
        bp("a2a2", "/app/train.py", 30, JOB_A, condition="step % 100 == 0", hits=7, paused=1),
        bp("e1e1", "/app/data.py", 12, None, owner="vscode-ab12"),
        bp("a1a1", "/app/model.py", 5, JOB_A, hits=2),
    ]


def test_rows_group_by_job_every_job_first() -> None:
    rows = breakpoint_rows(armed())
    assert [k for k, _ in rows] == ["e1e1", "a1a1", "a2a2", "b0b0"]
    assert [r[0] for _, r in rows] == ["every job", JOB_A, "", JOB_B]
    assert rows[2][1] == ("", "a2a2", "train.py:30", "step % 100 == 0", "7", "1/3", "cli")
    assert same_job(armed(), "a2a2") == ["a1a1", "a2a2"]
    assert same_job(armed(), "e1e1") == ["e1e1"]
    assert same_job(armed(), "gone") == []
    assert summary(armed()) == "4 armed in 3 jobs · 9 hits · 1 paused"
    broken = breakpoint_rows([bp("x1", "/a.py", 1, None, condition="x >", error="SyntaxError: invalid syntax")])
    assert broken[0][1][3].startswith("⚠ SyntaxError: invalid") and len(broken[0][1][3]) <= 30


def test_session_paused_at_an_armed_breakpoint_says_which() -> None:
    rec = record("s1", time.time(), breakpoint_id="a2a2")
    assert with_gang(session_row(rec), rec, None)[6] == "breakpoint · bp a2a2"
    plain = record("s2", time.time())
    assert with_gang(session_row(plain), plain, None) == session_row(plain)


class ContractGateway:
    """A real aiohttp server with the gateway's breakpoint routes (and empty sessions, nodes, events)."""

    def __init__(self, bps: list[dict[str, Any]]) -> None:
        self.bps = {b["id"]: b for b in bps}
        self.fail_delete: str | None = None  # an error line DELETE answers with (HTTP 500)
        self.requests: list[str] = []
        self.runner: web.AppRunner | None = None
        self.address = ""

    @web.middleware
    async def auth(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"error": "missing or wrong raydbg token"}, status=401)
        return await handler(request)

    async def list_bps(self, request: web.Request) -> web.Response:
        job = request.query.get("job")
        out = [b for b in self.bps.values() if job is None or b["job"] in (job, None)]
        return web.json_response({"breakpoints": out})

    async def delete_bp(self, request: web.Request) -> web.Response:
        bid = request.match_info["id"]
        if self.fail_delete:
            return web.json_response({"error": self.fail_delete}, status=500)
        if self.bps.pop(bid, None) is None:
            return web.json_response({"error": f"no breakpoint {bid}"}, status=404)
        return web.json_response({"removed": bid})

    async def empty(self, request: web.Request) -> web.Response:
        return web.json_response([])

    async def start(self) -> ContractGateway:
        app = web.Application(middlewares=[self.auth])
        app.add_routes([
            web.get("/api/v1/breakpoints", self.list_bps),
            web.delete("/api/v1/breakpoints/{id}", self.delete_bp),
            web.get("/api/v1/sessions", self.empty),
            web.get("/api/v1/nodes", self.empty),
            web.get("/api/v1/events", self.empty),
        ])
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.address = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[ContractGateway]:
    gw = await ContractGateway(armed()).start()
    yield gw
    await gw.stop()


def bp_table(app: Any) -> RowTable:
    return app.screen.query_one("#bp-table", RowTable)


def status(app: Any) -> str:
    return str(app.screen.query_one("#bp-status", Static).render())


async def open_view(pilot: Pilot[Any], n: int) -> None:
    await pilot.press("b")
    await until(pilot, lambda: isinstance(pilot.app.screen, BreakpointsScreen) and bp_table(pilot.app).row_count == n)


async def test_b_lists_every_jobs_breakpoints_and_follows_changes(server: ContractGateway) -> None:
    app = create_app(HttpGateway(server.address, TOKEN), refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_view(pilot, 4)
        assert bp_table(app).row_keys == ["e1e1", "a1a1", "a2a2", "b0b0"]
        assert "4 armed in 3 jobs · 9 hits · 1 paused" in status(app)
        # Another client arms one and a worker hits another: the view follows without a key.
        server.bps["c3c3"] = bp("c3c3", "/app/eval.py", 9, JOB_B)
        server.bps["a2a2"]["hits"] = 8
        await until(pilot, lambda: bp_table(app).row_count == 5 and "10 hits" in status(app))
        assert bp_table(app).row_keys[-2:] == ["c3c3", "b0b0"]  # eval.py before train.py
        await pilot.press("escape")
        assert not isinstance(app.screen, BreakpointsScreen)
    assert "GET /api/v1/breakpoints" in server.requests


async def test_x_removes_one_and_shift_x_every_one_of_its_job(server: ContractGateway) -> None:
    app = create_app(HttpGateway(server.address, TOKEN), refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_view(pilot, 4)
        await pilot.press("down", "down", "down")  # b0b0, job B's only one
        assert bp_table(app).cursor_key == "b0b0"
        await pilot.press("x")
        await until(pilot, lambda: "b0b0" not in server.bps and bp_table(app).row_count == 3)
        assert "DELETE /api/v1/breakpoints/b0b0" in server.requests
        assert bp_table(app).cursor_key == "a2a2"  # the cursor stays on the last row: job A's second
        await pilot.press("X")
        await until(pilot, lambda: bp_table(app).row_keys == ["e1e1"])
        assert sorted(server.bps) == ["e1e1"]  # every-job one untouched
        assert "1 armed in 1 job" in status(app)


async def test_failed_removal_and_refused_token_are_one_line(server: ContractGateway) -> None:
    server.fail_delete = "registry unavailable: GCS did not answer"
    app = create_app(HttpGateway(server.address, TOKEN), refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_view(pilot, 4)
        await pilot.press("x")
        await until(pilot, lambda: "removing e1e1 failed" in status(app))
        await pilot.pause(0.3)  # later refreshes keep saying it
        text = status(app)
        assert "removing e1e1 failed: registry unavailable: GCS did not answer" in text and "\n" not in text
        assert app.screen.query_one("#bp-status").has_class("error")
        assert bp_table(app).row_count == 4 and "e1e1" in server.bps
        server.fail_delete = None
        await pilot.press("r")
        await until(pilot, lambda: "4 armed" in status(app))
        assert not app.screen.query_one("#bp-status").has_class("error")

    app = create_app(HttpGateway(server.address, "wrong"), refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, BreakpointsScreen) and "refused the token" in status(app))
        assert "retry in" in status(app) and bp_table(app).row_count == 0


class FixedBreakpoints(FakeGateway):
    async def breakpoints(self, job: str | None = None) -> list[dict[str, Any]]:
        self._check()
        return armed()

    async def remove_breakpoint(self, bid: str) -> None:
        self._check()


def test_breakpoints_screen_80x24(snap_compare: Callable[..., bool]) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await open_view(pilot, 4)
        await pilot.pause()

    assert snap_compare(create_app(FixedBreakpoints(), refresh=0.05), run_before=run_before)
