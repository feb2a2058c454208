"""Measurement on fake cgroup v1/v2 and /proc trees, plus this machine's real files."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from raydbg.memory.gpu import GpuReader
from raydbg.memory.kernel_files import Roots
from raydbg.memory.node_memory import UNLIMITED, NodeMeasurer, parse_proc_cgroup, parse_psi
from raydbg.memory.process_memory import read_proc, scan
from raydbg.proc_identity import ProcStat, parse_stat

GiB = 1 << 30
MiB = 1 << 20


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def meminfo(total: int, avail: int) -> str:
    return f"MemTotal: {total // 1024} kB\nMemFree: 1 kB\nMemAvailable: {avail // 1024} kB\n"


def make_tree(
    tmp: Path,
    *,
    v1: str | None = None,
    v2: str | None = None,
    mount_root: str = "/",
    total: int = 32 * GiB,
    avail: int = 30 * GiB,
) -> tuple[Roots, Path]:
    """A fake /proc with mountinfo + self/cgroup; returns (roots, cgroup mount point)."""
    proc, sysfs = tmp / "proc", tmp / "sys"
    write(proc / "meminfo", meminfo(total, avail))
    lines = ["9:name=systemd:/"]
    mounts = [f"31 23 0:28 / {sysfs} rw,relatime - tmpfs tmpfs rw,mode=755"]
    point = sysfs
    if v1 is not None:
        lines.append(f"4:memory:{v1}")
        point = sysfs / "memory"
        mounts.append(f"35 31 0:32 {mount_root} {point} rw - cgroup cgroup rw,memory")
    if v2 is not None:
        lines.append(f"0::{v2}")
        mounts.append(f"41 31 0:38 {mount_root} {sysfs} rw - cgroup2 cgroup2 rw")
    write(proc / "self" / "cgroup", "\n".join(lines) + "\n")
    write(proc / "self" / "mountinfo", "\n".join(mounts) + "\n")
    point.mkdir(parents=True, exist_ok=True)
    return Roots(proc=proc, sys_cgroup=sysfs), point


def v1_dir(
    d: Path, usage: int, limit: int, inactive: int, active: int, hier: int | None = None
) -> None:
    write(d / "memory.usage_in_bytes", f"{usage}\n")
    write(d / "memory.limit_in_bytes", f"{limit}\n")
    stat = (
        f"cache {inactive + active}\ntotal_inactive_file {inactive}\ntotal_active_file {active}\n"
    )
    stat += f"inactive_file 1\nactive_file 1\nhierarchical_memory_limit {hier if hier is not None else limit}\n"
    write(d / "memory.stat", stat)
    write(d / "cgroup.procs", "")


def v2_dir(d: Path, current: int, mx: str, inactive: int, active: int) -> None:
    write(d / "memory.current", f"{current}\n")
    write(d / "memory.max", f"{mx}\n")
    write(
        d / "memory.stat",
        f"anon 5\nfile {inactive + active}\ninactive_file {inactive}\nactive_file {active}\n",
    )


def test_parsers() -> None:
    assert parse_proc_cgroup("4:memory:/a/b\n0::/c\n3:cpu,cpuacct:/x\n") == ("/a/b", "/c")
    assert parse_proc_cgroup("0::/only\n") == (None, "/only")
    assert parse_proc_cgroup("garbage\n") == (None, None)
    psi = parse_psi(
        "some avg10=1.50 avg60=0.20 avg300=0.00 total=9\nfull avg10=0.30 avg60=0 avg300=0 total=1\n"
    )
    assert psi["some_avg10"] == 1.5 and psi["full_avg10"] == 0.3 and "some_total" not in psi
    assert parse_stat("123 (a (weird) name) S 77 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 4242 0 0") == ProcStat(
        "a (weird) name", "S", 77, 4242)


def test_v1_child_cgroup_limit_and_reclaimable(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v1="/jobs/node1")
    v1_dir(point, usage=10 * GiB, limit=UNLIMITED * 8, inactive=0, active=0)
    v1_dir(
        point / "jobs" / "node1", usage=3 * GiB, limit=4 * GiB, inactive=512 * MiB, active=256 * MiB
    )
    m = NodeMeasurer(roots)
    assert m.cgroup_kind == "cgroup1" and m.cgroup_dir == point / "jobs" / "node1"
    n = m.read()
    assert (n.source, n.limit, n.used) == ("cgroup1", 4 * GiB, 3 * GiB - 768 * MiB)
    assert 0.55 < n.fraction < 0.57
    assert {v.source for v in n.views} == {"cgroup1", "meminfo"}


def test_v1_ancestor_limit_via_hierarchical(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v1="/a/b")
    v1_dir(
        point / "a" / "b", usage=1 * GiB, limit=UNLIMITED * 8, inactive=0, active=0, hier=2 * GiB
    )
    n = NodeMeasurer(roots).read()
    assert (n.source, n.limit) == ("cgroup1", 2 * GiB)


def test_v1_container_view_falls_back_to_mount_root(tmp_path: Path) -> None:
    # Docker: /proc/self/cgroup names /docker/abc, but the mount shows only that cgroup.
    roots, point = make_tree(tmp_path, v1="/docker/abc")
    v1_dir(point, usage=3 * GiB, limit=4 * GiB, inactive=0, active=0)
    m = NodeMeasurer(roots)
    assert m.cgroup_dir == point
    assert m.read().limit == 4 * GiB


def test_v1_mount_root_is_stripped(tmp_path: Path) -> None:
    # mountinfo says the mount shows /kube/pod; our cgroup is /kube/pod/ctr below it.
    roots, point = make_tree(tmp_path, v1="/kube/pod/ctr", mount_root="/kube/pod")
    v1_dir(point, usage=1 * GiB, limit=8 * GiB, inactive=0, active=0)
    v1_dir(point / "ctr", usage=1 * GiB, limit=3 * GiB, inactive=0, active=0)
    m = NodeMeasurer(roots)
    assert m.cgroup_dir == point / "ctr" and m.read().limit == 3 * GiB


def test_v2_max_and_ancestor_limits(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v2="/user/job")
    v2_dir(point, 9 * GiB, "max", 0, 0)
    v2_dir(point / "user", 9 * GiB, str(6 * GiB), 0, 0)
    v2_dir(point / "user" / "job", 5 * GiB, "max", GiB, GiB // 2)
    n = NodeMeasurer(roots).read()
    assert (n.source, n.limit, n.used) == ("cgroup2", 6 * GiB, 5 * GiB - GiB - GiB // 2)


def test_v2_unlimited_uses_meminfo(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v2="/", total=16 * GiB, avail=4 * GiB)
    v2_dir(point, 2 * GiB, "max", 0, 0)
    n = NodeMeasurer(roots).read()
    assert (n.source, n.limit, n.used) == ("meminfo", 16 * GiB, 12 * GiB)


def test_limit_above_physical_memory_uses_machine(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v1="/big", total=8 * GiB, avail=1 * GiB)
    v1_dir(point / "big", usage=2 * GiB, limit=64 * GiB, inactive=0, active=0)
    n = NodeMeasurer(roots).read()
    # 64 GiB limit can never be reached; the machine (7 GiB used of 8) binds first.
    assert (n.source, n.limit, n.used) == ("meminfo", 8 * GiB, 7 * GiB)


def test_missing_cgroup_files_fall_back_to_meminfo(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v1="/gone", total=4 * GiB, avail=3 * GiB)
    m = NodeMeasurer(roots)
    assert m.cgroup_dir is None
    n = m.read()
    assert (n.source, n.limit, n.used) == ("meminfo", 4 * GiB, 1 * GiB)


def test_no_mountinfo_uses_default_layout(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v1="/x")
    (roots.proc / "self" / "mountinfo").unlink()
    v1_dir(point / "x", usage=GiB, limit=2 * GiB, inactive=0, active=0)
    assert NodeMeasurer(roots).read().limit == 2 * GiB


def test_nothing_readable_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        NodeMeasurer(Roots(proc=tmp_path / "p", sys_cgroup=tmp_path / "s")).read()


def test_explicit_cgroup_dir_and_pids_include_children(tmp_path: Path) -> None:
    d = tmp_path / "node"
    v1_dir(d, usage=GiB, limit=2 * GiB, inactive=0, active=0)
    write(d / "cgroup.procs", "10\n11\n")
    v1_dir(d / "child", usage=0, limit=2 * GiB, inactive=0, active=0)
    write(d / "child" / "cgroup.procs", "12\n")
    write(tmp_path / "proc" / "meminfo", meminfo(32 * GiB, 31 * GiB))
    m = NodeMeasurer(Roots(proc=tmp_path / "proc"), cgroup_dir=d)
    assert m.read().limit == 2 * GiB and m.pids() == [10, 11, 12]


def test_psi_read_when_present(tmp_path: Path) -> None:
    roots, point = make_tree(tmp_path, v1="/x")
    write(roots.proc / "pressure" / "memory", "some avg10=4.00 avg60=1 avg300=0 total=5\n")
    assert NodeMeasurer(roots).read().psi["some_avg10"] == 4.0
    assert NodeMeasurer(roots, psi=False).read().psi == {}


def _proc(root: Path, pid: int, start_ticks: int, rollup: str | None, status: str | None) -> None:
    base = root / str(pid)
    write(
        base / "stat",
        f"{pid} (worker x) S 1 {pid} 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 0\n",
    )
    write(base / "statm", "100 50 20 0 0 0 0\n")
    write(base / "oom_score_adj", "1000\n")
    if rollup is not None:
        write(base / "smaps_rollup", rollup)
    if status is not None:
        write(base / "status", status)


def test_proc_fast_detailed_and_fallback(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write(proc / "stat", "cpu 1 2 3\nbtime 1000\n")
    rollup = (
        "Rss: 3000 kB\nPss: 2000 kB\nPrivate_Clean: 100 kB\nPrivate_Dirty: 1900 kB\nSwap: 7 kB\n"
    )
    status = "Name:\tx\nVmRSS:\t3000 kB\nRssAnon:\t1800 kB\nRssFile:\t1200 kB\nVmSwap:\t7 kB\n"
    _proc(proc, 5, 300, rollup, status)
    _proc(proc, 6, 600, None, None)
    roots = Roots(proc=proc)
    known: dict[int, tuple[str, int, float, int]] = {}
    got = scan([5, 6, 7], roots, known=known)
    assert set(got) == {5, 6} and set(known) == {5, 6}  # 7 does not exist
    a, b = got[5], got[6]
    hz = os.sysconf("SC_CLK_TCK")
    assert (a.source, a.memory, a.rss, a.swap) == ("status", 1800 * 1024, 3000 * 1024, 7 * 1024)
    assert a.name == "worker x" and a.start_time == pytest.approx(1000 + 300 / hz)
    page = os.sysconf("SC_PAGE_SIZE")
    assert (b.source, b.rss, b.memory) == ("statm", 50 * page, 30 * page)
    assert b.start_time > a.start_time
    d = read_proc(5, roots, detailed=True)
    assert d is not None and (d.source, d.uss, d.pss) == ("smaps_rollup", 2000 * 1024, 2000 * 1024)
    assert d.oom_score_adj == 1000
    # Identity is cached across scans; vanished pids leave the cache.
    (proc / "5" / "stat").unlink()
    assert 5 in scan([5], roots, known=known) and set(known) == {5}
    assert read_proc(99, roots) is None


class FakeNvml:
    def __init__(self, count: int = 1, fail_init: bool = False) -> None:
        self.count, self.fail_init = count, fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=(h + 1) * GiB, total=80 * GiB)

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"H200"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=42, usedGpuMemory=GiB),
            SimpleNamespace(pid=43, usedGpuMemory=None),
        ]


def test_gpu_fake_devices_and_per_pid() -> None:
    g = GpuReader(FakeNvml(count=2)).read()
    assert g is not None
    assert [d.used for d in g.devices] == [GiB, 2 * GiB] and g.devices[0].name == "H200"
    assert g.per_pid == {42: 2 * GiB}  # summed over both devices; 43 has no accounting


def test_gpu_absent() -> None:
    assert GpuReader(FakeNvml(fail_init=True)).read() is None
    assert GpuReader(FakeNvml(count=0)).read() is None


def test_real_machine() -> None:
    m = NodeMeasurer()
    n = m.read()
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024
    assert 0 < n.used <= n.limit <= total
    assert any(v.source == "meminfo" for v in n.views)
    if Path("/sys/fs/cgroup/memory").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").exists():
        assert m.cgroup_dir is not None and m.cgroup_dir.is_dir()
        assert os.getpid() in m.pids()
    for detailed in (False, True):
        me = read_proc(os.getpid(), detailed=detailed)
        assert me is not None and me.memory > 1 * MiB and me.rss >= me.uss
        # Our own process must show up after touching ~64 MiB privately.
        blob = bytearray(b"x") * (64 * MiB)
        after = read_proc(os.getpid(), detailed=detailed)
        assert after is not None and after.uss >= me.uss + 60 * MiB, detailed
        del blob
