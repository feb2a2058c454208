"""Breakpoints view: the armed breakpoints of every job, live; remove one, or all of a job.

`b` on the main screen opens it. One row per breakpoint, grouped by job (breakpoints
for every job first): id, file:line, condition, hits so far, paused now out of the
hit limit, and who armed it (the CLI, an editor). `x` removes the selected one, `X`
every breakpoint of its job. The list refreshes like the other panes; a failed call
says why on the status line, in one line, and the view stays usable.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from raydbg.client import GatewayError
from raydbg.tui.breakpoint_rows import (
    BREAKPOINT_COLUMNS,
    breakpoint_rows,
    job_key,
    same_job,
    summary,
)
from raydbg.tui.gateway import Backoff
from raydbg.tui.messages import BreakpointsRemoved, BreakpointsUpdated, GatewayState
from raydbg.tui.row_table import RowTable, set_border_title


class BreakpointsGateway(Protocol):
    address: str

    async def breakpoints(self, job: str | None = None) -> list[dict[str, Any]]: ...

    async def remove_breakpoint(self, bid: str) -> None: ...


def one_line(exc: Exception) -> str:
    text = str(exc) if isinstance(exc, GatewayError) else f"gateway error: {exc!r}"
    return text.replace("\n", " ")


class BreakpointsScreen(Screen[None]):
    DEFAULT_CSS = """
    #bp-status { height: 1; background: $primary-background; padding: 0 1; }
    #bp-status.error { background: $error; }
    #bp-table { height: 1fr; border: round $primary; }
    #bp-table:focus { border: round $accent; }
    """
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("x,delete", "remove", "Remove"),
        Binding("X", "remove_job", "Remove all of job"),
        Binding("r", "reload", "Refresh"),
    ]

    def __init__(self, gateway: BreakpointsGateway, refresh: float = 1.0) -> None:
        super().__init__()
        self.gateway = gateway
        self.refresh_interval = refresh
        self.breakpoints: list[dict[str, Any]] = []
        self.backoff = Backoff()
        self.remove_error = ""  # the last failed removal, shown until one works or `r`

    def compose(self) -> ComposeResult:
        yield Static(f"breakpoints · gateway {self.gateway.address} · loading…", id="bp-status")
        yield RowTable(BREAKPOINT_COLUMNS, id="bp-table")
        yield Footer()

    @property
    def table(self) -> RowTable:
        return self.query_one("#bp-table", RowTable)

    def on_mount(self) -> None:
        self.table.border_title = "Armed breakpoints"
        self.table.focus()
        self.poll()

    @work(exclusive=True, group="breakpoints")
    async def poll(self) -> None:
        while True:
            try:
                bps = await self.gateway.breakpoints()
            except Exception as exc:  # say it, back off, keep the last list on screen
                delay = self.backoff.next_delay()
                self.post_message(GatewayState(False, f"retry in {delay:g}s · {one_line(exc)}"))
                await asyncio.sleep(delay)
                continue
            self.backoff.reset()
            self.post_message(BreakpointsUpdated(list(bps)))
            await asyncio.sleep(self.refresh_interval)

    def action_reload(self) -> None:
        self.remove_error = ""
        self.poll()

    def on_breakpoints_updated(self, message: BreakpointsUpdated) -> None:
        message.stop()
        self.breakpoints = message.breakpoints
        self._show()
        if self.remove_error:
            self._status(f"breakpoints · {self.remove_error}", ok=False)
        else:
            self._status(f"breakpoints · {summary(self.breakpoints)}", ok=True)

    def on_gateway_state(self, message: GatewayState) -> None:
        message.stop()
        self._status(f"breakpoints · {message.text}", ok=False)

    def _show(self) -> None:
        self.table.set_rows(breakpoint_rows(self.breakpoints))
        set_border_title(self.table, f"Armed breakpoints ({len(self.breakpoints)})")

    def _status(self, text: str, ok: bool) -> None:
        status = self.query_one("#bp-status", Static)
        status.update(text)
        status.set_class(not ok, "error")

    def action_remove(self) -> None:
        bid = self.table.cursor_key
        if bid is not None:
            self.remove_ids([bid], f"breakpoint {bid}")

    def action_remove_job(self) -> None:
        bid = self.table.cursor_key
        ids = same_job(self.breakpoints, bid) if bid is not None else []
        if ids:
            chosen = next(b for b in self.breakpoints if str(b.get("id")) == bid)
            job = job_key(chosen)
            self.remove_ids(ids, f"{len(ids)} breakpoint{'' if len(ids) == 1 else 's'} of {job}")

    @work(group="remove")
    async def remove_ids(self, ids: list[str], what: str) -> None:
        removed: list[str] = []
        error = ""
        for bid in ids:
            try:
                await self.gateway.remove_breakpoint(bid)
            except Exception as exc:
                error = f"removing {bid} failed: {one_line(exc)}"
                break
            removed.append(bid)
        self.post_message(BreakpointsRemoved(removed, what, error))

    def on_breakpoints_removed(self, message: BreakpointsRemoved) -> None:
        message.stop()
        self.remove_error = message.error
        if message.removed:
            gone = set(message.removed)
            self.breakpoints = [b for b in self.breakpoints if str(b.get("id")) not in gone]
            self._show()
            if not message.error:  # the status line counts what the table shows
                self._status(f"breakpoints · {summary(self.breakpoints)}", ok=True)
        if not message.error:
            self.app.notify(f"removed {message.what}", title="Breakpoints")
        self.poll()  # the gateway's list is the truth: ask again now
