"""Cooperative stacks and the py-spy fallback on real processes (no Ray): signal, files, denial."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raydbg.gang import (
    cooperative_agent,
    cooperative_files,
    node,
    pyspy,
    worker_labels,
)

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, {repo!r})
    from raydbg.gang import cooperative_worker
    installed = cooperative_worker.install()

    side_started = threading.Event()

    def side_work():
        side_started.set()
        time.sleep(300)

    threading.Thread(target=side_work, name="side-thread", daemon=True).start()

    def main_work():
        side_started.wait()
        print(installed, flush=True)  # only now: both threads are in their functions
        while True:
            time.sleep(0.05)

    main_work()
    """
)


@pytest.fixture
def child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[str]]:
    monkeypatch.setenv("RAYDBG_STACKS_DIR", str(tmp_path))
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(repo=repo)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "RAYDBG_STACKS_DIR": str(tmp_path)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
    yield proc
    proc.kill()
    proc.wait()


def functions(threads: list[dict]) -> set[str]:
    return {f["function"] for t in threads for f in t["frames"]}


def test_signal_gives_every_thread_with_names(child: subprocess.Popen[str]) -> None:
    threads, how = asyncio.run(cooperative_agent.request(child.pid))
    assert how == "json"  # the main thread runs Python between sleeps: the rich answer
    names = {t["name"] for t in threads}
    assert {"MainThread", "side-thread"} <= names
    assert {"main_work", "side_work"} <= functions(threads)
    assert "_on_signal" not in functions(threads) and "snapshot" not in functions(threads)
    # Asked again: a fresh answer, and the worker still runs.
    threads2, _ = asyncio.run(cooperative_agent.request(child.pid))
    assert "main_work" in functions(threads2) and child.poll() is None


# The main thread deadlocks on a C mutex (ctypes drops the GIL): signals never bring it back
# to bytecode, as Ray's task loop holds a worker's main thread, so the Python handler never runs.
STUCK_IN_C = textwrap.dedent(
    """
    import ctypes, sys, threading, time
    sys.path.insert(0, {repo!r})
    from raydbg.gang import cooperative_worker
    installed = cooperative_worker.install()
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER on glibc

    main = threading.main_thread()

    def side_work():
        # Say "ready" only once the main thread sleeps inside the second lock (its frame on
        # that line, its kernel state S): a signal before that would meet bytecode.
        while True:
            frame = sys._current_frames().get(main.ident)
            with open(f"/proc/self/task/{{main.native_id}}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if frame is not None and frame.f_lineno == BLOCK_LINE and state == "S":
                break
            time.sleep(0.01)
        print(installed, flush=True)
        time.sleep(300)

    def main_work():
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # BLOCK: locked by this very thread, blocks for ever in C

    BLOCK_LINE = main_work.__code__.co_firstlineno + 2
    threading.Thread(target=side_work, name="side-thread", daemon=True).start()
    main_work()
    """
)


