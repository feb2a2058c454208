"""The TUI end to end on a real local Ray cluster: a paused task listed, attached, stepped, resumed."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import tui_targets
from raydbg_cluster import raydbg_cluster
from tui_support import record_notices, until

from raydbg.tui.app import RaydbgApp, create_app
from raydbg.tui.console import ConsoleView, HistoryInput
from raydbg.tui.debug_screen import DebugScreen
from raydbg.tui.gateway import HttpGateway
from raydbg.tui.main_screen import MainScreen
from raydbg.tui.row_table import RowTable
from raydbg.tui.source_view import SourceView
from raydbg.tui.variables_view import VariablesView

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway() -> Iterator[HttpGateway]:
    with raydbg_cluster(tui_targets) as (_, address, token):
        yield HttpGateway(address, token)


def sessions_table(app: RaydbgApp) -> RowTable:
    return app.screen.query_one("#sessions-table", RowTable)


async def open_session(app: RaydbgApp, pilot: Any, function: str) -> DebugScreen:
    """Wait until the session is listed and attachable, select it, press Enter."""

    def row_of() -> int | None:
        if not isinstance(app.screen, MainScreen):
            return None
        table = sessions_table(app)
        for index in range(table.row_count):
            row = table.get_row_at(index)
            if function in row[0] and row[3] != "starting":
                return index
        return None

    try:
        await until(pilot, lambda: row_of() is not None, timeout=90)
    except AssertionError:
        status = app.screen.query_one("#status").render()
        raise AssertionError(f"{function} never listed as attachable; status: {status}") from None
    index = row_of()
    assert index is not None
    sessions_table(app).move_cursor(row=index)
    started = time.perf_counter()
    await pilot.press("enter")
    await until(
        pilot,
        lambda: isinstance(app.screen, DebugScreen) and app.screen.attach_seconds is not None,
        timeout=30,
    )
    screen = app.screen
    assert isinstance(screen, DebugScreen)
    print(f"Enter -> source and stack: {time.perf_counter() - started:.3f}s")
    return screen


async def test_pause_list_attach_inspect_step_continue(gateway: HttpGateway) -> None:
    ref = ray.remote(tui_targets.scaled_sum).remote([1, 2, 3], 10)
    app = create_app(gateway, refresh=0.2, attach_timeout=30)
    notices = record_notices(app)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_session(app, pilot, "scaled_sum")
        source = screen.query_one(SourceView)
        assert source.path == tui_targets.FILE
        assert source.line == tui_targets.line_of("tui")
        assert source.current_text.strip() == "breakpoint()  # BP:tui"

        variables = screen.query_one(VariablesView)
        await until(pilot, lambda: variables.find("scaled") is not None, timeout=15)
        assert str(variables.find("scaled").label) == "scaled: list = [10, 20, 30]"  # type: ignore[union-attr]

        screen.query_one(HistoryInput).focus()
        await pilot.press(*"sum(scaled) + factor", "enter")
        console = screen.query_one(ConsoleView)
        await until(pilot, lambda: "70" in console.lines, timeout=15)

        await pilot.press("escape", "n")
        await until(
            pilot,
            lambda: source.line == tui_targets.line_of("tui") + 1 and screen.state == "paused",
            timeout=15,
        )
        assert source.current_text.strip() == "total = sum(scaled)"

        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=30)
        assert any("session ended" in n for n in notices), notices
    assert await asyncio.to_thread(ray.get, ref, timeout=60) == 70


async def test_detach_lets_the_task_finish(gateway: HttpGateway) -> None:
    ref = ray.remote(tui_targets.scaled_sum).remote([5], 2)
    app = create_app(gateway, refresh=0.2, attach_timeout=30)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_session(app, pilot, "scaled_sum")
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=30)
    assert await asyncio.to_thread(ray.get, ref, timeout=60) == 12


async def test_worker_dies_while_attached(gateway: HttpGateway) -> None:
    ref = ray.remote(max_retries=0)(tui_targets.pid_then_pause).remote(1)
    app = create_app(gateway, refresh=0.2, attach_timeout=30)
    notices = record_notices(app)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_session(app, pilot, "pid_then_pause")
        assert screen.record is not None
        os.kill(int(screen.record["pid"]), signal.SIGKILL)
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=30)
        assert any("connection lost" in n or "process ended" in n for n in notices), notices
    with pytest.raises(ray.exceptions.RayError):
        await asyncio.to_thread(ray.get, ref, timeout=60)
