"""Typed Textual messages between the TUI's panes, screens and I/O workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class SessionsUpdated(Message):
    """A fresh session list from the gateway (newest first)."""

    sessions: list[dict[str, Any]]


@dataclass
class NodesUpdated(Message):
    nodes: list[dict[str, Any]]


@dataclass
class EventsUpdated(Message):
    events: list[dict[str, Any]]


@dataclass
class GatewayState(Message):
    """Whether the last call to the gateway worked; ``text`` says what is wrong."""

    ok: bool
    text: str


@dataclass
class StacksUpdated(Message):
    """A `GET /api/v1/stacks` answer: workers, stack classes, Train runs, errors."""

    answer: dict[str, Any]


@dataclass
class StepsUpdated(Message):
    """A `GET /api/v1/steps` answer: per Train run, each rank's recent step times."""

    answer: dict[str, Any]


@dataclass
class PauseAnswered(Message):
    """A `POST /api/v1/pause` answer (`raydbg pause`), or the one-line error it failed with."""

    target: str
    answer: dict[str, Any] | None
    error: str | None = None


@dataclass
class AttachRequested(Message):
    session_id: str


@dataclass
class DapEvent(Message):
    """A DAP event from the debuggee (stopped, continued, output, terminated, ...)."""

    event: dict[str, Any]


@dataclass
class DapClosed(Message):
    """The debug connection ended; ``reason`` is one line for the user."""

    reason: str


@dataclass
class FrameSelected(Message):
    index: int


@dataclass
class EvaluateRequested(Message):
    expression: str


@dataclass
class BreakpointsUpdated(Message):
    """A fresh `GET /api/v1/breakpoints` list (every job's)."""

    breakpoints: list[dict[str, Any]]


@dataclass
class BreakpointsRemoved(Message):
    """Breakpoints the gateway removed; ``error`` is one line when a removal failed (the rest were not tried)."""

    removed: list[str]
    what: str
    error: str
