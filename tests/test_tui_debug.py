"""Pilot tests of the debug view against a real debugpy (the gateway is an in-process fake)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from tui_support import FakeGateway, record, record_notices, start_debuggee, until

from raydbg.tui.app import RaydbgApp, create_app
from raydbg.tui.console import ConsoleView, HistoryInput
from raydbg.tui.debug_screen import DebugScreen
from raydbg.tui.main_screen import MainScreen
from raydbg.tui.source_view import SourceView
from raydbg.tui.stack_view import StackView
from raydbg.tui.variables_view import VariablesView

SID = "dbg000000001"


@pytest.fixture
def debuggee(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], FakeGateway]]:
    proc, port, script = start_debuggee(tmp_path)
    gateway = FakeGateway()
    gateway.sessions_list = [record(SID, time.time(), file=str(script), function="work")]
    gateway.dap_ports[SID] = port
    try:
        yield proc, gateway
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def debug_screen(app: RaydbgApp) -> DebugScreen:
    assert isinstance(app.screen, DebugScreen), type(app.screen).__name__
    return app.screen


async def attached(app: RaydbgApp, pilot: Pilot[Any]) -> DebugScreen:
    await until(
        pilot,
        lambda: isinstance(app.screen, DebugScreen) and app.screen.attach_seconds is not None,
        timeout=15,
    )
    return debug_screen(app)


def exit_code(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=15)
    return proc.returncode, out


async def test_enter_source_variables_console_next_continue(
    debuggee: tuple[subprocess.Popen[str], FakeGateway],
) -> None:
    proc, gateway = debuggee
    app = create_app(gateway, refresh=0.1)
    notices = record_notices(app)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: app.screen.query_one("#sessions-table").row_count == 1)
        await pilot.press("enter")
        screen = await attached(app, pilot)
        source = screen.query_one(SourceView)
        assert source.current_text.strip() == "total += 1"  # the line after breakpoint()
        assert source.border_title == f"train.py:{source.line}"
        stack = screen.query_one(StackView)
        assert stack.option_count >= 2 and "work" in str(stack.get_option_at_index(0).prompt)

        variables = screen.query_one(VariablesView)
        await until(pilot, lambda: variables.find("total") is not None)  # loads after the source
        total = variables.find("total")
        assert total is not None and str(total.label) == "total: int = 40"
        config = variables.find("config")
        assert config is not None and config.allow_expand
        config.expand()
        await until(pilot, lambda: len(config.children) > 0)
        assert any(
            "'lr'" in str(child.label) and "0.001" in str(child.label) for child in config.children
        )

        box = screen.query_one(HistoryInput)
        box.focus()
        await pilot.press(*"total * 2 + n", "enter")
        console = screen.query_one(ConsoleView)
        await until(pilot, lambda: "84" in console.lines)
        await pilot.press(*"1/0", "enter")
        try:
            await until(pilot, lambda: "ZeroDivisionError: division by zero" in console.lines)
        except AssertionError:
            raise AssertionError(console.lines) from None
        await pilot.press("up", "up")
        assert box.value == "total * 2 + n"

        await pilot.press("escape")  # back to the source pane: keys are commands again
        line = source.line
        await pilot.press("n")
        await until(pilot, lambda: source.line == line + 1 and screen.state == "paused")
        assert source.current_text.strip() == "total += helper(len(config))"
        assert str(variables.find("total").label) == "total: int = 41"  # type: ignore[union-attr]

        await pilot.press("s")  # step in: into helper()
        await until(pilot, lambda: source.current_text.strip() == "doubled = v * 2")
        await until(pilot, lambda: screen.state == "paused")
        assert "helper" in str(stack.get_option_at_index(0).prompt)
        await pilot.press("u")  # step out: back in work(), on the same line
        await until(pilot, lambda: screen.state == "paused" and source.line == line + 1)
        assert "work" in str(stack.get_option_at_index(0).prompt)

        # Selecting the caller's frame moves source and variables there.
        stack.focus()
        await pilot.press("down", "enter")
        await until(pilot, lambda: source.current_text.strip() == "result = work(4)")
        await until(pilot, lambda: variables.find("port") is not None)  # a module global
        await pilot.press("escape")

        gateway.sessions_list = []  # the worker removes its record when the task resumes
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=10)
        assert any("the task resumed; session ended" in n for n in notices), notices
    assert exit_code(proc) == (0, "result 45\n")


async def test_attach_straight_from_the_shell_then_detach(
    debuggee: tuple[subprocess.Popen[str], FakeGateway],
) -> None:
    proc, gateway = debuggee
    app = create_app(gateway, attach=SID, refresh=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await attached(app, pilot)
        assert screen.attach_seconds is not None and screen.attach_seconds < 5
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=10)
    assert exit_code(proc) == (0, "result 45\n")


async def test_quit_while_attached_detaches(
    debuggee: tuple[subprocess.Popen[str], FakeGateway],
) -> None:
    proc, gateway = debuggee
    app = create_app(gateway, attach=SID, refresh=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        await attached(app, pilot)
        await pilot.press("q")
        await pilot.pause(0.2)
    assert exit_code(proc) == (0, "result 45\n")


async def test_debuggee_dies_while_attached(
    debuggee: tuple[subprocess.Popen[str], FakeGateway],
) -> None:
    proc, gateway = debuggee
    app = create_app(gateway, attach=SID, refresh=0.1)
    notices = record_notices(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await attached(app, pilot)
        proc.kill()
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=15)
        assert any(
            "debug connection lost" in n or "the debugged process ended" in n for n in notices
        ), notices
