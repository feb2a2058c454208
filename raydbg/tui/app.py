"""The raydbg TUI application: a thin App that routes between the main and debug screens."""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

from raydbg.tui.debug_screen import DebugScreen
from raydbg.tui.gateway import TuiGateway
from raydbg.tui.help_screen import HelpScreen
from raydbg.tui.main_screen import MainScreen
from raydbg.tui.messages import AttachRequested
from raydbg.tui.sessions import SessionsPane


class RaydbgApp(App[None]):
    CSS_PATH = "raydbg.tcss"
    TITLE = "raydbg"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(
        self,
        gateway: TuiGateway,
        *,
        attach: str | None = None,
        refresh: float = 1.0,
        attach_timeout: float = 15.0,
    ) -> None:
        super().__init__()
        self.gateway = gateway
        self.attach_on_start = attach
        self.refresh_interval = refresh
        self.attach_timeout = attach_timeout

    def get_default_screen(self) -> Screen[None]:
        return MainScreen(self.gateway, refresh=self.refresh_interval)

    def on_mount(self) -> None:
        if self.attach_on_start:
            self.open_debug(self.attach_on_start)

    def open_debug(self, session_id: str) -> None:
        record = None
        for pane in self.screen.query(SessionsPane):  # none yet when attaching at start
            record = next((r for r in pane.sessions if r.get("id") == session_id), None)
        self.push_screen(DebugScreen(self.gateway, session_id, record, self.attach_timeout))

    def on_attach_requested(self, message: AttachRequested) -> None:
        self.open_debug(message.session_id)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        """Quit; disconnect first: a paused task stays paused and listed for the next client."""
        for screen in self.screen_stack:
            if isinstance(screen, DebugScreen):
                screen.leaving = True
                try:
                    await screen.controller.detach()
                except Exception:
                    pass  # the connection is gone already
        self.exit()


def create_app(
    client: TuiGateway,
    *,
    attach: str | None = None,
    refresh: float = 1.0,
    attach_timeout: float = 15.0,
) -> RaydbgApp:
    """The app factory, used by ``raydbg tui`` / ``raydbg attach`` and by the tests."""
    return RaydbgApp(client, attach=attach, refresh=refresh, attach_timeout=attach_timeout)
