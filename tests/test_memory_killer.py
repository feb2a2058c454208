"""The monitor's kill checks identity at the moment of the kill: start time, uid, raylet parent (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from raydbg.memory.killer import Killer, KillRefused, ProcIdentity, identity
from raydbg.memory.process_memory import read_proc

NOBODY = 65534
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and pidfd are Linux-only")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def start(
    procs: list[subprocess.Popen[bytes]], cmd: list[str] = SLEEP, **kw: object
) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(cmd, **kw)  # type: ignore[call-overload]
    procs.append(p)
    deadline = time.monotonic() + 5
    # Wait for exec: until then the child still runs as us in the parent's image.
    while time.monotonic() < deadline and Path(f"/proc/{p.pid}/cmdline").read_bytes()[:1] == b"":
        time.sleep(0.01)
    return p


def me() -> ProcIdentity:
    ident = identity(os.getpid())
    assert ident is not None
    return ident


def test_identity_reads_start_ticks_ppid_and_uids_as_the_snapshot_does(children: list) -> None:
    p = start(children)
    ident = identity(p.pid)
    snap = read_proc(p.pid)
    assert ident is not None and snap is not None
    assert ident.ppid == os.getpid() and ident.uids[:2] == (os.getuid(), os.getuid())
    assert ident.start_ticks == snap.start_ticks > 0
    assert identity(2**22 + 12345) is None  # no such pid


def test_a_worker_of_our_raylet_still_the_chosen_process_is_killed(children: list) -> None:
    p = start(children)
    ticks = identity(p.pid).start_ticks  # type: ignore[union-attr]
    said: list[int] = []
    Killer(me()).kill(p.pid, ticks, before=lambda: said.append(p.pid))
    assert p.wait(5) == -signal.SIGKILL and said == [p.pid]


def test_a_pid_now_naming_another_process_is_not_killed(children: list) -> None:
    # Decision on process A; A exits; by the kill the pid names B. Pid reuse cannot be
    # forced here, so B is a real live process whose start time differs from the one the
    # snapshot recorded (what a reused pid looks like at the moment of the kill).
    a = start(children)
    a_ticks = identity(a.pid).start_ticks  # type: ignore[union-attr]
    a.kill()
    a.wait()
    with pytest.raises(ProcessLookupError):
        Killer(me()).kill(a.pid, a_ticks)  # A itself is gone: nothing to signal
    b = start(children)
    b_ticks = identity(b.pid).start_ticks  # type: ignore[union-attr]
    with pytest.raises(KillRefused, match="pid was reused"):
        Killer(me()).kill(b.pid, b_ticks - 1)
    with pytest.raises(KillRefused, match="no start time"):
        Killer(me()).kill(b.pid, None)
    time.sleep(0.2)
    assert b.poll() is None  # B lives on


def test_a_process_of_another_uid_is_not_killed(children: list) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to start a process as nobody")
    p = start(children, ["sleep", "60"], user=NOBODY)  # nobody cannot run the venv's python
    ident = identity(p.pid)
    assert ident is not None and ident.uids[0] == NOBODY and ident.ppid == os.getpid()
    with pytest.raises(KillRefused, match=f"uid \\({NOBODY}, {NOBODY}\\), not 0"):
        Killer(me()).kill(p.pid, ident.start_ticks)
    time.sleep(0.2)
    assert p.poll() is None


def test_a_process_that_is_not_a_child_of_the_raylet_is_not_killed(children: list) -> None:
    raylet = start(children)  # stands in for our raylet: the victim is not its child
    victim = start(children)
    ticks = identity(victim.pid).start_ticks  # type: ignore[union-attr]
    killer = Killer.for_raylet(raylet.pid)
    with pytest.raises(KillRefused, match="not a worker of this raylet"):
        killer.kill(victim.pid, ticks)
    time.sleep(0.2)
    assert victim.poll() is None


def test_a_replaced_raylet_is_noticed(children: list) -> None:
    p = start(children)
    ticks = identity(p.pid).start_ticks  # type: ignore[union-attr]
    real = me()
    other = ProcIdentity(real.pid, real.ppid, real.start_ticks + 1, real.uids)  # pid reused
    with pytest.raises(KillRefused, match="gone or replaced"):
        Killer(other).kill(p.pid, ticks)
    assert p.poll() is None
    with pytest.raises(KillRefused, match="is gone"):
        Killer.for_raylet(2**22 + 12345)


def test_the_raylet_is_found_by_its_node_id_among_several(tmp_path: Path) -> None:
    from raydbg.memory.killer import find_raylet, is_raylet_of

    def fake(pid: int, comm: str, args: list[str]) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")

    fake(10, "raylet", ["/x/raylet", "--node_id=aaaa", "--port=1"])
    fake(11, "raylet", ["/x/raylet", "--node_id=bbbb"])
    fake(12, "python", ["python", "--node_id=bbbb"])  # says the words, is not a raylet
    fake(13, "raylet", ["/x/raylet", "--node_id=bbbbcc"])  # a prefix is not the id
    assert find_raylet("bbbb", proc=tmp_path) == 11
    assert find_raylet("aaaa", prefer=11, proc=tmp_path) == 10  # the watched pid is another node's
    assert find_raylet("aaaa", prefer=10, proc=tmp_path) == 10
    assert find_raylet("cccc", proc=tmp_path) is None and find_raylet("", proc=tmp_path) is None
    assert not is_raylet_of(12, "bbbb", tmp_path) and not is_raylet_of(99, "bbbb", tmp_path)


def test_the_monitor_is_offered_only_processes_its_killer_would_kill(children: list) -> None:
    from raydbg.memory.killer import Killable
    from raydbg.memory.policy import Candidate

    mine, other = start(children), start(children)
    snap = {p.pid: read_proc(p.pid) for p in (mine, other)}
    assert all(snap.values())
    # `other` stands for a process of another parent: the snapshot says who its parent is.
    procs = {mine.pid: snap[mine.pid], other.pid: replace(snap[other.pid], ppid=1)}  # type: ignore[type-var]

    class Who:
        def candidates(self, procs: dict, growth: dict) -> list[Candidate]:
            return [Candidate(pid, 1 << 30) for pid in procs]

    killer = Killer(me())
    who = Killable(Who(), killer)
    assert [c.pid for c in who.candidates(procs, {})] == [mine.pid]
    # The snapshot was of an earlier process with this pid (it shows another start time).
    stale = {mine.pid: replace(procs[mine.pid], start_ticks=procs[mine.pid].start_ticks - 1)}  # type: ignore[type-var, union-attr]
    with pytest.raises(KillRefused):
        killer.kill(mine.pid, stale[mine.pid].start_ticks)
    assert who.candidates(stale, {}) == []  # refused once: not chosen again every round
    assert mine.poll() is None and other.poll() is None


FREEZER = Path("/sys/fs/cgroup/freezer")
ALLOCATE = [sys.executable, "-c", "b = bytearray(200 << 20); b[::4096] = b'\\1' * len(range(0, 200 << 20, 4096)); "
            "print(flush=True); import time; time.sleep(60)"]


def _rss_kib(pid: int) -> int:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmRSS:"))
    return int(line.split()[1])


@pytest.mark.skipif(not os.access(FREEZER, os.W_OK), reason="needs a writable v1 freezer cgroup (root)")
def test_a_killed_worker_that_cannot_run_its_exit_gives_its_memory_back_at_once(children: list) -> None:
    """A victim that gets no CPU (frozen here; a nice-15 worker on a busy node in the field)
    holds its memory until it exits, unless the killer releases it."""
    p = start(children, ALLOCATE, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"\n"  # its 200 MiB are touched
    frozen = FREEZER / f"raydbg-test-{os.getpid()}"
    frozen.mkdir()
    try:
        (frozen / "cgroup.procs").write_text(str(p.pid))
        (frozen / "freezer.state").write_text("FROZEN")
        while (frozen / "freezer.state").read_text().strip() != "FROZEN":
            time.sleep(0.01)
        assert _rss_kib(p.pid) > 150 << 10
        Killer(me()).kill(p.pid, identity(p.pid).start_ticks)  # type: ignore[union-attr]
        assert p.poll() is None and _rss_kib(p.pid) < 10 << 10  # still there, its memory gone
    finally:
        (frozen / "freezer.state").write_text("THAWED")
        assert p.wait(5) == -signal.SIGKILL
        frozen.rmdir()
