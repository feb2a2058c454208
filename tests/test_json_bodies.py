"""Every JSON route of the real agent app (the gateway's, with the features the agent host
serves) answers a bad body with a 400 and one line: bad pids to the pause route, deeply
nested or non-finite JSON anywhere. No Ray: the app is served by aiohttp's test server,
the registry runs over a dict."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from raydbg.agent.server import AgentServer
from raydbg.breakpoints import api as breakpoints_api
from raydbg.gang import routes as gang_routes

TOKEN = "t" * 43
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
JSON_ROUTES = [("POST", "/api/v1/node/pause"), ("POST", "/api/v1/pause"), ("POST", "/api/v1/continue"),
               ("POST", "/api/v1/breakpoints"), ("PUT", "/api/v1/breakpoints?owner=me")]


pytestmark = pytest.mark.usefixtures("kv")  # every route reads the registry


def answers(requests: list[tuple[str, str, bytes]]) -> list[tuple[int, Any]]:
    """(status, JSON body) of each request, sent to a fresh gateway app."""
    server = AgentServer("0" * 56, "127.0.0.1", TOKEN, is_head=True, features=(gang_routes, breakpoints_api))

    async def run() -> list[tuple[int, Any]]:
        async with TestClient(TestServer(server.app())) as client:
            out = []
            for method, path, body in requests:
                resp = await client.request(method, path, data=body, headers=HEADERS)
                raw = await resp.read()
                try:
                    out.append((resp.status, json.loads(raw)))
                except ValueError:  # aiohttp's own text: a bare 500
                    out.append((resp.status, raw.decode(errors="replace")))
            return out

    return asyncio.run(run())


def one_line_400(status: int, body: Any) -> str:
    assert status == 400, (status, body)
    assert isinstance(body, dict) and list(body) == ["error"], body
    error = body["error"]
    assert isinstance(error, str) and error and "\n" not in error and len(error) < 400, error
    return error


@pytest.mark.parametrize("pid", [-1, 0, True, False, 2**31, 2**64, 10**300, "4242", 1.5, None, [1], {"pid": 1}],
                         ids=["-1", "0", "true", "false", "2^31", "2^64", "10^300", "string", "float", "null", "list",
                              "object"])
def test_a_bad_pid_to_the_pause_route_is_a_one_line_400(pid: Any) -> None:
    [(status, body)] = answers([("POST", "/api/v1/node/pause", json.dumps({"pid": pid}).encode())])
    assert "pid" in one_line_400(status, body)


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000, b'{"pid": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                                  b'{"pid": 1e400}', b'{"pid": NaN}', b'{"pid": ' + b"9" * 5000 + b"}",
                                  b"\xff\xfe", b"", b"not json"],
                         ids=["100k-lists", "100k-objects", "5k-deep-pid", "1e400", "NaN", "5000-digits", "not-utf8",
                              "empty", "text"])
def test_a_body_that_is_not_plain_json_is_a_one_line_400_on_every_json_route(body: bytes) -> None:
    for (status, answer), route in zip(answers([(m, p, body) for m, p in JSON_ROUTES]), JSON_ROUTES, strict=True):
        assert "JSON" in one_line_400(status, answer), route


def test_pause_fields_out_of_range_are_a_one_line_400() -> None:
    for (status, body) in answers([("POST", "/api/v1/pause", b'{"target": "4242", "wait_s": 1' + b"0" * 400 + b"}"),
                                   ("POST", "/api/v1/pause", b'{"target": 7}')]):
        one_line_400(status, body)


def test_a_good_body_still_gets_its_answer() -> None:
    (pause_status, _), (cont_status, cont) = answers([
        ("POST", "/api/v1/node/pause", b'{"pid": 2147483647}'),  # a valid pid nobody has
        ("POST", "/api/v1/continue", b'{"all": true}'),
    ])
    assert pause_status == 404  # no process: the route went on past its body
    assert cont_status == 404 and "no paused session" in cont["error"]
