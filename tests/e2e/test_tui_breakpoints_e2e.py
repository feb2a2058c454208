"""The TUI's breakpoints view on a real local Ray cluster: armed breakpoints listed with a real
pause and hit counted, removed with x and X, and a removed breakpoint pauses nothing.

The job's breakpoint is armed the way the VS Code extension arms the gutter: PUT with an
editor owner and a path relative to the worker's cwd (matched as the file's trailing part).
On Python 3.11 workers arm through the settrace fallback (RAYDBG_BREAK_PY311=1).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from cluster import ENV, Cluster
from textual.widgets import Static
from tui_support import until

from e2e import armed_targets as t
from raydbg.client import Gateway
from raydbg.tui.app import create_app
from raydbg.tui.breakpoints_view import BreakpointsScreen
from raydbg.tui.gateway import HttpGateway
from raydbg.tui.row_table import RowTable

pytestmark = pytest.mark.e2e

ARMED = t.line_of("armed")
OWNER = "vscode-0123456789ab"


@pytest.fixture(scope="module")
def gateway() -> Iterator[HttpGateway]:
    with Cluster(num_cpus=2, env={**ENV, "RAYDBG_BREAK_PY311": "1"}, by_value=(t,)) as c:
        c.up()
        before = os.environ.get("RAY_ADDRESS")
        os.environ["RAY_ADDRESS"] = c.address
        try:
            found = Gateway.discover()
        finally:
            if before is None:
                os.environ.pop("RAY_ADDRESS", None)
            else:
                os.environ["RAY_ADDRESS"] = before
        yield HttpGateway(found.address, found.token)


def cells(app: Any) -> dict[str, tuple[str, ...]]:
    table = app.screen.query_one("#bp-table", RowTable)
    return {key: tuple(str(c) for c in table.get_row_at(i)) for i, key in enumerate(table.row_keys)}


async def armed_in(keeper: Any, timeout: float = 30) -> None:
    """Until the keeper's worker has armed the registry's current breakpoints."""
    from raydbg.breakpoints import store

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (now := store.version()) != await asyncio.to_thread(ray.get, keeper.loaded.remote(), timeout=30):
        assert loop.time() < deadline, f"breakpoint version {now!r} not armed within {timeout}s"
        await asyncio.sleep(0.1)


async def test_armed_listed_with_its_pause_then_removed_with_x_and_shift_x(gateway: HttpGateway) -> None:
    job = str(ray.get_runtime_context().get_job_id())
    put = await gateway.put(f"/api/v1/breakpoints?owner={OWNER}&job={job}",
                            body={"breakpoints": [{"file": "e2e/armed_targets.py", "line": ARMED}]})
    (mine,) = put["breakpoints"]
    never = await gateway.post("/api/v1/breakpoints", body={"file": t.FILE, "line": ARMED, "condition": "n < 0"})
    keeper = ray.remote(t.Keeper).remote()  # one live worker: what it has armed can be asked
    await armed_in(keeper)
    ref = keeper.call.remote(3)
    app = create_app(gateway, refresh=0.3)
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, BreakpointsScreen) and len(cells(app)) == 2, timeout=30)
        # The task pauses at the armed line: the view counts the hit and the pause.
        await until(pilot, lambda: cells(app).get(mine["id"], ())[4:6] == ("1", "1/3"), timeout=90)
        row = cells(app)[mine["id"]]
        assert (row[0], row[2], row[6]) == (job, f"armed_targets.py:{ARMED}", OWNER)
        assert cells(app)[never["id"]][:1] == ("every job",) and cells(app)[never["id"]][4] == "0"
        (session,) = [s for s in await gateway.sessions() if s.get("breakpoint_id") == mine["id"]]
        # x on the every-job one (listed first).
        app.screen.query_one("#bp-table", RowTable).move_cursor(row=0)
        await pilot.press("x")
        await until(pilot, lambda: list(cells(app)) == [mine["id"]], timeout=15)
        assert [b["id"] for b in await gateway.breakpoints()] == [mine["id"]]
        await gateway.post(f"/api/v1/sessions/{session['id']}/continue")
        assert ray.get(ref, timeout=60) == 31
        await until(pilot, lambda: cells(app)[mine["id"]][5] == "0/3", timeout=30)
        # X: every breakpoint of the job; then the armed line pauses nothing.
        await pilot.press("X")
        await until(pilot, lambda: cells(app) == {}, timeout=15)
        assert "0 armed" in str(app.screen.query_one("#bp-status", Static).render())
    assert await gateway.breakpoints() == []
    await armed_in(keeper)  # disarmed there
    assert ray.get(keeper.call.remote(4), timeout=60) == 41
    assert not [s for s in await gateway.sessions() if s.get("breakpoint_id")]
