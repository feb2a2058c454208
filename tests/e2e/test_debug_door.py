"""The worker's debugger door: private socket, other uids refused, gone after the pause; and
every way a client can leave releases only the threads it resumed itself."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import socket
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

from e2e import targets
from e2e.conftest import (
    attach_and_inspect,
    attach_paused_threads,
    forward,
    gateway,
    raydbg_cli,
    wait_for_session,
)

pytestmark = pytest.mark.e2e

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture(scope="module")
def gw(ray_cluster: str) -> Any:
    assert raydbg_cli(ray_cluster, "up").returncode == 0
    return gateway(ray_cluster)


def _private(rec: dict[str, Any]) -> dict[str, Any]:
    from raydbg import registry

    found = registry.get(registry.SESSION + rec["id"])
    assert found is not None
    return found


def _inet_listeners(pid: int) -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN}


def _unix_listeners(pid: int) -> set[str]:
    """Paths of listening Unix sockets held by `pid` (an accepted connection shares the path)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    with open("/proc/net/unix") as table:
        next(table)
        for row in table:
            fields = row.split()
            accepting = int(fields[3], 16) & 0x10000  # __SO_ACCEPTCON: a listener
            if len(fields) >= 8 and accepting and fields[6] in inodes:
                out.add(fields[7])
    return out


def _as_nobody_evaluate(path: str, proof: Path) -> str:
    """In a child running as `nobody`: connect, attach and evaluate code that writes `proof`."""
    rd, wr = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(rd)
        outcome = "?"
        try:
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(path)
                for seq, (command, args) in enumerate([
                    ("initialize", {"adapterID": "x"}), ("attach", {}), ("configurationDone", {}),
                    ("evaluate", {"expression": f"open({str(proof)!r}, 'w').write('x')"}),
                ], start=1):
                    body = json.dumps({"seq": seq, "type": "request", "command": command,
                                       "arguments": args}).encode()
                    s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                got = s.recv(65536)
                outcome = "answered" if got else "closed"
        except PermissionError:
            outcome = "permission denied"
        except (ConnectionError, TimeoutError, OSError) as exc:
            outcome = f"error {type(exc).__name__}"
        os.write(wr, outcome.encode())
        os._exit(0)
    os.close(wr)
    os.waitpid(child, 0)
    with os.fdopen(rd) as f:
        return f.read()


def test_the_debugger_listens_only_on_a_private_socket_while_paused(ray_cluster: str, gw: Any,
                                                                    tmp_path: Path) -> None:
    actor = ray.remote(targets.ThreadedActor).options(max_concurrency=2).remote()
    pid = ray.get(actor.pid.remote(), timeout=60)
    before = _inet_listeners(pid)
    ref = actor.work.remote(1)
    rec = wait_for_session(gw, function="work", pid=pid)
    private = _private(rec)
    path = private["socket"]
    assert path and private["port"] is None
    assert "socket" not in rec and "port" not in rec  # the API never shows where it listens
    assert path.endswith(f"/raydbg-{os.getuid()}/debug/{pid}.sock")
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    # No TCP listener was added by the pause: nothing for a local user to dial.
    assert _inet_listeners(pid) == before
    assert path in _unix_listeners(pid)

    proof = tmp_path / "evaluated"
    os.chmod(tmp_path, 0o777)
    # Another uid meets the 0700 directory ...
    assert _as_nobody_evaluate(path, proof) == "permission denied"
    # ... and, with the fences on the path lowered, the worker's own peer-uid check.
    fences = [os.path.dirname(path), os.path.dirname(os.path.dirname(path))]
    for directory in fences:
        os.chmod(directory, 0o711)
    os.chmod(path, 0o666)
    try:
        outcome = _as_nobody_evaluate(path, proof)
    finally:
        for directory in fences:
            os.chmod(directory, 0o700)
    # The worker hangs up on it: at its first read or write, whichever comes first.
    assert outcome in ("closed", "error ConnectionResetError", "error BrokenPipeError"), outcome
    assert not proof.exists()

    # The owner attaches as usual through the gateway, and the door closes after the pause.
    with forward(ray_cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "local_value"))
    assert seen["value"] == "101"
    assert ray.get(ref, timeout=60) == 101
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (os.path.exists(path) or path in _unix_listeners(pid)):
        time.sleep(0.05)
    assert not os.path.exists(path) and path not in _unix_listeners(pid)
    assert _inet_listeners(pid) == before
    # A second pause in the same worker opens it again.
    ref = actor.work.remote(2)
    rec = wait_for_session(gw, function="work", pid=pid)
    with forward(ray_cluster, rec["id"]) as port:
        assert asyncio.run(attach_and_inspect(port, "local_value"))["value"] == "102"
    assert ray.get(ref, timeout=60) == 102


def _two_paused(gw: Any, base: int) -> tuple[list[Any], list[dict[str, Any]]]:
    actor = ray.remote(targets.ThreadedActor).options(max_concurrency=4).remote()
    pid = ray.get(actor.pid.remote(), timeout=60)
    refs = [actor.work.remote(base), actor.work.remote(base + 1)]
    deadline = time.monotonic() + 90
    recs: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(recs) < 2:
        recs = [r for r in asyncio.run(gw.sessions()) if r["pid"] == pid and r["attachable"]]
        time.sleep(0.1)
    assert len(recs) == 2
    return refs, recs


def _wait_state(gw: Any, sid: str, state: str, timeout: float = 15) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in asyncio.run(gw.sessions()):
            if rec["id"] == sid and rec["state"] == state:
                return dict(rec)
        time.sleep(0.1)
    raise AssertionError(f"session {sid} not {state} within {timeout}s")


@pytest.mark.parametrize("leave", ["disconnect", "closed socket"])
def test_leaving_releases_only_the_threads_the_client_resumed(ray_cluster: str, gw: Any,
                                                              leave: str) -> None:
    base = 10 if leave == "disconnect" else 20
    refs, recs = _two_paused(gw, base)
    first = recs[0]
    with forward(ray_cluster, first["id"]) as port:
        async def one_client() -> None:
            client, paused = await attach_paused_threads(port, targets.line_of("threaded"))
            assert sorted(paused) == [base, base + 1]
            await client.continue_(paused[base])
            done, _ = await asyncio.get_running_loop().run_in_executor(
                None, lambda: ray.wait(refs, num_returns=1, timeout=30))
            assert done and ray.get(done[0]) == base + 100
            if leave == "disconnect":
                await client.disconnect()
            await client.close()  # "closed socket": no disconnect at all

        asyncio.run(one_client())
    # The other call did not run on: still paused, listed, waiting for the next client.
    left = [r for r in asyncio.run(gw.sessions()) if r["function"] == "work" and r["pid"] == first["pid"]]
    assert len(left) == 1
    rec = _wait_state(gw, left[0]["id"], "waiting")
    _, pending = ray.wait(refs, num_returns=2, timeout=1)
    assert len(pending) == 1
    with forward(ray_cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "local_value"))
    assert seen["value"] == str(base + 101)
    assert sorted(ray.get(refs, timeout=60)) == [base + 100, base + 101]
