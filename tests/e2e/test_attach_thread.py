"""Attaching through a session lands on that session's thread (issue 33, part 2), and a
session still `starting` is attached once it listens, not refused (real Ray, real debugpy)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import ray

from e2e import attach_targets as targets
from e2e.conftest import forward, gateway, raydbg_cli, wait_for_session, wait_gone

pytestmark = pytest.mark.e2e

LINE = targets.line_of("same_line")


@pytest.fixture(scope="module")
def gw(ray_cluster: str) -> Any:
    up = raydbg_cli(ray_cluster, "up")
    assert up.returncode == 0, up.stderr
    return gateway(ray_cluster)


def _paused(gw: Any, actor_id: str, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    """The actor's `count` sessions at LINE, all attachable (state waiting), oldest first."""
    deadline = time.monotonic() + timeout
    recs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        recs = [r for r in asyncio.run(gw.sessions())
                if r.get("actor_id") == actor_id and r["line"] == LINE and r["state"] == "waiting"]
        if len(recs) == count:
            return sorted(recs, key=lambda r: r["since"])
        time.sleep(0.05)
    raise AssertionError(f"{count} waiting sessions expected, saw {asyncio.run(gw.sessions())}")


async def _attach(reader: Any, writer: Any) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """attach_session (as the TUI and the CLI do): the client, its first `stopped`, the
    name of the thread it names and that thread's top-frame locals."""
    from raydbg.dap.session import attach_session

    client, stopped = await attach_session(reader, writer, timeout=30)
    thread_id = stopped["body"]["threadId"]
    names = {t["id"]: t["name"] for t in await client.threads()}
    frames = await client.stack_trace(thread_id)
    assert frames[0]["line"] == LINE and frames[0]["source"]["path"] == targets.FILE
    scopes = await client.scopes(frames[0]["id"])
    values = {v["name"]: v["value"] for v in await client.variables(scopes[0]["variablesReference"])}
    return client, stopped, {"thread_name": names[thread_id], **values}


async def _round(rec: dict[str, Any], connect: Any, refs: dict[int, Any]) -> int:
    """Attach through `rec` (`connect()`: the DAP stream): its thread is the first stopped;
    continue it alone, and only its call returns. The n of the call it was."""
    client, stopped, seen = await _attach(*await connect())
    assert seen["thread_name"] == rec["thread_name"], (seen, rec)
    assert int(seen["ident"]) == rec["thread_id"], (seen, rec)
    n = int(seen["n"])
    assert n in refs
    await client.continue_(stopped["body"]["threadId"])
    loop = asyncio.get_running_loop()
    mine = await loop.run_in_executor(None, lambda: ray.get(refs[n], timeout=30))
    assert mine == n + 100
    others = [ref for k, ref in refs.items() if k != n]
    if others:
        done, _ = await loop.run_in_executor(None, lambda: ray.wait(others, num_returns=1, timeout=2))
        assert not done, "the other call ran on: it was continued too"
    await client.disconnect()
    await client.close()
    return n


def test_attach_through_each_session_lands_on_its_thread(ray_cluster: str, gw: Any) -> None:
    from raydbg.dap.transport import open_tcp, open_websocket

    # Call 1's thread stops 0.5 s after call 2's under a client (attach_targets.TwoCalls):
    # the relay gets the other thread's `stopped` first when attaching through call 1.
    actor = ray.remote(targets.TwoCalls).options(max_concurrency=4).remote(late_n=1, delay=0.5)
    actor_id = actor._actor_id.hex()
    try:
        refs = {1: actor.work.remote(1)}
        (first,) = _paused(gw, actor_id, 1)
        refs[2] = actor.work.remote(2)
        first, second = _paused(gw, actor_id, 2)
        assert first["thread_id"] != second["thread_id"]
        assert first["thread_name"] != second["thread_name"]
        # The first listed through `raydbg forward` (VS Code's path) ...
        with forward(ray_cluster, first["id"]) as port:
            n_first = asyncio.run(_round(first, lambda: open_tcp("127.0.0.1", port), refs))
        wait_gone(gw, first["id"])
        # ... the other, back to waiting, straight through the gateway (the TUI's path).
        (again,) = _paused(gw, actor_id, 1)
        assert again["id"] == second["id"]
        rest = {k: v for k, v in refs.items() if k != n_first}
        n_second = asyncio.run(_round(second, lambda: open_websocket(gw.dap_url(second["id"]), gw.token), rest))
        assert {n_first, n_second} == {1, 2}
        wait_gone(gw, second["id"])
    finally:
        ray.kill(actor)


SLOW = targets.line_of("slow_door")


async def _held_attach(connect: Any) -> dict[str, Any]:
    from e2e.conftest import inspect_paused

    started = time.monotonic()
    seen = await inspect_paused(*await connect(), "local_value")
    return {**seen, "took": time.monotonic() - started}


def test_attach_while_starting_is_held_until_attachable(ray_cluster: str, gw: Any) -> None:
    """A session listed as `starting` (its door opens 3.5 s late): a client attaching at once,
    straight to the gateway or through `raydbg forward`, is held and attached, not refused."""
    from raydbg.dap.transport import open_tcp, open_websocket

    actor = ray.remote(targets.SlowDoor).remote(3.5)
    try:
        ref = actor.work.remote(4)
        rec = wait_for_session(gw, attachable=False, line=SLOW, file=targets.FILE)
        assert rec["state"] == "starting"
        seen = asyncio.run(_held_attach(lambda: open_websocket(gw.dap_url(rec["id"]), gw.token)))
        assert seen["top"]["line"] == SLOW and seen["value"] == "8"
        assert seen["took"] > 0.5  # it was held: the door was not open yet
        assert ray.get(ref, timeout=60) == 8

        ref = actor.work.remote(5)
        rec = wait_for_session(gw, attachable=False, line=SLOW, file=targets.FILE)
        with forward(ray_cluster, rec["id"]) as port:
            assert asyncio.run(gw.session(rec["id"]))["state"] == "starting"
            seen = asyncio.run(_held_attach(lambda: open_tcp("127.0.0.1", port)))
        assert seen["top"]["line"] == SLOW and seen["value"] == "10"
        assert ray.get(ref, timeout=60) == 10
    finally:
        ray.kill(actor)
