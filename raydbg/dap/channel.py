"""DAP request/response channel and event dispatch over one framed byte stream."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from raydbg.dap.errors import DapConnectionLost, DapError, DapException, DapTimeout
from raydbg.dap.framing import ByteReader, ByteWriter, read_message, write_message

log = logging.getLogger(__name__)

Message = dict[str, Any]
EventCallback = Callable[[Message], object]
EventPredicate = Callable[[Message], bool]


class DapChannel:
    """Sends requests with ``seq`` from 1, matches responses by ``request_seq``.

    One reader task owns the stream. Events go to subscribers and waiters; a
    reverse request from the peer gets an error reply so the peer never hangs.
    When the stream ends (or carries garbage) every pending request fails with
    the same ``DapConnectionLost`` and later requests fail at once.
    """

    def __init__(self, reader: ByteReader, writer: ByteWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._seq = 0
        self._pending: dict[int, tuple[str, asyncio.Future[Message]]] = {}
        self._subscribers: list[tuple[str | None, EventCallback]] = []
        self._waiters: list[tuple[str, EventPredicate | None, asyncio.Future[Message]]] = []
        self._close_callbacks: list[Callable[[DapConnectionLost], object]] = []
        self._task: asyncio.Task[None] | None = None
        self._lost: DapConnectionLost | None = None
        self._closed = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the reader task (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @property
    def lost(self) -> DapConnectionLost | None:
        """Why the channel ended, or ``None`` while it is open."""
        return self._lost

    @property
    def is_open(self) -> bool:
        return self._lost is None

    def on_close(self, callback: Callable[[DapConnectionLost], object]) -> None:
        """Call ``callback(reason)`` once when the channel ends (at once if it has)."""
        if self._lost is not None:
            callback(self._lost)
        else:
            self._close_callbacks.append(callback)

    async def wait_closed(self) -> DapConnectionLost:
        await self._closed.wait()
        assert self._lost is not None
        return self._lost

    async def close(self, reason: str = "DAP connection closed by the client") -> None:
        """Close the stream and fail whatever is still pending."""
        self._fail_all(DapConnectionLost(reason))
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            self._writer.close()
            await asyncio.wait_for(self._writer.wait_closed(), 2.0)

    # -- requests --------------------------------------------------------------

    async def send_request(
        self, command: str, arguments: dict[str, Any] | None = None
    ) -> asyncio.Future[Message]:
        """Send a request; return a future for its whole response message.

        The future raises ``DapError`` on ``success: false`` and
        ``DapConnectionLost`` if the stream ends first.
        """
        if self._lost is not None:
            raise _copy(self._lost)
        self.start()
        seq = self._next_seq()
        message: Message = {"seq": seq, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[seq] = (command, future)
        try:
            await write_message(self._writer, message)
        except (OSError, RuntimeError) as exc:
            self._pending.pop(seq, None)
            self._fail_all(DapConnectionLost(f"cannot send {command!r} to the DAP peer: {exc}"))
            raise DapConnectionLost(f"cannot send {command!r} to the DAP peer: {exc}") from None
        return future

    async def request(
        self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 10.0
    ) -> Message:
        """Send a request and wait for its response body (``{}`` when none)."""
        future = await self.send_request(command, arguments)
        response = await self.wait_response(future, command, timeout)
        body = response.get("body")
        return body if isinstance(body, dict) else {}

    async def wait_response(
        self, future: asyncio.Future[Message], command: str, timeout: float
    ) -> Message:
        """Await a future from ``send_request`` with a timeout (a clear ``DapTimeout``)."""
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            self._forget(future)
            raise DapTimeout(f"no reply to DAP {command!r} within {timeout:g}s") from None

    # -- events ----------------------------------------------------------------

    def subscribe(self, event: str | None, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(message)`` for each event named ``event`` (``None``: all).

        Returns a function that unsubscribes.
        """
        entry = (event, callback)
        self._subscribers.append(entry)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(entry)

        return unsubscribe

    def expect_event(
        self, event: str, predicate: EventPredicate | None = None
    ) -> asyncio.Future[Message]:
        """Register interest now, before the request that causes the event is sent."""
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        if self._lost is not None:
            _fail(future, _copy(self._lost))
        else:
            self._waiters.append((event, predicate, future))
        return future

    async def wait_for_event(
        self,
        event: str,
        predicate: EventPredicate | None = None,
        timeout: float = 10.0,
        future: asyncio.Future[Message] | None = None,
    ) -> Message:
        """Wait for the next matching event (or for ``future`` from ``expect_event``)."""
        future = future or self.expect_event(event, predicate)
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise DapTimeout(f"no DAP {event!r} event within {timeout:g}s") from None

    # -- internals -------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _forget(self, future: asyncio.Future[Message]) -> None:
        for seq, (_, pending) in list(self._pending.items()):
            if pending is future:
                del self._pending[seq]
        if not future.done():
            future.cancel()

    async def _read_loop(self) -> None:
        reason: DapConnectionLost
        try:
            while True:
                message = await read_message(self._reader)
                if message is None:
                    reason = DapConnectionLost("DAP peer closed the connection")
                    break
                self._dispatch(message)
        except DapConnectionLost as exc:
            reason = exc
        except asyncio.CancelledError:
            self._fail_all(DapConnectionLost("DAP connection closed by the client"))
            raise
        except (OSError, asyncio.IncompleteReadError) as exc:
            reason = DapConnectionLost(f"DAP connection failed: {exc}")
        self._fail_all(reason)

    def _dispatch(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "response":
            self._on_response(message)
        elif kind == "event":
            self._on_event(message)
        elif kind == "request":
            # No reverse requests (runInTerminal, startDebugging) for an attach client.
            asyncio.get_running_loop().create_task(self._refuse(message))
        else:
            log.debug("ignoring DAP message of type %r", kind)

    def _on_response(self, message: Message) -> None:
        entry = self._pending.pop(message.get("request_seq", -1), None)
        if entry is None:
            log.debug("DAP response for unknown request_seq %r", message.get("request_seq"))
            return
        command, future = entry
        if future.done():
            return
        if message.get("success", False):
            future.set_result(message)
        else:
            body = message.get("body") if isinstance(message.get("body"), dict) else None
            text = str(message.get("message") or "")
            error = (body or {}).get("error")
            if isinstance(error, dict) and error.get("format"):
                text = str(error["format"])
            _fail(future, DapError(command, text or "request failed", body))

    def _on_event(self, message: Message) -> None:
        name = message.get("event")
        for event, callback in list(self._subscribers):
            if event is None or event == name:
                try:
                    callback(message)
                except Exception:  # a bad subscriber must not kill the reader
                    log.exception("DAP event subscriber failed on %r", name)
        keep = []
        for event, predicate, future in self._waiters:
            if future.done():
                continue
            if event == name:
                try:
                    matched = predicate is None or predicate(message)
                except Exception as exc:
                    _fail(future, exc)
                    continue
                if matched:
                    future.set_result(message)
                    continue
            keep.append((event, predicate, future))
        self._waiters = keep

    async def _refuse(self, request: Message) -> None:
        with contextlib.suppress(DapException, OSError, RuntimeError):
            await write_message(
                self._writer,
                {
                    "seq": self._next_seq(),
                    "type": "response",
                    "request_seq": request.get("seq"),
                    "command": request.get("command"),
                    "success": False,
                    "message": "not supported by raydbg",
                },
            )

    def _fail_all(self, reason: DapConnectionLost) -> None:
        if self._lost is None:
            self._lost = reason
            self._closed.set()
            for callback in self._close_callbacks:
                try:
                    callback(reason)
                except Exception:
                    log.exception("DAP close callback failed")
            self._close_callbacks.clear()
        pending, self._pending = self._pending, {}
        for _, future in pending.values():
            _fail(future, _copy(reason))
        waiters, self._waiters = self._waiters, []
        for _, _, future in waiters:
            _fail(future, _copy(reason))


def _copy(reason: DapConnectionLost) -> DapConnectionLost:
    """A fresh exception of the same class (one instance per waiter keeps tracebacks apart)."""
    return type(reason)(str(reason))


def _fail(future: asyncio.Future[Message], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
        # Mark it retrieved: a waiter nobody awaits any more must not log at GC.
        future.exception()
