"""Debug screen: source, stack, variables and console of one attached session; step keys."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static, Tree

from raydbg import records
from raydbg.client import GatewayError
from raydbg.dap import DapError, DapException
from raydbg.tui.console import ConsoleView, HistoryInput
from raydbg.tui.debug_controller import DebugController, is_local
from raydbg.tui.format import last_line
from raydbg.tui.gateway import TuiGateway
from raydbg.tui.messages import DapClosed, DapEvent, EvaluateRequested, FrameSelected
from raydbg.tui.source_view import SourceView
from raydbg.tui.stack_view import StackView, focus_index
from raydbg.tui.variables_view import VariablesView, VarRef

STEPS = {"continue": "continue", "next": "next", "step_in": "stepIn", "step_out": "stepOut"}


def _problem(exc: BaseException) -> str:
    """One line for the user, whatever failed."""
    if isinstance(exc, DapError):
        return last_line(exc.message)
    if isinstance(exc, (DapException, GatewayError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class DebugScreen(Screen[None]):
    BINDINGS = [
        Binding("c", "step('continue')", "Continue"),
        Binding("n", "step('next')", "Next"),
        Binding("s", "step('step_in')", "Step in"),
        Binding("u", "step('step_out')", "Step out"),
        Binding("d", "detach", "Detach"),
        Binding("e", "focus_console", "Console"),
        Binding("f", "toggle_frames", "All frames", show=False),
        Binding("escape", "focus_source", "Source", show=False),
        # Hidden from the footer to leave room for `e Console` (the help screen lists Tab).
        Binding("tab", "app.focus_next", "Next pane", show=False),
    ]

    def __init__(
        self,
        gateway: TuiGateway,
        session_id: str,
        record: dict[str, Any] | None = None,
        timeout: float = 15.0,
    ) -> None:
        super().__init__()
        self.gateway = gateway
        self.session_id = session_id
        self.record = record
        self.controller = DebugController(
            gateway, session_id, timeout=timeout, local=is_local((record or {}).get("node_ip"))
        )
        self.leaving = False
        self.state = "attaching"
        self.attach_seconds: float | None = None  # mounted -> source and stack shown
        self.shown_at: float | None = None  # perf_counter() at that moment

    def compose(self) -> ComposeResult:
        yield Static(self._status_text(), id="debug-status")
        with Horizontal(id="debug-main"):
            yield SourceView(id="source")
            with Vertical(id="debug-side"):
                yield StackView(id="stack")
                yield VariablesView(id="variables")
        yield ConsoleView(id="console")
        yield Footer()

    def on_mount(self) -> None:
        self._started = time.perf_counter()
        self.query_one(SourceView).focus()
        self.attach()

    # -- status line -------------------------------------------------------------

    def _status_text(self) -> str:
        rec = self.record or {}
        what = records.label(rec) if rec else self.session_id
        frame = self.controller.frame
        where = (
            f"{frame.get('source', {}).get('path', '?')}:{frame.get('line', '?')}"
            if frame
            else f"{rec.get('file', '?')}:{rec.get('line', '?')}"
        )
        return f"{self.state} · {what} · {where} · session {self.session_id}"

    def set_state(self, state: str) -> None:
        self.state = state
        self.query_one("#debug-status", Static).update(self._status_text())

    # -- attach and show -----------------------------------------------------------

    @work(exclusive=True, group="attach")
    async def attach(self) -> None:
        try:
            if self.record is None or self.record.get("state") == "starting":
                await self._wait_attachable()
                self.controller.local = is_local((self.record or {}).get("node_ip"))
            stopped = await self.controller.attach(
                lambda event: self.post_message(DapEvent(event)),
                lambda reason: self.post_message(DapClosed(reason)),
            )
        except Exception as exc:
            await self._close_and_leave(
                f"cannot attach to {self.session_id}: {_problem(exc)}", "error"
            )
            return
        self.controller.stopped(stopped)
        await self._show_position(focus=True)

    async def _wait_attachable(self, limit: float = 15.0) -> None:
        deadline = time.monotonic() + limit
        while True:
            self.record = await self.gateway.session(self.session_id)
            if self.record.get("state") != "starting" or time.monotonic() > deadline:
                return
            self.set_state("waiting for debugpy to start")
            await asyncio.sleep(0.2)

    @work(exclusive=True, group="view")
    async def show_position(self) -> None:
        await self._show_position()

    async def _show_position(self, focus: bool = False) -> None:
        """The stopped thread's stack and its frame: at attach, the frame the session's record
        names (a post-mortem's is the user's line, not the library's that raised), else the top."""
        try:
            frames = await self.controller.load_stack()
            index = focus_index(frames, self.record or {}) if focus else 0
            self.query_one(StackView).show(frames, index)
            await self._show_frame(index)
        except Exception as exc:
            self.console_error(exc)
        self.set_state("paused")

    async def _show_frame(self, index: int) -> None:
        ctl = self.controller
        if not ctl.frames:
            self.query_one(SourceView).show_message("no Python frames in the paused thread")
            return
        ctl.frame_index = index
        frame = ctl.frames[index]
        lines, scopes = await asyncio.gather(ctl.source_lines(frame), ctl.scopes(frame))
        path = frame.get("source", {}).get("path", "")
        self.query_one(SourceView).show(path, int(frame.get("line", 0)), lines)
        if self.attach_seconds is None:  # the user sees where the task stopped from here on
            self.shown_at = time.perf_counter()
            self.attach_seconds = self.shown_at - self._started
        first = await ctl.variables(scopes[0]["variablesReference"]) if scopes else []
        self.query_one(VariablesView).show_scopes(
            [(scope, first if i == 0 else None) for i, scope in enumerate(scopes)]
        )
        self.set_state(self.state)

    @on(FrameSelected)
    def frame_selected(self, message: FrameSelected) -> None:
        if not self.controller.running:
            self.select_frame(message.index)

    @work(exclusive=True, group="view")
    async def select_frame(self, index: int) -> None:
        try:
            await self._show_frame(index)
        except Exception as exc:
            self.console_error(exc)

    @on(Tree.NodeExpanded)
    def node_expanded(self, event: Tree.NodeExpanded[VarRef]) -> None:
        data = event.node.data
        if data is not None and not data.loaded and data.reference > 0:
            data.loaded = True
            self.load_children(event.node)

    @work(group="vars")
    async def load_children(self, node: Any) -> None:
        try:
            children = await self.controller.variables(node.data.reference)
        except Exception as exc:
            node.data.loaded = False
            self.console_error(exc)
            return
        self.query_one(VariablesView).add_variables(node, children)

    # -- console -------------------------------------------------------------------

    def console_error(self, exc: BaseException) -> None:
        self.query_one(ConsoleView).write(_problem(exc), "red")

    @on(EvaluateRequested)
    def evaluate_requested(self, message: EvaluateRequested) -> None:
        self.evaluate(message.expression)

    @work(group="eval")
    async def evaluate(self, expression: str) -> None:
        console = self.query_one(ConsoleView)
        if self.controller.running or not self.controller.attached:
            console.write("the task is running: evaluate when it is paused", "yellow")
            return
        try:
            result = await self.controller.evaluate(expression)
        except Exception as exc:
            self.console_error(exc)
            return
        console.write(str(result.get("result", "")))

    # -- stepping ------------------------------------------------------------------

    def action_step(self, kind: str) -> None:
        if not self.controller.attached:
            return
        if self.controller.running:
            # debugpy never answers a second continue for a running thread (FACTS.md).
            self.notify("the task is running; wait for it to stop or detach with d")
            return
        self.step(STEPS[kind])

    @work(exclusive=True, group="step")
    async def step(self, command: str) -> None:
        self.set_state("running")
        try:
            await self.controller.step(command)
        except Exception as exc:
            self.console_error(exc)
            self.set_state("paused")
            return
        if command == "continue":
            await self._watch_for_end()

    async def _watch_for_end(self) -> None:
        """After continue: once the session leaves the registry and no stop came, go back."""
        while self.controller.running and self.controller.attached:
            await asyncio.sleep(0.3)
            try:
                ids = {str(r.get("id")) for r in await self.gateway.sessions()}
            except Exception:
                continue  # the gateway hiccuped; the DAP connection says more
            if self.session_id not in ids:
                await asyncio.sleep(0.5)  # a breakpoint right after may still stop here
                if self.controller.running:
                    await self._close_and_leave("the task resumed; session ended", "information")
                return

    def on_dap_event(self, message: DapEvent) -> None:
        event = message.event
        name = event.get("event")
        body = event.get("body") or {}
        if name == "stopped":
            self.controller.stopped(event)
            self.show_position()
        elif name == "continued":
            if body.get("allThreadsContinued") or body.get("threadId") == self.controller.thread_id:
                self.controller.running = True
                self.set_state("running")
        elif name == "output" and body.get("category") != "telemetry":
            style = {"stderr": "red", "console": "dim"}.get(str(body.get("category")), "")
            text = str(body.get("output", "")).rstrip("\n")
            if text:
                self.query_one(ConsoleView).write(text, style)
        elif name in ("terminated", "exited") and not self.leaving:
            self.detach_and_leave("the debugged process ended", "warning")

    def on_dap_closed(self, message: DapClosed) -> None:
        if not self.leaving:
            self.detach_and_leave(f"debug connection lost: {message.reason}", "error")

    # -- leaving -------------------------------------------------------------------

    def action_focus_source(self) -> None:
        self.query_one(SourceView).focus()

    def action_focus_console(self) -> None:
        """One key to the console's input (Esc goes back to the source)."""
        self.query_one(HistoryInput).focus()

    def action_toggle_frames(self) -> None:
        self.query_one(StackView).toggle_folding()

    def action_detach(self) -> None:
        self.detach_and_leave("detached; the task goes on", resume=True)

    @work(exclusive=True, group="leave")
    async def detach_and_leave(self, text: str, severity: str = "information", resume: bool = False) -> None:
        await self._close_and_leave(text, severity, resume)

    async def _close_and_leave(self, text: str, severity: str, resume: bool = False) -> None:
        self.leaving = True
        try:
            await self.controller.detach(resume=resume)
        except Exception:
            pass  # the peer is gone already; leaving is all that is left
        self.leave(text, severity)

    def leave(self, text: str, severity: str = "information") -> None:
        """Say what happened and go back to the session list (the connection must be closed)."""
        self.leaving = True
        self.app.notify(text, severity=severity)  # type: ignore[arg-type]
        if self not in self.app.screen_stack:
            return
        while self.app.screen is not self:  # a help or detail screen sits on top
            self.app.pop_screen()
        self.dismiss()
