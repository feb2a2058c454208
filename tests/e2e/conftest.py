"""Shared real-cluster helpers: a Ray cluster with raydbg active, the CLI, forward, DAP attach."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from cluster import RAYDBG, REPO, Cluster

from e2e.gang_targets import TRAIN_CLUSTER_ENV

__all__ = ["RAYDBG", "REPO", "Cluster"]


def cli_env(gcs_address: str) -> dict[str, str]:
    env = dict(os.environ)
    env["RAY_ADDRESS"] = gcs_address
    env.pop("RAYDBG_GATEWAY", None)
    return env


def raydbg_cli(gcs_address: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RAYDBG, *args], env=cli_env(gcs_address), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def list_sessions(gcs_address: str) -> list[dict[str, Any]]:
    out = raydbg_cli(gcs_address, "list", "--json")
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def gateway(gcs_address: str) -> Any:
    from raydbg.client import Gateway

    os.environ["RAY_ADDRESS"] = gcs_address
    try:
        return Gateway.discover()
    finally:
        os.environ.pop("RAY_ADDRESS", None)


def wait_until(check: Any, timeout: float, what: str, every: float = 0.1) -> Any:
    """`check()`'s first truthy value within `timeout` s, asked every `every` s; else fail
    saying `what` did not happen, with the last value seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"{what} within {timeout}s: {check()!r}"[:3000])


def wait_for_session(gw: Any, timeout: float = 90, attachable: bool = True, **match: Any) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            recs = asyncio.run(gw.sessions())
        except Exception:
            recs = []
        for rec in recs:
            if all(rec.get(k) == v for k, v in match.items()) and (rec["attachable"] or not attachable):
                return dict(rec)
        time.sleep(0.05)
    raise AssertionError(f"no session matching {match} within {timeout}s")


def wait_gone(gw: Any, sid: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(r["id"] != sid for r in asyncio.run(gw.sessions())):
            return
        time.sleep(0.1)
    raise AssertionError(f"session {sid} still listed after {timeout}s")


@contextmanager
def forward(gcs_address: str, sid: str) -> Iterator[int]:
    """`raydbg forward SID --port 0` as a real subprocess; yields the local port."""
    with forward_process(gcs_address, sid) as (_, line):
        yield int(line.split("127.0.0.1:")[1].split()[0])


@contextmanager
def forward_process(gcs_address: str, sid: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`raydbg forward SID [args]` (default `--port 0`) as a real subprocess; yields it and its
    first line (where it listens). Its stderr goes to a file read back by `forward_log`."""
    import tempfile

    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([*RAYDBG, "forward", sid, *(args or ("--port", "0"))], env=cli_env(gcs_address),
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO)
    proc.log = log  # type: ignore[attr-defined]
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("raydbg forward: session"):
            proc.kill()
            log.seek(0)
            raise AssertionError(f"forward did not start: {line!r} {log.read()}")
        yield proc, line
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def forward_log(proc: subprocess.Popen[str]) -> str:
    log = proc.log  # type: ignore[attr-defined]
    log.seek(0)
    return str(log.read())


async def attach_and_inspect(port: int, variable: str, expression: str | None = None,
                             resume: bool = True) -> dict[str, Any]:
    """Attach through a forward port; return top frame, the variable's value, evaluation."""
    from raydbg.dap.transport import open_tcp

    return await inspect_paused(*await open_tcp("127.0.0.1", port), variable, expression, resume)


async def inspect_paused(reader: Any, writer: Any, variable: str | None = None,
                         expression: str | None = None, resume: bool = True) -> dict[str, Any]:
    """Attach over a DAP stream; top frame, its locals ("variables"), `variable`'s value, the evaluation.
    resume: continue and disconnect; else the client is in the result, still attached."""
    from raydbg.dap.session import attach_session

    client, stopped = await attach_session(reader, writer, timeout=30)
    thread_id = stopped["body"]["threadId"]
    frames = await client.stack_trace(thread_id)
    top = frames[0]
    scopes = await client.scopes(top["id"])
    local_ref = scopes[0]["variablesReference"]
    variables = {v["name"]: v["value"] for v in await client.variables(local_ref)}
    result: dict[str, Any] = {
        "top": top, "value": variables.get(variable or ""), "stopped": stopped, "variables": variables,
    }
    if expression:
        result["evaluated"] = (await client.evaluate(expression, top["id"]))["result"]
    if resume:
        await client.continue_(thread_id)
        await client.disconnect()
        await client.close()
    else:
        result["client"] = client
    return result


async def attach_paused_threads(port: int, line: int) -> tuple[Any, dict[int, int]]:
    """Attach through a forward port; the worker's threads paused at `line`, by their local `n`."""
    from raydbg.dap.session import attach_session
    from raydbg.dap.transport import open_tcp

    reader, writer = await open_tcp("127.0.0.1", port)
    client, _ = await attach_session(reader, writer, timeout=30)
    paused: dict[int, int] = {}
    for thread in await client.threads():
        frames = await client.stack_trace(thread["id"])
        if frames and frames[0]["line"] == line:
            scopes = await client.scopes(frames[0]["id"])
            values = {v["name"]: v["value"] for v in await client.variables(scopes[0]["variablesReference"])}
            paused[int(values["n"])] = thread["id"]
    return client, paused


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    # TRAIN_CLUSTER_ENV: test_debug_contexts runs Train ranks here (gang_targets.py says why).
    env = {"RAY_DEBUG_POST_MORTEM": "1", "RAYDBG_WAIT_TIMEOUT": "120", **TRAIN_CLUSTER_ENV}
    with Cluster(env=env) as cluster:
        yield cluster.address
