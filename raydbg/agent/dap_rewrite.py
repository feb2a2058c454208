"""Rewrites a client's DAP stream so each paused thread is its own session (no Ray import).

The framing itself is raydbg.dap.framing's; the names below are the relay's.
"""

from __future__ import annotations

from typing import Any

from raydbg.dap.errors import DapProtocolError
from raydbg.dap.framing import MAX_BODY_BYTES as MAX_BODY
from raydbg.dap.framing import MAX_HEADER_BYTES as MAX_HEADER
from raydbg.dap.framing import FrameParser
from raydbg.dap.framing import encode_message as encode

__all__ = ["MAX_BODY", "MAX_HEADER", "DapParser", "DapReframer", "DapStreamError", "StopFocus", "encode", "rewrite"]


class DapStreamError(Exception):
    """The client sent bytes that are not DAP."""

    def __init__(self, message: str) -> None:
        # It becomes a WebSocket close reason, which must fit a control frame (123 bytes).
        super().__init__(message if len(message) <= 100 else message[:97] + "...")


def rewrite(message: dict[str, Any]) -> dict[str, Any]:
    """Per-thread stops: VS Code and most clients never ask for them themselves."""
    if message.get("type") != "request":
        return message
    command = message.get("command")
    args = message.setdefault("arguments", {}) if command in ("attach", "continue") else None
    if command == "attach" and isinstance(args, dict):
        args.setdefault("stopAllThreadsOnSuspend", False)
        args.setdefault("steppingResumesAllThreads", False)
    elif command == "continue" and isinstance(args, dict):
        args.setdefault("singleThread", True)
    return message


class DapParser(FrameParser):
    """The relay's FrameParser: what is not DAP is a DapStreamError (it closes the WebSocket)."""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        try:
            return super().feed(data)
        except DapProtocolError as exc:
            raise DapStreamError(str(exc)) from None


class DapReframer:
    """Incremental parser: feed raw bytes, get whole rewritten messages back as bytes."""

    def __init__(self) -> None:
        self._parser = DapParser()

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        for message in self._parser.feed(data):
            try:
                out.append(encode(rewrite(message)))
            except (ValueError, RecursionError) as exc:
                raise DapStreamError(f"DAP message cannot be re-encoded: {exc}") from None
        return out


# How long the session's own `stopped` event is waited for once another thread's came first.
FOCUS_HOLD_S = 3.0
# The seq of the relay's own `threads` request (its response never reaches the client).
FOCUS_SEQ = 1_999_999_937


class StopFocus:
    """The session's own thread stops first in the client's eyes.

    A worker with several threads paused (a threaded actor: one session each) sends a
    `stopped` event per thread once a client attaches, in whatever order the threads
    woke. Clients focus the first one (VS Code, the TUI, `attach_session`), so a client
    attaching through session S must see S's thread's first. From the first `stopped`
    on, `stopped` events are held back; the relay asks debugpy for its `threads` (the
    names map DAP thread ids to the session's `thread_name`), and once S's stop is in
    hand it goes out first, the others after it with `preserveFocusHint`. Everything
    else passes at once. Bounded: after `hold_s` (S never stopped, or its name is not
    one thread's), the held events go out as they came. Sans I/O: the relay feeds it
    debugpy's messages and sends what it returns.
    """

    def __init__(self, thread_name: str | None, hold_s: float = FOCUS_HOLD_S) -> None:
        self.thread_name = thread_name
        self.hold_s = hold_s
        self.done = not thread_name
        self.deadline: float | None = None  # set by the first held `stopped`
        self.thread_ids: set[int] | None = None  # S's DAP thread id, once known
        self._held: list[dict[str, Any]] = []

    def from_debuggee(self, message: dict[str, Any], now: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """One message from debugpy: (messages for the client, requests for debugpy)."""
        if self.done:
            return [message], []
        kind, body = message.get("type"), message.get("body")
        body = body if isinstance(body, dict) else {}
        if kind == "response" and message.get("request_seq") == FOCUS_SEQ:
            threads = body.get("threads")
            ids = {t.get("id") for t in threads if isinstance(t, dict) and t.get("name") == self.thread_name} \
                if isinstance(threads, list) and message.get("success") else set()
            if len(ids) != 1:  # not found, or a name two threads share: keep the order they came in
                return self._flush(), []
            self.thread_ids = {int(i) for i in ids if isinstance(i, int)}
            return self._release(), []
        if kind != "event":
            return [message], []
        event = message.get("event")
        if event == "stopped":
            self._held.append(message)
            if self.deadline is None:
                self.deadline = now + self.hold_s
                return [], [{"seq": FOCUS_SEQ, "type": "request", "command": "threads"}]
            return self._release(), []
        if event == "continued" or (event == "thread" and body.get("reason") == "exited"):
            # A held stop that no longer holds is not shown late.
            every = event == "continued" and body.get("allThreadsContinued") is True
            self._held = [m for m in self._held
                          if not every and _thread_of(m) != body.get("threadId")]
        return [message], []

    def expire(self, now: float) -> list[dict[str, Any]]:
        """The held events, when S's stop has not come in time."""
        if self.done or self.deadline is None or now < self.deadline:
            return []
        return self._flush()

    def _release(self) -> list[dict[str, Any]]:
        if not self.thread_ids:
            return []
        mine = [m for m in self._held if _thread_of(m) in self.thread_ids]
        if not mine:
            return []
        others = [m for m in self._held if _thread_of(m) not in self.thread_ids]
        for m in others:
            if isinstance(m.get("body"), dict):  # shown, but they do not take the focus from S's
                m["body"]["preserveFocusHint"] = True
        self._held = []
        self.done = True
        return mine + others

    def _flush(self) -> list[dict[str, Any]]:
        held, self._held = self._held, []
        self.done = True
        return held


def _thread_of(message: dict[str, Any]) -> Any:
    body = message.get("body")
    return body.get("threadId") if isinstance(body, dict) else None
