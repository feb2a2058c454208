"""The debugger's Unix socket, real sockets and processes (no Ray): the relay dials only the
session's own pid, and a shut door stops listening at its next poll."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raydbg import debug_socket
from raydbg.agent.relay import DebuggeeAddress

LISTEN_AS_ITSELF = """
import os, socket, sys, tempfile
sys.path.insert(0, {repo!r})
tempfile.tempdir = {tmp!r}
from raydbg import debug_socket
sys.stdin.readline()  # the test's planted socket is gone
s = socket.socket(socket.AF_UNIX)
s.bind(str(debug_socket.socket_path(os.getpid())))
s.listen(4)
print("listening", flush=True)
while True:
    s.accept()[0].close()
"""


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # socket_dir() under it
    return tmp_path


@pytest.fixture
def session_worker(tmp: Path) -> Iterator[subprocess.Popen[str]]:
    """A process standing for a paused worker (its pid is the session's)."""
    code = LISTEN_AS_ITSELF.format(repo=str(Path(__file__).resolve().parents[1]), tmp=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    yield proc
    proc.kill()
    proc.wait()


async def dial(pid: int) -> None:
    path = debug_socket.socket_path(pid)
    _, writer = await DebuggeeAddress(pid, str(path), None).open()
    writer.close()


def test_the_relay_refuses_a_socket_planted_at_the_sessions_path(session_worker: subprocess.Popen[str]) -> None:
    pid = session_worker.pid
    path = debug_socket.socket_path(pid)
    # Someone else (this test process, same uid) holds the session's path before the worker does.
    planted = socket.socket(socket.AF_UNIX)
    planted.bind(str(path))
    planted.listen(4)
    try:
        with pytest.raises(PermissionError, match=f"held by pid {os.getpid()}"):
            asyncio.run(dial(pid))
    finally:
        planted.close()
        path.unlink()
    # The worker's own listener at the same path is dialled.
    assert session_worker.stdin is not None
    session_worker.stdin.write("bind\n")
    session_worker.stdin.flush()
    assert session_worker.stdout is not None and session_worker.stdout.readline().strip() == "listening"
    asyncio.run(dial(pid))


def test_a_shut_door_stops_listening_at_its_next_poll(tmp: Path) -> None:
    path = debug_socket.socket_path(os.getpid())
    door = debug_socket.Door(path)
    accepted: list[object] = []
    ended: list[OSError] = []

    def pydevd_thread() -> None:
        try:
            accepted.append(door.accept())
        except OSError as exc:  # close(): how pydevd's thread is told to stop
            ended.append(exc)

    t = threading.Thread(target=pydevd_thread, daemon=True)
    t.start()
    door.open()
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, "the open door never listened"
        time.sleep(0.01)
    # Its accept() wakes every POLL_S (0.1 s, the documented bound) to see whether it was shut.
    assert door._sock is not None and door._sock.gettimeout() == debug_socket.Door.POLL_S == 0.1
    door.shut()
    while path.exists():
        assert time.monotonic() < deadline, "the shut door is still listening"
        time.sleep(0.01)
    assert not door.listening and accepted == []
    door.close()
    t.join(5)
    assert not t.is_alive() and ended
