"""Snapshot tests (pytest-textual-snapshot) of the main screens with fixed data.

Update after an intended change of looks: pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from textual.css.query import NoMatches
from textual.pilot import Pilot
from tui_support import FakeGateway, ScriptedDebuggee, record, until

from raydbg.client import GatewayError
from raydbg.tui.app import create_app
from raydbg.tui.debug_screen import DebugScreen
from raydbg.tui.row_table import RowTable

SnapCompare = Callable[..., bool]
EPOCH = 1_780_000_000.0  # a fixed instant for event times


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def fixed_gateway() -> FakeGateway:
    gw = FakeGateway()
    ago = time.time() - 630  # ages render as "10m" for half a minute either side
    gw.sessions_list = [
        record("a1b2c3d4e5f6", ago, task_name="TrainWorker.train_step", train_rank=0),
        record(
            "0f9e8d7c6b5a",
            ago - 3600,
            task_name="preprocess",
            line=88,
            file="/app/data.py",
            reason="exception",
            state="attached",
            exception={"type": "ValueError", "message": "image 17 is 0x0"},
        ),
        record(
            "123456abcdef",
            ago - 60,
            task_name="evaluate",
            state="starting",
            node_ip="10.0.0.2",
            attachable=False,
        ),
    ]
    gw.nodes_list = [
        {
            "node_id": "h" * 28,
            "node_ip": "10.0.0.1",
            "is_head": True,
            "alive": True,
            "memory": {"used": 6 * 1024**3, "limit": 16 * 1024**3},
            "gpus": [],
            "workers": 3,
            "agent": {"port": 1},
        },
        {
            "node_id": "w" * 28,
            "node_ip": "10.0.0.2",
            "is_head": False,
            "alive": True,
            "memory": {"used": 61 * 1024**3, "limit": 64 * 1024**3},
            "gpus": [{"index": 0, "used": 70 * 1024**3, "total": 80 * 1024**3}],
            "workers": 9,
            "agent": {"port": 1},
        },
    ]
    gw.events_list = [
        {
            "id": "e2",
            "ts": EPOCH,
            "kind": "memory.kill",
            "node_id": "w" * 28,
            "message": "killed pid 812 (retriable task grow, newest of 4) at 96% of 64G",
            "details": {"victim": {"pid": 812, "uss": 9 * 1024**3}, "threshold": 0.95},
        },
        {
            "id": "e1",
            "ts": EPOCH - 90,
            "kind": "session.timeout",
            "node_id": "h" * 28,
            "message": "session 99 (work at /app/train.py:12) timed out",
            "details": {},
        },
    ]
    return gw


def rows(pilot: Pilot[Any], selector: str) -> int:
    try:
        return int(pilot.app.screen.query_one(selector, RowTable).row_count)
    except NoMatches:  # not mounted yet
        return -1


def loaded(gw: FakeGateway) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await until(pilot, lambda: rows(pilot, "#sessions-table") == 3)
        await until(pilot, lambda: rows(pilot, "#events") == 2 and rows(pilot, "#cluster") == 2)
        await pilot.pause()

    return run_before


def test_main_screen_80x24(snap_compare: SnapCompare, utc: None) -> None:
    gw = fixed_gateway()
    assert snap_compare(create_app(gw, refresh=0.05), run_before=loaded(gw))


class DownOnceGateway(FakeGateway):
    """Fails the first call, then never answers: the first retry delay stays on screen."""

    async def sessions(self) -> list[dict[str, Any]]:
        if self.calls:
            await asyncio.Event().wait()
        self.calls += 1
        raise GatewayError("cannot connect to the raydbg gateway at 127.0.0.1:9999")


def test_main_screen_gateway_down(snap_compare: SnapCompare) -> None:
    gw = DownOnceGateway()

    async def run_before(pilot: Pilot[Any]) -> None:
        await until(pilot, lambda: gw.calls >= 1)
        await pilot.pause(0.2)

    assert snap_compare(create_app(gw, refresh=30), run_before=run_before)


def test_help_screen(snap_compare: SnapCompare, utc: None) -> None:
    gw = fixed_gateway()
    app = create_app(gw, refresh=0.05)

    async def run_before(pilot: Pilot[Any]) -> None:
        await loaded(gw)(pilot)
        await pilot.press("question_mark")

    assert snap_compare(app, run_before=run_before)


def test_debug_screen_100x30(snap_compare: SnapCompare, utc: None) -> None:
    gw = fixed_gateway()
    gw.scripted["a1b2c3d4e5f6"] = ScriptedDebuggee()
    app = create_app(gw, refresh=0.05, attach="a1b2c3d4e5f6")

    async def run_before(pilot: Pilot[Any]) -> None:
        await until(
            pilot,
            lambda: (
                isinstance(pilot.app.screen, DebugScreen)
                and pilot.app.screen.state == "paused"
                and pilot.app.screen.query_one("#variables").root.children != []
            ),
        )
        await pilot.pause(0.2)

    assert snap_compare(app, run_before=run_before, terminal_size=(100, 30))
