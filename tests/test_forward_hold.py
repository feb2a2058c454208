"""`raydbg forward` holds a client while its session is still `starting` (no Ray)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from raydbg import config
from raydbg.client import GatewayError
from raydbg.forward import Forwarder


class StartingGateway:
    """A session that turns attachable `after` seconds from now; the relay refuses it before."""

    def __init__(self, after: float) -> None:
        self.attachable_at = time.monotonic() + after
        self.relay_asked: list[bool] = []

    def _attachable(self) -> bool:
        return time.monotonic() >= self.attachable_at

    async def session(self, sid: str) -> dict[str, Any]:
        return {"id": sid, "attachable": self._attachable(),
                "state": "waiting" if self._attachable() else "starting"}

    async def open_dap(self, http: Any, sid: str) -> Any:
        self.relay_asked.append(self._attachable())
        raise GatewayError("test: stop here")


async def _connect_once(gateway: StartingGateway) -> None:
    forwarder = Forwarder(gateway, "abc", 0)  # type: ignore[arg-type]
    port = await forwarder.start()
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    deadline = time.monotonic() + 10
    while not gateway.relay_asked and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    writer.close()
    await forwarder.close()


def test_a_client_of_a_starting_session_is_relayed_once_it_is_attachable() -> None:
    gateway = StartingGateway(after=1.0)
    asyncio.run(_connect_once(gateway))
    assert gateway.relay_asked == [True]


def test_the_hold_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "ATTACHABLE_WAIT_S", 2.0)  # the bound itself, not its length
    gateway = StartingGateway(after=60.0)
    started = time.monotonic()
    asyncio.run(_connect_once(gateway))
    assert gateway.relay_asked == [False]  # asked anyway after the bound: the gateway says why not
    assert time.monotonic() - started < config.ATTACHABLE_WAIT_S + 3
