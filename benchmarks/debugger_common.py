"""The debugger benchmark's common part: its constants, the handle on a driver subprocess,
CPU-time and ratio helpers, and the state every part of a run adds its samples to."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import REPO  # benchmarks/, this script's directory
from paired_stats import paired_ci
from proc_cpu import cpu_ns

DRIVER = Path(__file__).resolve().with_name("debugger_driver.py")  # a driver subprocess's script
ENV_CONTROL = "plainenv"  # --env-control's driver (see there)
PROTO = "@@raydbg-bench "  # prefix of the drivers' protocol lines on stdout
POLL_S = 0.005
# The CPU loops (~100 ms each untraced on a 2-core EPYC VM): "calls" is function-call heavy
# (recursive fib: a tracer runs on every call), "loop" is one frame of arithmetic.
LOOPS = {"calls": {"n": 24, "reps": 16}, "loop": {"n": 1_500_000, "reps": 1}}
TARGETS = {"throughput_ratio": 0.98, "cpu_ratio": 0.95, "pause_ms": 100.0, "attach_ms": 300.0}


def cpu_seconds(pids: set[int]) -> float:
    """CPU seconds of these processes (schedstat: ns, where psutil counts 10 ms ticks)."""
    return sum(cpu_ns(pid) for pid in pids) / 1e9


def tree_cpu() -> dict[int, float]:
    """CPU seconds of every process under this one: Ray's daemons (GCS, raylet,
    dashboard, agents), both jobs' workers and drivers, raydbg's agent."""
    import psutil

    ns = {proc.pid: cpu_ns(proc.pid) for proc in psutil.Process().children(recursive=True)}
    return {pid: t / 1e9 for pid, t in ns.items() if t}  # 0: gone since it was listed


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


class BenchError(Exception):
    pass


class Driver:
    """The parent's handle on a driver subprocess."""

    def __init__(self, name: str, kind: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.kind = kind
        self.env = env
        self.log = log_dir / f"driver-{name}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, timeout: float = 180) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(DRIVER), self.kind,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=self.log.open("wb"), env=self.env, cwd=str(REPO),
        )
        await self._read(timeout)

    async def call(self, op: str, timeout: float = 120, **kw: Any) -> Any:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, "timeout": timeout, **kw}) + "\n").encode())
        await self.proc.stdin.drain()
        return await self._read(timeout + 10)

    async def _read(self, timeout: float) -> Any:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"driver {self.name}: no answer within {timeout:.0f}s (log: {self.log})")
            try:
                line = (await asyncio.wait_for(self.proc.stdout.readline(), left)).decode()
            except asyncio.TimeoutError:
                continue
            if not line:
                raise BenchError(f"driver {self.name} exited: {tail(self.log)}")
            if line.startswith(PROTO):
                msg = json.loads(line[len(PROTO):])
                if not msg["ok"]:
                    raise BenchError(f"driver {self.name}: {msg['error']}")
                return msg["result"]

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"op": "quit"}\n')
            await self.proc.stdin.drain()
            await asyncio.wait_for(self.proc.wait(), 20)
        except (Exception, asyncio.TimeoutError):
            await end_process(self.proc)


async def end_process(proc: asyncio.subprocess.Process) -> None:
    """Terminate a subprocess this script started (by its pid), then kill it if it lingers."""
    if proc.returncode is not None:
        return
    try:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
    except ProcessLookupError:
        pass
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def ratio(med: dict[str, float], num: str, den: str) -> float:
    if num not in med or den not in med or not med[den]:
        return float("nan")
    return med[num] / med[den]


def ci_of(key: str, num: list[float], den: list[float]) -> dict[str, float]:
    lo, hi = paired_ci(num, den)
    return {f"{key}.ci_lo": lo, f"{key}.ci_hi": hi}


def machine(load_before: tuple[float, ...]) -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()]}


class BenchState:
    """What one run keeps, shared by its parts (debugger_throughput, debugger_sessions,
    debugger_attach): the arguments, the cluster's addresses, the drivers, the samples."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="rdbg-bench-", dir="/tmp"))
        self.samples: dict[str, list[float]] = {}
        self.notes: list[str] = []
        self.adapter_pids: set[int] = set()
        self.gateway: Any = None
        self.gateway_address = ""
        self.dashboard = ""
        self.token = ""
        self.gcs = ""
        self.drivers: dict[str, Driver] = {}
        self.progress: Any = None
        self.task: Any = None
        self._seen: dict[str, float] = {}
        self._detached = 0.0
        self.phases: dict[str, float] = {}
        self._phase_start = time.monotonic()

    def phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(now - self._phase_start, 1)
        self._phase_start = now

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(value)

    def step(self, what: str, advance: int = 0) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=what, advance=advance)

    # -- the drivers -----------------------------------------------------------------------
    def driver_env(self, kind: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ, RAY_ADDRESS=self.gcs, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        if kind == "raydbg":
            env.update(RAY_DEBUG="1", RAYDBG_WAIT_TIMEOUT=str(self.args.wait_timeout))
            env["RAYDBG_MEMORY_BUDGETS"] = "1" if self.args.memory_budgets else "0"
        else:
            env.update(RAY_DEBUG="1", RAYDBG_DISABLE="1")
        env.update(extra or {})
        return env

    def extra_drivers(self) -> list[tuple[str, str]]:
        """(name, kind) of the throughput rounds' drivers beyond raydbg, plain and control:
        --env-control's and the variants (raydbg with other settings)."""
        env = [(ENV_CONTROL, ENV_CONTROL)] if self.args.env_control else []
        return env + [(v, "raydbg") for v in self.args.variant]

    async def start_drivers(self, epoch: int = 0) -> None:
        names = [("raydbg", "raydbg"), ("plain", "plain")]
        if self.args.control and not self.args.skip_throughput:
            names.append(("control", "plain"))  # a second plain driver: the A/A noise floor
        if not self.args.skip_throughput:
            names += self.extra_drivers()
        names = names[epoch % len(names):] + names[:epoch % len(names)]  # who starts first rotates
        self.drivers = {n: Driver(n, k, self.driver_env(k, self.args.variant.get(n)), self.tmp) for n, k in names}
        await asyncio.gather(*(d.start() for d in self.drivers.values()))

    async def stop_drivers(self) -> None:
        for drv in self.drivers.values():
            await drv.stop()
        self.drivers = {}
