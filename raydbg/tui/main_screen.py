"""Main screen: sessions, cluster and events panes fed by one polling worker with backoff."""

from __future__ import annotations

import asyncio

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from raydbg.client import GatewayError
from raydbg.tui.cluster import ClusterPane
from raydbg.tui.events import EventsPane
from raydbg.tui.gateway import Backoff, TuiGateway
from raydbg.tui.messages import EventsUpdated, GatewayState, NodesUpdated, SessionsUpdated
from raydbg.tui.sessions import SessionsPane


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
