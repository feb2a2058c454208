"""Tests of the DAP channel, events and client on an in-memory fake peer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dap_peer import FakePeer

from raydbg.dap import (
    DapChannel,
    DapClient,
    DapConnectionLost,
    DapError,
    DapProtocolError,
    DapTimeout,
    attach_session,
)


@pytest.fixture
async def peer() -> FakePeer:
    return FakePeer()


def channel_for(peer: FakePeer) -> DapChannel:
    channel = DapChannel(peer.client_reader, peer.client_writer)
    channel.start()
    return channel


async def test_request_bytes_on_the_wire_and_seq_from_one(peer: FakePeer) -> None:
    channel = channel_for(peer)
    task = asyncio.create_task(channel.request("threads"))
    expected = b'Content-Length: 46\r\n\r\n{"seq":1,"type":"request","command":"threads"}'
    assert await peer.read_raw(len(expected)) == expected
    peer.respond({"seq": 1, "command": "threads"}, {"threads": []})
    assert await task == {"threads": []}
    second = asyncio.create_task(channel.request("scopes", {"frameId": 5}))
    request = await peer.read()
    assert request == {
        "seq": 2,
        "type": "request",
        "command": "scopes",
        "arguments": {"frameId": 5},
    }
    peer.respond(request)
    assert await second == {}  # a response without a body gives {}
    await channel.close()


async def test_out_of_order_responses_reach_their_callers(peer: FakePeer) -> None:
    channel = channel_for(peer)
    tasks = [
        asyncio.create_task(channel.request("evaluate", {"expression": str(i)})) for i in range(3)
    ]
    requests = [await peer.read() for _ in range(3)]
    for request in reversed(requests):
        peer.respond(request, {"result": request["arguments"]["expression"] + "!"})
    assert [(await t)["result"] for t in tasks] == ["0!", "1!", "2!"]
    await channel.close()


async def test_events_between_responses_are_dispatched_in_order(peer: FakePeer) -> None:
    channel = channel_for(peer)
    seen: list[str] = []
    outputs: list[str] = []
    channel.subscribe(None, lambda m: seen.append(m["event"]))
    unsubscribe = channel.subscribe("output", lambda m: outputs.append(m["body"]["output"]))
    task = asyncio.create_task(channel.request("next", {"threadId": 1}))
    request = await peer.read()
    stopped = channel.expect_event("stopped", lambda m: m["body"]["threadId"] == 1)
    peer.event("output", {"output": "a"})
    peer.event("stopped", {"threadId": 2})  # filtered out by the predicate
    peer.respond(request)
    peer.event("output", {"output": "b"})
    peer.event("stopped", {"threadId": 1, "reason": "step"})
    await task
    assert (await asyncio.wait_for(stopped, 1))["body"]["reason"] == "step"
    assert seen == ["output", "stopped", "output", "stopped"]
    assert outputs == ["a", "b"]
    unsubscribe()
    peer.event("output", {"output": "c"})
    await channel.wait_for_event("output", timeout=1)
    assert outputs == ["a", "b"]
    await channel.close()


async def test_failed_response_raises_dap_error_with_message(peer: FakePeer) -> None:
    channel = channel_for(peer)
    task = asyncio.create_task(channel.request("evaluate", {"expression": "1/0"}))
    peer.respond(await peer.read(), success=False, message="ZeroDivisionError: division by zero")
    with pytest.raises(DapError, match="evaluate failed: ZeroDivisionError") as info:
        await task
    assert info.value.message == "ZeroDivisionError: division by zero"
    # The spec's structured error wins over the short message.
    task = asyncio.create_task(channel.request("stackTrace"))
    peer.respond(
        await peer.read(), {"error": {"format": "Thread 9 not found"}}, success=False, message="x"
    )
    with pytest.raises(DapError, match="Thread 9 not found"):
        await task
    assert channel.is_open
    await channel.close()


async def test_peer_closing_mid_request_fails_every_pending(peer: FakePeer) -> None:
    channel = channel_for(peer)
    closed: list[DapConnectionLost] = []
    channel.on_close(closed.append)
    pending = [asyncio.create_task(channel.request(c)) for c in ("threads", "continue")]
    waiter = channel.expect_event("stopped")
    await peer.read()
    await peer.read()
    peer.close()
    for task in pending:
        with pytest.raises(DapConnectionLost, match="peer closed"):
            await asyncio.wait_for(task, 1)
    with pytest.raises(DapConnectionLost):
        await waiter
    with pytest.raises(DapConnectionLost, match="peer closed"):
        await channel.request("threads")
    assert len(closed) == 1 and not channel.is_open
    assert isinstance(await channel.wait_closed(), DapConnectionLost)


async def test_garbage_from_peer_fails_pending_with_protocol_error(peer: FakePeer) -> None:
    channel = channel_for(peer)
    task = asyncio.create_task(channel.request("threads"))
    await peer.read()
    peer.send_raw(b"Content-Length: 3\r\n\r\n{x}")
    with pytest.raises(DapProtocolError, match="not valid JSON"):
        await asyncio.wait_for(task, 1)
    with pytest.raises(DapProtocolError):
        await channel.request("threads")


async def test_timeout_then_late_reply_is_ignored(peer: FakePeer) -> None:
    channel = channel_for(peer)
    with pytest.raises(DapTimeout, match="no reply to DAP 'continue' within 0.05s"):
        await channel.request("continue", {"threadId": 1}, timeout=0.05)
    late = await peer.read()
    peer.respond(late)  # nobody waits for it any more
    task = asyncio.create_task(channel.request("threads"))
    peer.respond(await peer.read(), {"threads": [{"id": 1, "name": "MainThread"}]})
    assert (await task)["threads"][0]["id"] == 1
    with pytest.raises(DapTimeout, match="no DAP 'stopped' event"):
        await channel.wait_for_event("stopped", timeout=0.05)
    await channel.close()


async def test_reverse_request_is_refused_and_bad_subscriber_is_survived(peer: FakePeer) -> None:
    channel = channel_for(peer)

    def boom(message: dict[str, Any]) -> None:
        raise RuntimeError("subscriber bug")

    channel.subscribe("output", boom)
    peer.event("output", {"output": "x"})
    peer.send({"type": "request", "command": "runInTerminal", "arguments": {}})
    refusal = await peer.read()
    assert refusal["type"] == "response" and refusal["success"] is False
    assert refusal["command"] == "runInTerminal" and refusal["request_seq"] == 2
    task = asyncio.create_task(channel.request("threads"))
    request = await peer.read()
    assert request["seq"] == refusal["seq"] + 1
    peer.respond(request)
    await task
    await channel.close()


async def test_client_close_fails_pending_and_closes_writer(peer: FakePeer) -> None:
    client = DapClient(peer.client_reader, peer.client_writer)
    task = asyncio.create_task(client.threads())
    await peer.read()
    await client.close()
    with pytest.raises(DapConnectionLost, match="closed by the client"):
        await task
    assert peer.client_writer.closed


async def test_client_helpers_send_spec_arguments(peer: FakePeer) -> None:
    client = DapClient(peer.client_reader, peer.client_writer, timeout=2)

    async def serve() -> list[dict[str, Any]]:
        seen = []
        replies: dict[str, dict[str, Any]] = {
            "stackTrace": {"stackFrames": [{"id": 3, "name": "f", "line": 4}]},
            "scopes": {"scopes": [{"name": "Locals", "variablesReference": 7}]},
            "variables": {"variables": [{"name": "x", "value": "41", "variablesReference": 0}]},
            "evaluate": {"result": "82", "variablesReference": 0},
        }
        for _ in range(8):
            request = await peer.read()
            seen.append(request)
            peer.respond(request, replies.get(request["command"]))
        return seen

    server = asyncio.create_task(serve())
    frames = await client.stack_trace(1)
    scopes = await client.scopes(frames[0]["id"])
    variables = await client.variables(scopes[0]["variablesReference"], start=0, count=50)
    result = await client.evaluate("x * 2", frame_id=3)
    await client.next(1)
    await client.step_in(1)
    await client.step_out(1)
    await client.continue_(1)
    seen = await server
    assert variables[0]["value"] == "41" and result["result"] == "82"
    assert [(r["command"], r.get("arguments")) for r in seen] == [
        ("stackTrace", {"threadId": 1, "startFrame": 0, "levels": 0}),
        ("scopes", {"frameId": 3}),
        ("variables", {"variablesReference": 7, "start": 0, "count": 50}),
        ("evaluate", {"expression": "x * 2", "context": "repl", "frameId": 3}),
        ("next", {"threadId": 1}),
        ("stepIn", {"threadId": 1}),
        ("stepOut", {"threadId": 1}),
        ("continue", {"threadId": 1}),
    ]
    disconnect = asyncio.create_task(client.disconnect())
    request = await peer.read()
    assert request["arguments"] == {"terminateDebuggee": False}
    peer.respond(request)
    await disconnect
    assert not client.is_open


async def test_attach_session_follows_debugpy_order(peer: FakePeer) -> None:
    async def debugpy_like() -> list[str]:
        order = []
        init = await peer.read()
        order.append(init["command"])
        peer.respond(init, {"supportsConfigurationDoneRequest": True})
        attach = await peer.read()
        order.append(attach["command"])
        assert attach["arguments"] == {"justMyCode": False, "subProcess": False}
        peer.event("initialized")  # the attach reply is held back until configurationDone
        done = await peer.read()
        order.append(done["command"])
        peer.respond(done)
        peer.respond(attach)
        peer.event("stopped", {"reason": "breakpoint", "threadId": 1})
        return order

    server = asyncio.create_task(debugpy_like())
    client, stopped = await attach_session(
        peer.client_reader, peer.client_writer, attach_arguments={"subProcess": False}, timeout=2
    )
    assert await server == ["initialize", "attach", "configurationDone"]
    assert stopped["body"] == {"reason": "breakpoint", "threadId": 1}
    assert client.capabilities["supportsConfigurationDoneRequest"] is True
    await client.close()


async def test_attach_session_without_a_paused_thread_times_out_and_closes(
    peer: FakePeer,
) -> None:
    async def never_stops() -> None:
        init = await peer.read()
        peer.respond(init, {})
        attach = await peer.read()
        peer.event("initialized")
        done = await peer.read()
        peer.respond(done)
        peer.respond(attach)

    server = asyncio.create_task(never_stops())
    with pytest.raises(DapTimeout, match="no paused thread within 0.2s"):
        await attach_session(peer.client_reader, peer.client_writer, timeout=0.2)
    await server
    assert peer.client_writer.closed
