"""The stacks thread of an activated worker (cooperative_worker.listen / cooperative_agent.ask) on real processes (no Ray):
it answers without a signal or ptrace, while the main thread is blocked in C; a process
without it is left to py-spy, with the same shape of answer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raydbg.gang import cooperative_agent, cooperative_files, node, pyspy

CHILD = textwrap.dedent(
    """
    import ctypes, sys, threading, time
    sys.path.insert(0, {repo!r})
    from raydbg.gang import cooperative_worker
    listening = {listen} and cooperative_worker.listen()
    started = threading.Event()

    def side_work():
        started.set()
        time.sleep(300)

    threading.Thread(target=side_work, name="side-thread", daemon=True).start()

    def main_work():
        started.wait()
        print(listening, flush=True)
        ctypes.CDLL(None).sleep(300)  # in C, the GIL released: no bytecode, no signal handler runs

    main_work()
    """
)


def spawn(tmp_path: Path, listen: bool) -> subprocess.Popen[str]:
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(repo=repo, listen=listen)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "RAYDBG_STACKS_DIR": str(tmp_path)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == str(listen)
    return proc


@pytest.fixture
def children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[subprocess.Popen[str], ...]]:
    monkeypatch.setenv("RAYDBG_STACKS_DIR", str(tmp_path))
    procs = (spawn(tmp_path, True), spawn(tmp_path, False))
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def functions(threads: list[dict]) -> set[str]:
    return {f["function"] for t in threads for f in t["frames"]}


def test_the_stacks_thread_answers_while_the_main_thread_is_in_c(children: tuple[subprocess.Popen[str], ...]) -> None:
    listening, _ = children
    assert cooperative_agent.listening(listening.pid)
    t = time.monotonic()
    threads = asyncio.run(cooperative_agent.ask(listening.pid))
    took = time.monotonic() - t
    assert {t["name"] for t in threads} == {"MainThread", "side-thread"}  # not the stacks thread itself
    assert {"main_work", "side_work"} <= functions(threads)
    assert all(t["native_id"] for t in threads)
    assert took < 0.5, took
    again = asyncio.run(cooperative_agent.ask(listening.pid))  # a fresh answer each time
    assert "main_work" in functions(again) and listening.poll() is None
    # It came from the thread, not a signal: the signal handlers were never installed.
    assert not cooperative_agent.available(listening.pid)


def test_activated_from_the_thread_the_other_from_pyspy_same_shape(children: tuple[subprocess.Popen[str], ...]) -> None:
    listening, plain = children
    assert not cooperative_agent.listening(plain.pid)
    ours = asyncio.run(node.worker_stacks({"pid": listening.pid, "paused_threads": []}, False, True))
    other = asyncio.run(node.worker_stacks({"pid": plain.pid, "paused_threads": []}, False, True))
    assert (ours["source"], ours["cooperative_format"]) == ("cooperative", "thread"), ours.get("error")
    assert other["source"] == "py-spy" and "cooperative_format" not in other, other.get("error")
    assert {"main_work", "side_work"} <= functions(ours["threads"]) & functions(other["threads"])
    shape = {frozenset(t) for t in ours["threads"] + other["threads"]}
    assert shape == {frozenset({"thread_id", "native_id", "name", "idle", "paused", "frames"})}, shape
    # The same threads by id: py-spy's thread_id and native_id are Python's ident and native_id.
    by_pyspy = asyncio.run(node.worker_stacks({"pid": listening.pid, "paused_threads": []}, False, True,
                                              use_thread=False))
    assert by_pyspy["source"] == "py-spy"
    ids = {(t["thread_id"], t["native_id"]) for t in ours["threads"]}
    assert ids < {(t["thread_id"], t["native_id"]) for t in by_pyspy["threads"]}  # py-spy also sees raydbg-stacks


def test_a_fifo_nobody_reads_is_a_quick_error_and_pyspy_answers(children: tuple[subprocess.Popen[str], ...]) -> None:
    listening, plain = children
    with pytest.raises(pyspy.StackError, match="no raydbg stacks thread"):
        asyncio.run(cooperative_agent.ask(plain.pid))  # no FIFO at all
    os.mkfifo(cooperative_files.request_path(plain.pid), 0o600)  # a FIFO whose reader is gone
    assert cooperative_agent.listening(plain.pid)
    t = time.monotonic()
    with pytest.raises(pyspy.StackError, match="no raydbg stacks thread"):
        asyncio.run(cooperative_agent.ask(plain.pid))  # ENXIO at the open: no wait for a timeout
    assert time.monotonic() - t < 0.5
    w = asyncio.run(node.worker_stacks({"pid": plain.pid, "paused_threads": []}, False, True))
    assert w["source"] == "py-spy" and "main_work" in functions(w["threads"]), w.get("error")
    gone = listening.pid
    listening.kill()
    listening.wait()
    with pytest.raises(pyspy.StackError):
        asyncio.run(cooperative_agent.ask(gone))


def test_pyspy_and_no_pyspy_together_is_a_one_line_error() -> None:
    out = subprocess.run([sys.executable, "-m", "raydbg", "stacks", "--pyspy", "--no-pyspy"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "RAYDBG_GATEWAY": "127.0.0.1:9"})
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "--pyspy and --no-pyspy" in out.stderr