def test_faulthandler_text_when_the_main_thread_is_stuck_in_c(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_STACKS_DIR", str(tmp_path))
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen([sys.executable, "-c", STUCK_IN_C.format(repo=repo)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "RAYDBG_STACKS_DIR": str(tmp_path)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        threads, how = asyncio.run(cooperative_agent.request(proc.pid, timeout=30))
        assert how == "faulthandler"  # the JSON never came: after the grace, the C dump answered
        assert {"main_work", "side_work"} <= functions(threads)
        assert proc.poll() is None  # and the worker still runs
    finally:
        proc.kill()
        proc.wait()


def test_never_signals_a_process_without_our_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_STACKS_DIR", str(tmp_path))
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not cooperative_agent.available(plain.pid)
        with pytest.raises(pyspy.StackError):
            asyncio.run(cooperative_agent.request(plain.pid))
        assert plain.poll() is None  # SIGUSR2's default action would have killed it
    finally:
        plain.kill()
        plain.wait()


CATCHER = textwrap.dedent(
    """
    import signal, sys
    got = []
    signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))
    print("ready", flush=True)
    sys.stdin.readline()
    print(len(got), flush=True)
    """
)


def test_a_process_whose_start_time_differs_from_the_one_asked_for_is_never_signalled() -> None:
    # Its pid as a reused one would look: alive, catching SIGUSR2, but not started when asked.
    proc = subprocess.Popen([sys.executable, "-c", CATCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        ticks = cooperative_files.start_ticks(proc.pid)
        assert not cooperative_agent.signal_if_same(proc.pid, str(int(ticks) - 1))
        assert not cooperative_agent.signal_if_same(proc.pid, str(int(ticks) + 1))
        assert cooperative_agent.signal_if_same(proc.pid, ticks)  # the process asked for: signalled once
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "1"
    finally:
        proc.kill()
        proc.wait()
    assert not cooperative_agent.signal_if_same(proc.pid, ticks)  # gone (reaped): nothing to signal


def test_a_process_that_does_not_catch_the_signal_is_never_sent_it() -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not cooperative_agent.signal_if_same(plain.pid, cooperative_files.start_ticks(plain.pid))
        assert plain.poll() is None  # SIGUSR2's default action would have killed it
    finally:
        plain.kill()
        plain.wait()


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_pyspy_denied_falls_back_to_the_handler(child: subprocess.Popen[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # py-spy run as nobody: ptrace of a root process is refused for real (EPERM).
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {pyspy.find_pyspy()} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("RAYDBG_PYSPY", str(wrapper))
    with pytest.raises(pyspy.StackError, match="Permission Denied"):
        asyncio.run(pyspy.dump(child.pid))
    w = asyncio.run(node.worker_stacks({"pid": child.pid, "paused_threads": []}, False, True))
    assert w["source"] == "cooperative" and "error" not in w
    assert "Permission Denied" in w["pyspy_error"]  # the answer says why py-spy was not used
    assert "main_work" in functions(w["threads"])


def test_pyspy_dump_of_a_live_process(child: subprocess.Popen[str]) -> None:
    threads = asyncio.run(pyspy.dump(child.pid))
    assert {"main_work", "side_work"} <= functions(threads)
    assert any(t["name"] == "side-thread" for t in threads)
    with pytest.raises(pyspy.StackError):
        asyncio.run(pyspy.dump(2**22 + 12345))  # no such pid: an error, not an exception leak


def test_prune_removes_files_of_gone_processes(child: subprocess.Popen[str], tmp_path: Path) -> None:
    base = cooperative_files.stacks_dir()
    (base / "999999999-1.txt").write_text("")  # no such pid
    (base / f"{child.pid}-1.txt").write_text("")  # the pid lives, but it is another process (start time)
    assert cooperative_agent.prune() == 2
    text, _ = cooperative_files.paths(child.pid)
    assert text.exists() and cooperative_agent.available(child.pid)  # the live worker's file stays


def test_a_worker_whose_sigusr2_is_taken_keeps_its_own_handler(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_STACKS_DIR", str(tmp_path))
    code = textwrap.dedent(
        """
        import signal, sys, time
        sys.path.insert(0, {repo!r})
        got = []
        signal.signal(signal.SIGUSR2, lambda s, f: got.append(s))  # the user's own
        from raydbg.gang import cooperative_worker
        print(cooperative_worker.install(), flush=True)
        sys.stdin.readline()  # the test has signalled
        time.sleep(0.2)
        print(len(got), signal.getsignal(signal.SIGUSR2).__name__, flush=True)
        """
    ).format(repo=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "RAYDBG_STACKS_DIR": str(tmp_path)})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "False"  # not installed: SIGUSR2 is the user's
        assert not cooperative_agent.available(proc.pid)  # so the agent never signals it
        os.kill(proc.pid, signal.SIGUSR2)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["1", "<lambda>"]  # the user's handler ran, still in place
        assert list(tmp_path.rglob("*.txt")) == []  # and no stack file was made for it
    finally:
        proc.kill()
        proc.wait()


def test_stacks_pyspy_off_asks_only_the_handler(child: subprocess.Popen[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """RAYDBG_STACKS_PYSPY=0 on the agent: py-spy is never run, not even tried."""
    ran = tmp_path / "py-spy-ran"
    stand_in = tmp_path / "py-spy"
    stand_in.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")  # records that it was run
    stand_in.chmod(0o755)
    monkeypatch.setenv("RAYDBG_PYSPY", str(stand_in))
    monkeypatch.setattr(worker_labels, "node_workers",  # the identity Ray's tables would give
                        lambda *a: [{"pid": child.pid, "task_name": "main_work", "paused_threads": []}])
    monkeypatch.setenv("RAYDBG_STACKS_PYSPY", "0")
    (w,) = asyncio.run(node.node_stacks("n1", "127.0.0.1"))
    assert (w["source"], "pyspy_error" in w, ran.exists()) == ("cooperative", False, False)
    assert "main_work" in functions(w["threads"])
    monkeypatch.setenv("RAYDBG_STACKS_PYSPY", "1")  # on: tried first (and fails here)
    (w,) = asyncio.run(node.node_stacks("n1", "127.0.0.1"))
    assert (w["source"], "pyspy_error" in w, ran.exists()) == ("cooperative", True, True)


def test_a_run_filter_keeps_ranks_their_snapshot_names_and_spares_the_rest_py_spy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--run r`: a rank labelled by its progress record, one only its snapshot names (it never
    reported), a worker of another run (left out before any dump), one raydbg is not in."""
    ids = [{"pid": 1, "task_name": "t", "train_run": "r", "world_rank": 0},
           {"pid": 2, "task_name": "t"}, {"pid": 3, "task_name": "t", "train_run": "other"},
           {"pid": 4, "task_name": "t"}]
    monkeypatch.setattr(worker_labels, "node_workers", lambda *a: [dict(w) for w in ids])
    monkeypatch.setattr(cooperative_agent, "listening", lambda pid: pid in (1, 2, 3))
    asked: list[int] = []

    async def ask_snapshot(pid: int, timeout: float = 2.0, base: Any = None) -> dict[str, Any]:
        asked.append(pid)
        train = {"train_run": "r", "world_rank": 1, "local_rank": 1, "world_size": 2} if pid == 2 else None
        return {"threads": [{"name": "MainThread", "frames": []}], "train": train}

    dumped: list[int] = []

    async def dump(pid: int, native: bool, timeout: float) -> list[dict[str, Any]]:
        dumped.append(pid)
        raise pyspy.StackError("no ptrace here")

    monkeypatch.setattr(cooperative_agent, "ask_snapshot", ask_snapshot)
    monkeypatch.setattr(pyspy, "dump", dump)
    monkeypatch.setenv("RAYDBG_STACKS_PYSPY", "1")
    out = asyncio.run(node.node_stacks("n1", "127.0.0.1", run="r"))
    assert [(w["pid"], w["world_rank"]) for w in out] == [(1, 0), (2, 1)]
    assert sorted(asked) == [1, 2]  # never the other run's (nor pid 4: no stacks thread)
    assert dumped == []  # pid 4 (no stacks thread, no label) is not worth a py-spy under --run
