"""raydbg.dap against real debugpy in a paused Ray task, through the gateway's DAP relay."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import tui_targets
from raydbg_cluster import raydbg_cluster

from raydbg.client import Gateway
from raydbg.dap import DapConnectionLost, attach_session, open_websocket

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with raydbg_cluster(tui_targets) as (_, address, token):
        yield Gateway(address, token)


async def attachable(gw: Gateway, function: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in await gw.sessions():
            if rec["function"] == function and rec["attachable"]:
                return rec
        await asyncio.sleep(0.1)
    raise AssertionError(f"no attachable session in {function} within {timeout}s")


def relay_url(gw: Gateway, sid: str) -> str:
    return gw.url(f"/api/v1/sessions/{sid}/dap")


async def test_attach_inspect_step_continue_through_relay(gateway: Gateway) -> None:
    ref = ray.remote(tui_targets.scaled_sum).remote([1, 2, 3], 10)
    rec = await attachable(gateway, "scaled_sum")

    with pytest.raises(DapConnectionLost, match="refused the token"):
        await open_websocket(relay_url(gateway, rec["id"]), "not-the-token")
    with pytest.raises(DapConnectionLost, match="no such debug session"):
        await open_websocket(relay_url(gateway, "000000000000"), gateway.token)

    reader, writer = await open_websocket(relay_url(gateway, rec["id"]), gateway.token)
    client, stopped = await attach_session(reader, writer, timeout=30)
    thread = stopped["body"]["threadId"]
    top = (await client.stack_trace(thread))[0]
    assert top["source"]["path"] == tui_targets.FILE
    assert top["line"] == tui_targets.line_of("tui") == rec["line"]
    scopes = await client.scopes(top["id"])
    local = {v["name"]: v["value"] for v in await client.variables(scopes[0]["variablesReference"])}
    assert local["scaled"] == "[10, 20, 30]" and local["factor"] == "10"
    assert (await client.evaluate("sum(scaled) + factor", top["id"]))["result"] == "70"

    step = client.expect_event("stopped")
    await client.next(thread)
    await client.wait_for_event("stopped", future=step, timeout=30)
    assert (await client.stack_trace(thread))[0]["line"] == top["line"] + 1

    await client.continue_(thread)
    assert await asyncio.to_thread(ray.get, ref, timeout=60) == 70
    await client.disconnect()
