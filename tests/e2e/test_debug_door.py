"""The worker's debugger door: private socket, other uids refused, gone after the pause; every
local door raydbg opens (forward's port and socket, the agents') refuses another local user and
keeps nothing in Ray's shared folders; and every way a client can leave releases only the
threads it resumed itself."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from other_user import OTHER_UID, as_other_user, can_be_other_user, dap_attack

from e2e import targets
from e2e.conftest import (
    attach_and_inspect,
    attach_paused_threads,
    forward,
    forward_log,
    forward_process,
    gateway,
    inspect_paused,
    raydbg_cli,
    wait_for_session,
)
from raydbg.private_dir import private_name

pytestmark = pytest.mark.e2e



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


def _tcp_listeners_of(pids: list[int]) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for pid in pids:
        for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
            out |= _inet_listeners(proc.pid)
    return out


@can_be_other_user
def test_another_user_gets_nothing_from_any_local_door(ray_cluster: str, gw: Any, tmp_path: Path) -> None:
    """A paused worker, `raydbg forward` on a port and on a unix socket: another uid sends DAP
    to every TCP port the worker, the agents and the forwarders listen on and to the socket,
    and gets no answer and runs nothing; the owner attaches through both right after."""
    actor = ray.remote(targets.ThreadedActor).options(max_concurrency=2).remote()
    ref = actor.work.remote(3)
    rec = wait_for_session(gw, function="work")
    proof = tmp_path / "evaluated"
    os.chmod(tmp_path, 0o777)  # the attacker could write its proof here, if its code ran
    agents = [a["pid"] for a in asyncio.run(gw.status())["agents"]]
    with forward_process(ray_cluster, rec["id"]) as (tcp_fwd, tcp_line), \
            forward_process(ray_cluster, rec["id"], "--unix") as (unix_fwd, unix_line):
        port = int(tcp_line.split("127.0.0.1:")[1].split()[0])
        sock_path = unix_line.split("unix socket ")[1].split()[0]
        assert os.stat(os.path.dirname(sock_path)).st_mode & 0o777 == 0o700
        listeners = _tcp_listeners_of([rec["pid"], *agents, tcp_fwd.pid, unix_fwd.pid])
        assert ("127.0.0.1", port) in listeners and len(listeners) >= 2  # the gateway's port too
        outcomes = {f"{host}:{p}": as_other_user(dap_attack((host, p), str(proof)))
                    for host, p in sorted(listeners)}
        # The forward port hangs up before relaying a byte; the agents answer HTTP 400, Ray's own
        # gRPC ports what gRPC answers: no DAP anywhere.
        assert outcomes.pop(f"127.0.0.1:{port}") == "closed"
        assert outcomes and "DAP answered" not in outcomes.values(), outcomes
        assert not [o for o in outcomes.values() if o.startswith("error")], outcomes
        assert as_other_user(dap_attack(sock_path, str(proof))) == "permission denied"
        time.sleep(1)  # an evaluation that got through would have written by now
        assert not proof.exists()
        assert f"from uid {OTHER_UID}" in forward_log(tcp_fwd)
        # The owner: attach through the unix socket (evaluate there), then through the port.
        async def over_unix() -> dict[str, Any]:
            reader, writer = await asyncio.open_unix_connection(sock_path)
            seen = await inspect_paused(reader, writer, "local_value", "local_value + 1", resume=False)
            await seen["client"].close()  # gone without a word: the thread stays paused
            return seen
        seen = asyncio.run(over_unix())
        assert (seen["value"], seen["evaluated"]) == ("103", "104")
        _wait_state(gw, rec["id"], "waiting")
        seen = asyncio.run(attach_and_inspect(port, "local_value"))
        assert seen["value"] == "103"
    assert ray.get(ref, timeout=60) == 103


@can_be_other_user
def test_nothing_of_ours_in_rays_shared_folders_and_what_is_planted_there_is_ignored(
        ray_cluster: str, gw: Any) -> None:
    """Ray's session dir is writable by every local user (0777, no sticky bit): raydbg keeps
    nothing there, and a gateway file, a FIFO or a symlink another user plants there is never
    read: the owner's `raydbg list` still reaches the real gateway, the planted address no byte."""
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    assert session.stat().st_mode & 0o7777 == 0o777
    mine = session / private_name()
    assert not mine.exists()
    with socket.create_server(("127.0.0.1", 0)) as bait:
        bait.settimeout(0.5)
        bait_port = bait.getsockname()[1]

        def plant() -> str:
            os.mkdir(mine)
            (mine / "gateway.json").write_text(json.dumps({"address": f"127.0.0.1:{bait_port}", "pid": 1}))
            os.mkfifo(mine / "worker-1.metrics.json")
            os.mkdir(mine / "telemetry")
            os.symlink("/root", mine / "sessions")
            return "planted"

        assert as_other_user(plant) == "planted"
        try:
            out = raydbg_cli(ray_cluster, "list", "--json")
            assert out.returncode == 0, out.stderr
            assert ray.get(ray.remote(lambda: 7).remote(), timeout=60) == 7  # the job goes on
            with pytest.raises(TimeoutError):
                bait.accept()  # no client dialled the planted address
        finally:
            shutil.rmtree(mine)


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
    assert as_other_user(dap_attack(path, str(proof))) == "permission denied"
    # ... and, with the fences on the path lowered, the worker's own peer-uid check.
    fences = [os.path.dirname(path), os.path.dirname(os.path.dirname(path))]
    for directory in fences:
        os.chmod(directory, 0o711)
    os.chmod(path, 0o666)
    try:
        outcome = as_other_user(dap_attack(path, str(proof)))
    finally:
        for directory in fences:
            os.chmod(directory, 0o700)
    # The worker hangs up on it: at its first read or write, whichever comes first.
    assert outcome == "closed", outcome
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
