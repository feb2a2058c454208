"""Attaching through the real gateway: who the relay dials, racing clients, clients that vanish.

One real Ray cluster; real paused tasks, real debugpy, real sockets.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import tui_targets
from cluster import ENV, REPO, Cluster

from e2e.conftest import inspect_paused
from raydbg import registry
from raydbg.client import Gateway
from raydbg.dap import DapConnectionLost, open_websocket

pytestmark = pytest.mark.e2e

# Short heartbeats here so a vanished client is noticed in seconds (the default is 10 s).
HEARTBEAT_S = 3.0


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    env = {**ENV, "RAYDBG_WS_HEARTBEAT_S": str(HEARTBEAT_S)}
    with Cluster(num_cpus=2, env=env, by_value=(tui_targets,)) as c:
        yield c.up()


def relay_url(gw: Gateway, sid: str) -> str:
    return gw.url(f"/api/v1/sessions/{sid}/dap")


def paused(gw: Gateway, values: list[int], timeout: float = 90) -> tuple[Any, dict[str, Any]]:
    """Start scaled_sum(values) and wait until its pause is attachable."""
    ref = ray.remote(tui_targets.scaled_sum).remote(values, 10)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in asyncio.run(gw.sessions()):
            if rec["function"] == "scaled_sum" and rec["attachable"]:
                return ref, rec
        time.sleep(0.1)
    raise AssertionError("no attachable scaled_sum")


class Listener:
    """An attacker's listener on loopback: counts every connection it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


def test_the_relay_never_dials_an_agent_address_taken_from_the_kv(gateway: Gateway) -> None:
    listener = Listener()
    fake_node = "ee" * 28
    sid = "feedfacefeed"
    try:
        # The gateway's collector removes records of nodes Ray does not list (as this one):
        # plant them again if it took them between the put and the request.
        for _ in range(5):
            registry.put(registry.AGENT + fake_node, {
                "node_id": fake_node, "node_ip": "127.0.0.1", "port": listener.port, "pid": 1,
                "version": "0", "is_head": False, "started_at": time.time(), "heartbeat": time.time(),
            })
            registry.put(registry.SESSION + sid, {
                "id": sid, "job_id": "01000000", "pid": 1, "thread_id": 1, "thread_name": "MainThread",
                "file": "/x.py", "line": 1, "function": "planted", "reason": "breakpoint",
                "node_id": fake_node, "state": "waiting", "since": time.time(), "port": listener.port,
            })
            with pytest.raises(DapConnectionLost) as refused:
                asyncio.run(open_websocket(relay_url(gateway, sid), gateway.token))
            if "no such debug session" not in str(refused.value):
                break
        assert "would not relay" in str(refused.value)
        time.sleep(1.0)
        assert listener.connections == 0
        status = asyncio.run(gateway.status())
        assert status["refused"].get("dial", 0) >= 1
    finally:
        listener.close()
        registry.delete(registry.SESSION + sid)
        registry.delete(registry.AGENT + fake_node)


async def race(gw: Gateway, sid: str, n: int) -> tuple[list[Any], list[str]]:
    async def one() -> Any:
        try:
            return await open_websocket(relay_url(gw, sid), gw.token)
        except DapConnectionLost as exc:
            return str(exc)

    results = await asyncio.gather(*(one() for _ in range(n)))
    return [r for r in results if not isinstance(r, str)], [r for r in results if isinstance(r, str)]


def test_of_clients_racing_to_attach_exactly_one_wins(gateway: Gateway) -> None:
    ref, rec = paused(gateway, [1, 2, 3])

    async def scenario() -> tuple[int, list[str], str]:
        winners, losers = await race(gateway, rec["id"], 8)
        scaled = (await inspect_paused(*winners[0], "scaled"))["value"] if len(winners) == 1 else ""
        for _reader, writer in winners[1:]:
            writer.close()
        return len(winners), losers, scaled

    won, losers, scaled = asyncio.run(scenario())
    assert won == 1 and len(losers) == 7, losers
    assert all("another client is attached (HTTP 409)" in m for m in losers), losers
    assert scaled == "[10, 20, 30]"
    assert ray.get(ref, timeout=60) == 70


CLIENT = textwrap.dedent("""
    import asyncio, sys
    from raydbg.dap import attach_session, open_websocket

    async def main():
        reader, writer = await open_websocket(sys.argv[1], sys.argv[2])
        client, stopped = await attach_session(reader, writer, timeout=30)
        print("attached", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


async def wait_free(gw: Gateway, sid: str, since: float, limit: float) -> float | None:
    """Seconds from `since` until a new client gets the session (None: not within `limit`)."""
    while time.monotonic() - since < limit:
        try:
            _, writer = await open_websocket(relay_url(gw, sid), gw.token)
        except DapConnectionLost:
            await asyncio.sleep(0.25)
            continue
        took = time.monotonic() - since
        writer.close()
        await writer.wait_closed()
        return took
    return None


def test_a_client_that_vanishes_frees_the_session_within_the_heartbeat_bound(gateway: Gateway) -> None:
    ref, rec = paused(gateway, [2, 3])
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, relay_url(gateway, rec["id"]), gateway.token],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "attached", (line, proc.stderr.read() if proc.poll() is not None else "")
        os.kill(proc.pid, signal.SIGSTOP)  # its TCP connection stays up; it just never answers again
        stopped_at = time.monotonic()
        with pytest.raises(DapConnectionLost, match="HTTP 409"):
            asyncio.run(open_websocket(relay_url(gateway, rec["id"]), gateway.token))
        freed = asyncio.run(wait_free(gateway, rec["id"], stopped_at, 60))
        assert freed is not None, "the session stayed busy for 60 s after its client vanished"
        print(f"vanished client's session freed after {freed:.1f} s (heartbeat {HEARTBEAT_S} s)")
        # aiohttp pings every HEARTBEAT_S and drops a peer whose pong is HEARTBEAT_S/2 late.
        assert freed < 1.5 * HEARTBEAT_S + 3.0, freed
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    async def attach_again() -> str:
        streams = await open_websocket(relay_url(gateway, rec["id"]), gateway.token)
        return str((await inspect_paused(*streams, "scaled"))["value"])

    assert asyncio.run(attach_again()) == "[20, 30]"
    assert ray.get(ref, timeout=60) == 60
