"""Pilot tests of the main screen: live sessions, filter, notices, cluster, events, errors."""

from __future__ import annotations

import time
from typing import Any

import pytest
from textual.widgets import Input
from tui_support import FakeGateway, record, record_notices, until

from raydbg.tui.app import RaydbgApp, create_app
from raydbg.tui.cluster import ClusterPane
from raydbg.tui.events import EventDetail, EventsPane
from raydbg.tui.help_screen import HelpScreen
from raydbg.tui.main_screen import runs_line
from raydbg.tui.messages import AttachRequested
from raydbg.tui.row_table import RowTable
from raydbg.tui.sessions import SessionsPane


def shown_ids(app: RaydbgApp) -> list[str]:
    return app.screen.query_one("#sessions-table", RowTable).row_keys


@pytest.fixture
def gateway() -> FakeGateway:
    gw = FakeGateway()
    now = time.time()
    gw.sessions_list = [
        record("old000000001", now - 300, task_name="preprocess"),
        record("new000000002", now - 10, task_name="Trainer.step", train_rank=1),
    ]
    gw.nodes_list = [
        {
            "node_id": "w" * 28,
            "node_ip": "10.0.0.2",
            "is_head": False,
            "alive": True,
            "memory": {"used": 15 * 1024**3, "limit": 16 * 1024**3},
            "gpus": [{"index": 0, "used": 1024**3, "total": 80 * 1024**3}],
            "workers": 4,
            "agent": {"port": 1},
        },
        {
            "node_id": "h" * 28,
            "node_ip": "10.0.0.1",
            "is_head": True,
            "alive": True,
            "memory": {"used": 2 * 1024**3, "limit": 8 * 1024**3},
            "gpus": [],
            "workers": 2,
            "agent": {"port": 2},
        },
    ]
    gw.events_list = [
        {
            "id": "e1",
            "ts": now - 60,
            "kind": "memory.kill",
            "node_id": "w" * 28,
            "message": "killed pid 77 (retriable task grow) at 96% of 16G",
            "details": {"victim": {"pid": 77}, "threshold": 0.95},
        },
    ]
    return gw


async def test_sessions_live_newest_first_with_notice(gateway: FakeGateway) -> None:
    app = create_app(gateway, refresh=0.05)
    notices = record_notices(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(shown_ids(app)) == 2)
        assert shown_ids(app) == ["new000000002", "old000000001"]
        assert notices == []  # what was already paused at start is not "new"
        gateway.sessions_list.append(record("newest000003", time.time(), task_name="eval"))
        await until(pilot, lambda: shown_ids(app)[0] == "newest000003")
        assert any("eval paused at /app/train.py:12" in n for n in notices)
        gateway.sessions_list = [r for r in gateway.sessions_list if r["id"] != "old000000001"]
        await until(pilot, lambda: "old000000001" not in shown_ids(app))
        assert app.screen.query_one(SessionsPane).border_title == "Paused sessions (2)"


async def test_filter_and_enter_requests_attach(gateway: FakeGateway) -> None:
    app = create_app(gateway, refresh=0.05)
    requested: list[str] = []
    app.open_debug = requested.append  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(shown_ids(app)) == 2)
        await pilot.press("slash", *"prepro")
        assert app.screen.query_one("#session-filter", Input).has_focus
        await until(pilot, lambda: shown_ids(app) == ["old000000001"])
        await pilot.press("enter", "enter")  # leave the filter box, then attach
        assert requested == ["old000000001"]
        await pilot.press("slash", "escape")
        await until(pilot, lambda: len(shown_ids(app)) == 2)
        assert not app.screen.query_one("#session-filter", Input).display


async def test_cluster_and_events_panes(gateway: FakeGateway) -> None:
    app = create_app(gateway, refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        cluster = app.screen.query_one(ClusterPane)
        await until(pilot, lambda: cluster.row_count == 2)
        head = cluster.get_row_at(0)
        assert head[0] == "10.0.0.1 (head)" and "25%" in head[1].plain and head[4] == "up"
        worker = cluster.get_row_at(1)
        assert "94%" in worker[1].plain and worker[2] == "0:1.0G/80.0G"
        events = app.screen.query_one(EventsPane)
        await until(pilot, lambda: events.row_count == 1)
        assert events.get_row_at(0)[1] == "memory.kill"
        events.focus()
        await pilot.press("enter")
        assert isinstance(app.screen, EventDetail)
        await pilot.press("escape")
        assert not isinstance(app.screen, EventDetail)


def steps_run(name: str, ranks: int, step: int, stragglers: list[int] | None = None) -> dict[str, Any]:
    return {"job_id": "01000000", "train_run": name, "stragglers": stragglers or [],
            "ranks": [{"world_rank": r, "step": step - (r % 2), "last_progress_s": 1.0 + r} for r in range(ranks)]}


def test_runs_line_names_each_run_and_the_key() -> None:
    assert runs_line(None) == "g: gang view (stacks, ranks, pause)"
    assert runs_line([]).startswith("no Train run running · g: gang view")
    line = runs_line([steps_run("ddp-a", 4, 32, [2]), steps_run("fsdp-b", 1, 5)])
    assert line == ("Train runs: ddp-a (4 ranks, step 32, 1s ago, straggler: rank 2), fsdp-b (1 rank, step 5, 1s ago)"
                    " · g: gang view (stacks, ranks, pause)")


async def test_the_main_screen_shows_running_train_runs_and_g_opens_them(gateway: FakeGateway) -> None:
    from raydbg.tui.gang_view import GangScreen

    app = create_app(gateway, refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        runs = app.screen.query_one("#runs")
        await until(pilot, lambda: "no Train run running" in str(runs.render()))
        gateway.runs_list = [steps_run("ddp-a", 2, 7)]
        # Live: a run that starts shows without a key press.
        await until(pilot, lambda: "Train runs: ddp-a (2 ranks, step 7" in str(runs.render()))
        assert "g: gang view" in str(runs.render())
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GangScreen))


async def test_gateway_down_is_shown_and_retried(gateway: FakeGateway) -> None:
    gateway.failure = "cannot connect to the raydbg gateway at 127.0.0.1:9999"
    app = create_app(gateway, refresh=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        status = app.screen.query_one("#status")
        await until(pilot, lambda: "retry in" in str(status.render()))
        assert "cannot connect to the raydbg gateway" in str(status.render())
        assert status.has_class("error")
        calls = gateway.calls
        gateway.failure = None
        await until(pilot, lambda: "connected" in str(status.render()), timeout=8)
        assert gateway.calls > calls and not status.has_class("error")
        await until(pilot, lambda: len(shown_ids(app)) == 2)


async def test_help_and_quit(gateway: FakeGateway) -> None:
    app = create_app(gateway, refresh=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_attach_requested_message_pushes_debug_screen(gateway: FakeGateway) -> None:
    from raydbg.tui.debug_screen import DebugScreen

    app = create_app(gateway, refresh=0.05, attach_timeout=1)
    notices = record_notices(app)
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(AttachRequested("new000000002"))  # no DAP port: attach must fail
        await until(pilot, lambda: any("cannot attach" in n for n in notices))
        await until(pilot, lambda: not isinstance(app.screen, DebugScreen))
        assert any("no paused session new000000002" in n for n in notices)
