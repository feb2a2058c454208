"""Main screen: sessions, cluster and events panes fed by one polling worker with backoff, and a
line naming the running Train runs with the key that opens them (`g`)."""

from __future__ import annotations

import asyncio
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from raydbg.client import GatewayError
from raydbg.gang.ranks import rank_ranges
from raydbg.tui.cluster import ClusterPane
from raydbg.tui.events import EventsPane
from raydbg.tui.gateway import Backoff, TuiGateway
from raydbg.tui.messages import (
    EventsUpdated,
    GatewayState,
    NodesUpdated,
    SessionsUpdated,
    StepsUpdated,
)
from raydbg.tui.sessions import SessionsPane

GANG_KEY_HINT = "g: gang view (stacks, ranks, pause)"


def runs_line(runs: list[dict[str, Any]] | None) -> str:
    """The running Train runs in one line, from a `GET /api/v1/steps` answer's runs (pure);
    None: the gateway has no steps (an older raydbg), so only the key is named."""
    if runs is None:
        return GANG_KEY_HINT
    if not runs:
        return f"no Train run running · {GANG_KEY_HINT}"
    parts = []
    for run in runs:
        ranks = run.get("ranks") or []
        steps = [r["step"] for r in ranks if isinstance(r.get("step"), int)]
        ages = [float(r["last_progress_s"]) for r in ranks if isinstance(r.get("last_progress_s"), (int, float))]
        text = f"{run.get('train_run')} ({len(ranks)} rank{'s' if len(ranks) != 1 else ''}"
        text += f", step {max(steps)}" if steps else ""
        text += f", {min(ages):.0f}s ago" if ages else ""
        if run.get("stragglers"):
            text += f", straggler: rank {rank_ranges(run['stragglers'])}"
        parts.append(text + ")")
    return f"Train runs: {', '.join(parts)} · {GANG_KEY_HINT}"


class MainScreen(Screen[None]):
    """The overview. Sessions refresh every ``refresh`` s; nodes and events less often."""

    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("g", "gang", "Gang view", show=False),  # listed in help (?); the footer is full at 80 columns
        Binding("b", "breakpoints", "Breakpoints", show=False),
        Binding("tab", "app.focus_next", "Next pane", show=True),
        Binding("shift+tab", "app.focus_previous", "Prev pane", show=False),
    ]

    def __init__(self, gateway: TuiGateway, refresh: float = 1.0, slow_every: int = 3) -> None:
        super().__init__()
        self.gateway = gateway
        self.refresh_interval = refresh
        self.slow_every = slow_every
        self.backoff = Backoff()
        self._status_text = ""

    def compose(self) -> ComposeResult:
        yield Static(f"raydbg · gateway {self.gateway.address} · connecting…", id="status")
        yield Static(GANG_KEY_HINT, id="runs")
        yield SessionsPane(id="sessions")
        yield ClusterPane(id="cluster")
        yield EventsPane(id="events")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(SessionsPane).table.focus()
        self.poll()

    @work(exclusive=True, group="poll")
    async def poll(self) -> None:
        tick = 0
        while True:
            try:
                self.post_message(SessionsUpdated(await self.gateway.sessions()))
                if tick % self.slow_every == 0:
                    nodes, events = await asyncio.gather(
                        self.gateway.nodes(), self.gateway.events(200)
                    )
                    self.post_message(NodesUpdated(nodes))
                    self.post_message(EventsUpdated(events))
                    self.load_runs()
            except Exception as exc:  # any failure: say it, back off, never crash the app
                text = str(exc) if isinstance(exc, GatewayError) else f"gateway error: {exc!r}"
                delay = self.backoff.next_delay()
                self.post_message(GatewayState(False, f"retry in {delay:g}s · {text}"))
                await asyncio.sleep(delay)
                continue
            if self.backoff.failures:
                self.backoff.reset()
            self.post_message(GatewayState(True, ""))
            tick += 1
            await asyncio.sleep(self.refresh_interval)

    @work(exclusive=True, group="runs")
    async def load_runs(self) -> None:
        """The running Train runs (the gateway's steps: progress records, no stacks taken)."""
        try:
            answer = await self.gateway.steps()
        except Exception:  # a gateway without steps, or down: the status line says the latter
            self.post_message(StepsUpdated({"runs": None}))
            return
        self.post_message(StepsUpdated(answer))

    def on_steps_updated(self, message: StepsUpdated) -> None:
        runs = message.answer.get("runs")
        text = runs_line(runs if isinstance(runs, list) else None)
        self.query_one("#runs", Static).update(text, layout=False)

    def action_gang(self) -> None:
        from raydbg.tui.gang_view import GangScreen

        self.app.push_screen(GangScreen(self.gateway))  # type: ignore[arg-type]

    def action_breakpoints(self) -> None:
        from raydbg.tui.breakpoints_view import BreakpointsScreen

        self.app.push_screen(BreakpointsScreen(self.gateway, self.refresh_interval))  # type: ignore[arg-type]

    def action_filter(self) -> None:
        self.query_one(SessionsPane).action_filter()

    def on_sessions_updated(self, message: SessionsUpdated) -> None:
        self.query_one(SessionsPane).update_sessions(message.sessions)

    def on_nodes_updated(self, message: NodesUpdated) -> None:
        self.query_one(ClusterPane).update_nodes(message.nodes)

    def on_events_updated(self, message: EventsUpdated) -> None:
        self.query_one(EventsPane).update_events(message.events)

    def on_gateway_state(self, message: GatewayState) -> None:
        if message.ok:
            text = f"raydbg · gateway {self.gateway.address} · connected"
        else:
            text = f"raydbg · {message.text}"
        if text == self._status_text:
            return  # every poll says "connected": repainting it each time cost ~15 ms
        self._status_text = text
        status = self.query_one("#status", Static)
        status.update(text, layout=False)  # one line, whatever it says: no re-layout
        status.set_class(not message.ok, "error")
