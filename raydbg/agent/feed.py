"""One shared poller of the session list for every SSE client of an agent (bounded clients)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("raydbg.agent")

POLL_S = 0.25
MAX_CLIENTS = 64


class TooManyClients(Exception):
    """Every SSE slot is taken."""


class SessionFeed:
    """Polls `fetch` every POLL_S while at least one client listens; clients wait for changes.

    A client costs a wait on a condition, not a KV read: one poll serves them all.
    The poller stops when the last client leaves, so an idle agent reads nothing.
    """

    def __init__(self, fetch: Callable[[], Awaitable[list[dict[str, Any]]]],
                 max_clients: int = MAX_CLIENTS, poll_s: float = POLL_S) -> None:
        self._fetch = fetch
        self.max_clients = max_clients
        self.poll_s = poll_s
        self.clients = 0
        self.polls = 0
        self.body: str | None = None
        self.version = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def join(self) -> None:
        if self.clients >= self.max_clients:
            raise TooManyClients(f"{self.clients} clients already follow the session list")
        self.clients += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._poll())

    def leave(self) -> None:
        self.clients = max(0, self.clients - 1)
        if self.clients == 0 and self._task is not None:
            self._task.cancel()
            self._task = None
            self.body = None  # a later client gets a fresh first read

    async def _poll(self) -> None:
        while True:
            try:
                body = json.dumps(await self._fetch())
                self.polls += 1
                if body != self.body:
                    self.body = body
                    self.version += 1
                    async with self._changed:
                        self._changed.notify_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                # The KV can be briefly unreachable; the clients keep their last list.
                log.warning("raydbg agent: session feed poll failed", exc_info=True)
            await asyncio.sleep(self.poll_s)

    async def next(self, seen: int, timeout: float) -> tuple[int, str | None]:
        """Wait until the list is newer than version `seen` (or `timeout`); (version, body).

        The body is None only when the first poll has not answered within `timeout`.
        """
        def ready() -> bool:
            return self.body is not None and self.version != seen

        async with self._changed:
            if not ready():
                try:
                    await asyncio.wait_for(self._changed.wait_for(ready), timeout)
                except asyncio.TimeoutError:
                    pass
        return self.version, self.body
