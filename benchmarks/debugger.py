"""Debugger cost and latency: raydbg vs Ray's built-in debugger, side by side in one run.

    python benchmarks/debugger.py [--quick] [--rounds N] [--throughput-rounds N] [--out PATH] [--markdown]

Starts its own local Ray cluster (ray.init in this process, in a fresh temp dir, token
auth off; ended with ray.shutdown(): nothing else on the machine is touched), raydbg's
agents, and two driver subprocesses connected to it: "raydbg" (RAY_DEBUG=1 and
raydbg.runtime_env(): raydbg owns breakpoint()) and "plain" (RAYDBG_DISABLE=1: plain
Ray, whose breakpoint() is Ray's built-in debugger, ray.util.rpdb -> ray.util.debugpy).
Rounds alternate between the two (ABBA) so drift and neighbours hit both alike; figures
are medians, ratios are ratios of medians. Results: a table, and JSON (--out).

1. throughput: 2,000 no-op tasks from each driver, wall clock (target raydbg/plain
   >= 0.98), and CPU time per task of the driver and the job's workers (hardly moved by
   the neighbours on a shared machine). --env-control adds plain Ray with a job-level
   runtime_env (env_vars only): raydbg's job has one, and Ray's runtime_env alone costs
   a no-op task about what raydbg costs in all (measured 2026-12-04; ray-project/ray#48591).
2. CPU speed after a debug session: an actor pauses twice, is attached to, continued
   and detached; then two CPU loops run in it and in a never-debugged actor of the same
   job, alternately: "calls" (recursive fib; a tracer runs on every call) and "loop"
   (arithmetic in one frame). Target for raydbg: >= 0.95 of the never-debugged speed.
   Speed is 1 / the loop thread's CPU time (time.thread_time: the time the neighbours
   take is not counted; wall-clock ratios are in the JSON too).
   Also: how long after the detach sys.gettrace() is None again in that worker.
3. pause latency: the actor takes time.time() right before breakpoint(); raydbg: the
   first answer of the gateway's session list (the API `raydbg list` uses, through
   raydbg.client.Gateway, polled every 5 ms) that shows the session ("listed", target
   median <= 100 ms), and the first that shows it attachable; built-in: the first
   state-API answer (list_workers(detail=True)) with num_paused_threads > 0. Cold = the
   first pause in a worker process, warm = the second in the same process. "Seen" is
   when that poll's answer arrived (an upper bound).
4. attach: TCP connect to `raydbg forward` (a real CLI subprocess, started beforehand)
   -> initialize, attach, configurationDone, stopped -> the first stackTrace response
   (target median <= 300 ms); built-in: the same straight to its debugpy port (no token).

RAYDBG_WAIT_TIMEOUT bounds every raydbg pause; every wait here has a deadline, and
Ray's built-in pauses (no timeout of their own) end when their actor is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paired_stats import paired as _paired  # benchmarks/, this script's directory
from paired_stats import paired_ci as _paired_ci
from proc_cpu import cpu_ns

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "debugger.json"
ENV_CONTROL = "plainenv"  # --env-control's driver (see there)
PROTO = "@@raydbg-bench "  # prefix of the drivers' protocol lines on stdout
POLL_S = 0.005
# The CPU loops (~100 ms each untraced on a 2-core EPYC VM): "calls" is function-call heavy
# (recursive fib: a tracer runs on every call), "loop" is one frame of arithmetic.
LOOPS = {"calls": {"n": 24, "reps": 16}, "loop": {"n": 1_500_000, "reps": 1}}
TARGETS = {"throughput_ratio": 0.98, "cpu_ratio": 0.95, "pause_ms": 100.0, "attach_ms": 300.0}


# --- code that runs in Ray workers (pickled by value from the drivers' __main__) ----------
def noop() -> int:
    return os.getpid()


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Probe:
    """One actor = one worker process, so a later call runs where the pause was."""

    def pid(self) -> int:
        return os.getpid()

    def pause(self) -> float:
        t0 = time.time()
        breakpoint()
        return t0

    def spin(self, loop: str, n: int, reps: int) -> dict[str, float]:
        """Run a CPU loop; its CPU time (this thread's) and wall time, in seconds."""
        c, t = time.thread_time(), time.perf_counter()
        for _ in range(reps):
            if loop == "calls":
                fib(n)
            else:
                total = 0
                for i in range(n):
                    total += i * i % 7
        return {"cpu": time.thread_time() - c, "wall": time.perf_counter() - t}

    def tracer(self) -> str:
        return repr(sys.gettrace())

    def debugger_state(self) -> dict[str, Any]:
        """Why raydbg's tracer would still be set here (a note when it is): its own flags."""
        import threading

        dbg = sys.modules.get("raydbg.worker.debugpy_control")
        if dbg is None:
            return {}
        return {"tracing": dbg._tracing, "client_attached": dbg.client_attached(),
                "paused_threads": len(dbg.paused_threads.current()), "threads": [t.name for t in threading.enumerate()]}


# --- driver subprocess: a Ray driver that runs commands read from stdin --------------------
def driver_main(kind: str) -> None:
    import ray

    runtime_env = None
    if kind == "raydbg":
        import raydbg

        runtime_env = raydbg.runtime_env()
    elif kind == ENV_CONTROL:  # plain Ray, but its job has a runtime_env, as raydbg's has
        runtime_env = {"env_vars": {"RAYDBG_BENCH_ENV_CONTROL": "1"}}
    ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env, logging_level=logging.ERROR,
             log_to_driver=False)
    remote_noop = ray.remote(noop)
    task_workers: set[int] = set()
    probe = ray.remote(num_cpus=0, max_restarts=0)(Probe)
    actors: dict[str, Any] = {}
    pending: dict[str, Any] = {}

    def reply(**msg: Any) -> None:
        sys.stdout.write(PROTO + json.dumps(msg) + "\n")
        sys.stdout.flush()

    def run(op: str, name: str = "", **kw: Any) -> Any:
        if op == "tasks":
            # Wall time, and CPU time (user + sys) of this driver and of the job's workers: the
            # CPU time per task hardly depends on what the neighbours do, wall time does.
            w0, d0, t = _cpu(task_workers), time.process_time(), time.perf_counter()
            pids = ray.get([remote_noop.remote() for _ in range(kw["n"])], timeout=kw["timeout"])
            wall, d1, w1 = time.perf_counter() - t, time.process_time(), _cpu(task_workers)
            known = set(pids) <= task_workers  # else a new worker's CPU time is missing
            task_workers.update(pids)
            return {"wall": wall, "driver_cpu": d1 - d0, "workers_cpu": (w1 - w0) if known else None}
        if op == "actor":  # one actor, one worker process
            actors[name] = probe.remote()
            return ray.get(actors[name].pid.remote(), timeout=kw["timeout"])
        if op == "pause":
            pending[name] = actors[name].pause.remote()
            return None
        if op == "join":
            return ray.get(pending.pop(name), timeout=kw["timeout"])
        if op == "spin":
            return ray.get(actors[name].spin.remote(kw["loop"], kw["n"], kw["reps"]), timeout=kw["timeout"])
        if op == "tracer":
            return ray.get(actors[name].tracer.remote(), timeout=kw["timeout"])
        if op == "debugger_state":
            return ray.get(actors[name].debugger_state.remote(), timeout=kw["timeout"])
        if op == "kill":
            pending.pop(name, None)
            handle = actors.pop(name, None)
            if handle is not None:
                ray.kill(handle, no_restart=True)
            return None
        raise ValueError(f"unknown op {op}")

    reply(ok=True, result=ray.get_runtime_context().get_job_id())
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            reply(ok=True, result=run(**cmd))
        except Exception as exc:  # reported to the parent, which fails the run with it
            reply(ok=False, error=f"{type(exc).__name__}: {exc}")
    ray.shutdown()


def _cpu(pids: set[int]) -> float:
    """CPU seconds of these processes (schedstat: ns, where psutil counts 10 ms ticks)."""
    return sum(cpu_ns(pid) for pid in pids) / 1e9


def _tree_cpu() -> dict[int, float]:
    """CPU seconds of every process under this one: Ray's daemons (GCS, raylet,
    dashboard, agents), both jobs' workers and drivers, raydbg's agent."""
    import psutil

    ns = {proc.pid: cpu_ns(proc.pid) for proc in psutil.Process().children(recursive=True)}
    return {pid: t / 1e9 for pid, t in ns.items() if t}  # 0: gone since it was listed


def _cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
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
            sys.executable, str(Path(__file__).resolve()), "--driver", self.kind,
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
                raise BenchError(f"driver {self.name} exited: {_tail(self.log)}")
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
            await _end(self.proc)


async def _end(proc: asyncio.subprocess.Process) -> None:
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


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# --- the parent: cluster, measurements, report -----------------------------------------------
class Bench:
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

    # -- set-up ----------------------------------------------------------------------------
    def start_cluster(self) -> None:
        import ray

        # The cluster must not inherit raydbg settings (the raydbg driver carries its own to
        # its workers): a clean environment for the raylet and every worker it starts.
        for key in list(os.environ):
            if key.startswith("RAYDBG_") or key in ("RAY_DEBUG", "RAY_DEBUG_POST_MORTEM", "RAY_ADDRESS"):
                os.environ.pop(key)
        if os.environ.get("RAY_RUNTIME_ENV_HOOK", "").startswith("raydbg."):
            os.environ.pop("RAY_RUNTIME_ENV_HOOK")
        os.environ["RAY_AUTH_MODE"] = "disabled"  # raydbg's own token, read from this cluster
        # Both drivers' workers stay alive between rounds (by default Ray keeps only num_cpus
        # idle workers, so each switch of driver would restart workers and time their start).
        ctx: Any = ray.init(num_cpus=self.args.cpus, _temp_dir=str(self.tmp), include_dashboard=True,
                       dashboard_port=_free_port(), logging_level=logging.ERROR, log_to_driver=False,
                       _system_config={"num_workers_soft_limit": 4 * self.args.cpus + 8})
        self.gcs = ctx.address_info["gcs_address"]
        self.dashboard = "http://" + str(ctx.dashboard_url)

    def start_agents(self) -> None:
        from raydbg import registry
        from raydbg.agent_host import lifecycle
        from raydbg.client import Gateway

        lifecycle.up()
        self.gateway_address = str(registry.get(registry.GATEWAY)["address"])  # type: ignore[index]
        self.token = (registry.get_bytes(registry.TOKEN) or b"").decode()
        self.gateway = Gateway(self.gateway_address, self.token)

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

    # -- 1. throughput ------------------------------------------------------------------------
    async def throughput(self) -> None:
        """Epochs of rounds; each epoch has new drivers (new jobs, new workers): one driver
        instance can be steadily faster than an identical one, so no kind keeps one."""
        n, epochs = self.args.tasks, self.args.epochs
        done = 0
        for epoch in range(epochs):
            if epoch > 0:
                self.step(f"throughput: new drivers (epoch {epoch + 1}/{epochs})")
                await self.stop_drivers()
                await self.start_drivers(epoch)
            for kind, drv in self.drivers.items():
                self.step(f"throughput: warm-up ({kind})")
                for _ in range(self.args.warmup):
                    await drv.call("tasks", n=n, timeout=300)
                self.step(f"throughput: warm-up ({kind})", 1)
            # ABBA with two drivers; with the control, every order of the three in turn
            orders = list(itertools.permutations(sorted(self.drivers, reverse=True)))
            if len(self.drivers) > 3:  # variants: each driver first and last in turn (a Latin square)
                names = sorted(self.drivers, reverse=True)
                orders = [tuple(names[i:] + names[:i]) for i in range(len(names))]
                orders += [tuple(reversed(o)) for o in orders]
            if len(self.drivers) == 2:
                orders = [("raydbg", "plain"), ("plain", "raydbg")]
            rounds = self.args.throughput_rounds * (epoch + 1) // epochs - done
            for _ in range(rounds):
                order = orders[done % len(orders)]
                done += 1
                for kind in order:
                    self.step(f"throughput: round {done}, {kind}")
                    before = _tree_cpu()
                    got = await self.drivers[kind].call("tasks", n=n, timeout=300)
                    self.add(f"task_cpu_us.all.{kind}", _cpu_delta(before, _tree_cpu()) / n * 1e6)
                    self.add(f"throughput.{kind}", n / got["wall"])
                    self.add(f"task_cpu_us.driver.{kind}", got["driver_cpu"] / n * 1e6)
                    if got["workers_cpu"] is not None:
                        self.add(f"task_cpu_us.workers.{kind}", got["workers_cpu"] / n * 1e6)
                    self.step(f"throughput: round {done}, {kind}", 1)

    # -- 2-4. debug rounds ----------------------------------------------------------------------
    async def debug_round(self, kind: str) -> None:
        """One pausing actor (cold pause, warm pause, each attached to) and one never-debugged."""
        drv = self.drivers[kind]
        dbg = "raydbg" if kind == "raydbg" else "builtin"
        label = "raydbg" if kind == "raydbg" else "built-in"
        try:
            self.step(f"{label}: starting two actors")
            pid = await drv.call("actor", name="paused")
            await drv.call("actor", name="fresh")
            for phase in ("cold", "warm"):
                self.step(f"{label}: {phase} pause")
                await drv.call("pause", name="paused")
                if kind == "raydbg":
                    await self._raydbg_pause(pid, phase)
                else:
                    await self._builtin_pause(pid, phase)
                t0 = await drv.call("join", name="paused", timeout=60)
                for key, seen in self._seen.items():
                    self.add(f"{key}.{phase}", (seen - t0) * 1000)
            self.step(f"{label}: tracer after the session")
            await self._tracer_gone(drv, dbg)
            self.step(f"{label}: CPU loops")
            for loop, params in LOOPS.items():
                for name in ("paused", "fresh"):  # one unmeasured run each
                    await drv.call("spin", name=name, loop=loop, **params)
                for i in range(self.args.spins):
                    for name in (("paused", "fresh") if i % 2 == 0 else ("fresh", "paused")):
                        took = await drv.call("spin", name=name, loop=loop, **params)
                        self.add(f"spin.{loop}.{dbg}.{name}", took["cpu"])
                        self.add(f"spin_wall.{loop}.{dbg}.{name}", took["wall"])
        finally:
            for name in ("paused", "fresh"):
                try:
                    await drv.call("kill", name=name, timeout=30)
                except BenchError as exc:
                    self.notes.append(str(exc))

    async def _tracer_gone(self, drv: Driver, kind: str, limit: float = 2.0) -> None:
        """How long after the client's detach the worker runs without a tracer (sys.gettrace())."""
        while True:
            tracer = await drv.call("tracer", name="paused")
            waited = time.monotonic() - self._detached
            if tracer == "None" or waited > limit:
                break
            await asyncio.sleep(0.01)
        self.add(f"tracer_left.{kind}", float(tracer != "None"))
        if tracer == "None":
            self.add(f"tracer_gone_ms.{kind}", waited * 1000)
        elif kind == "raydbg":  # raydbg removes it once no client is attached: say why not
            state = await drv.call("debugger_state", name="paused")
            self.notes.append(f"raydbg's tracer still set {waited:.1f}s after the detach: {tracer}; "
                              f"worker {state}")

    async def _raydbg_pause(self, pid: int, phase: str) -> None:
        from raydbg.client import GatewayError

        listed = attachable = None
        sid = ""
        deadline = time.monotonic() + 60
        while attachable is None:
            if time.monotonic() > deadline:
                raise BenchError(f"raydbg: worker {pid}'s pause not listed attachable within 60s")
            asked = time.time()
            try:
                recs = await self.gateway.sessions()
            except GatewayError as exc:
                self.notes.append(f"gateway poll failed once: {exc}")
                recs = []
            now = time.time()
            self.add("poll_ms.raydbg", (now - asked) * 1000)
            for rec in recs:
                if rec.get("pid") == pid:
                    sid = rec["id"]
                    listed = listed or now
                    if rec.get("attachable"):
                        attachable = now
            if attachable is None:
                await asyncio.sleep(POLL_S)
        assert listed is not None
        self._seen = {"pause.raydbg.listed": listed, "pause.raydbg.attachable": attachable}
        self.step(f"raydbg: {phase} attach through `raydbg forward`")
        self.add(f"attach_ms.raydbg.{phase}", await self._attach_forward(sid) * 1000)

    async def _builtin_pause(self, pid: int, phase: str) -> None:
        from ray.util.state import list_workers

        def paused() -> Any:
            found = list_workers(address=self.dashboard, detail=True, filters=[("pid", "=", pid)],
                                 raise_on_missing_output=False)
            for w in found:
                if w.num_paused_threads and w.debugger_port:
                    return w
            return None

        deadline = time.monotonic() + 60
        while True:
            if time.monotonic() > deadline:
                raise BenchError(f"built-in: worker {pid} not shown paused within 60s")
            asked = time.time()
            w = await asyncio.to_thread(paused)
            self.add("poll_ms.builtin", (time.time() - asked) * 1000)
            if w is not None:
                seen = time.time()
                break
            await asyncio.sleep(POLL_S)
        self._seen = {"pause.builtin": seen}
        self._note_adapters(pid)
        self.step(f"built-in: {phase} attach (direct, no token)")
        self.add(f"attach_ms.builtin.{phase}", await self._attach(w.ip, int(w.debugger_port)) * 1000)

    def _note_adapters(self, pid: int) -> None:
        """The built-in's debugpy adapter processes (children of our workers), to end at exit."""
        try:
            import psutil

            self.adapter_pids.update(p.pid for p in psutil.Process(pid).children(recursive=True))
        except Exception:
            pass

    async def _attach_forward(self, sid: str) -> float:
        env = dict(os.environ, RAY_ADDRESS=self.gcs, RAYDBG_TOKEN=self.token)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "raydbg", "forward", sid, "--port", "0", "--address", self.gateway_address,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=str(REPO),
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            if "127.0.0.1:" not in line:
                err = (await proc.stderr.read()).decode() if proc.stderr else ""
                raise BenchError(f"raydbg forward did not start: {line!r} {err}")
            port = int(line.split("127.0.0.1:")[1].split()[0])
            return await self._attach("127.0.0.1", port)
        finally:
            await _end(proc)

    async def _attach(self, host: str, port: int) -> float:
        elapsed = await attach_and_time(host, port)
        self._detached = time.monotonic()
        return elapsed

    # -- whole run ----------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        a = self.args
        drivers = (3 if a.control else 2) + len(self.extra_drivers())
        total = 3 + (0 if a.skip_throughput else drivers * (a.epochs + a.throughput_rounds)) + (
            0 if a.skip_debug else 2 * a.rounds)
        started = time.time()
        load_before = os.getloadavg()
        console = Console(stderr=True)
        with Progress(TextColumn("[bold]{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=not console.is_terminal) as progress:
            self.progress, self.task = progress, progress.add_task("starting a local Ray cluster", total=total)
            try:
                self.start_cluster()
                self.step("starting raydbg's agents", 1)
                self.start_agents()
                self.step("starting the two drivers", 1)
                await self.start_drivers()
                self.phase("setup")
                self.step("throughput", 1)
                if not a.skip_throughput:
                    await self.throughput()
                self.phase("throughput")
                for r in range(0 if a.skip_debug else a.rounds):
                    for kind in (("raydbg", "plain") if r % 2 == 0 else ("plain", "raydbg")):
                        await self.debug_round(kind)
                        self.step("", 1)
                self.phase("debug")
            finally:
                self.step("shutting down")
                await self.shutdown()
                self.phase("shutdown")
        return self.result(started, load_before)

    async def shutdown(self) -> None:
        await self.stop_drivers()
        try:
            import psutil

            for pid in self.adapter_pids:
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
        except ImportError:
            pass
        import ray

        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def result(self, started: float, load_before: tuple[float, ...]) -> dict[str, Any]:
        import debugpy
        import ray

        s = dict(self.samples)
        for kind in ("raydbg", "builtin"):  # every attach, cold and warm together
            s[f"attach_ms.{kind}"] = s.get(f"attach_ms.{kind}.cold", []) + s.get(f"attach_ms.{kind}.warm", [])
        extras = [name for name, _ in self.extra_drivers()]
        for kind in ("raydbg", "plain", "control", *extras):
            drv, wrk = s.get(f"task_cpu_us.driver.{kind}", []), s.get(f"task_cpu_us.workers.{kind}", [])
            if drv and wrk:
                s[f"task_cpu_us.{kind}"] = [statistics.median(drv) + statistics.median(wrk)]
        med = {k: statistics.median(v) for k, v in s.items() if v}
        ratios = {
            "throughput": _ratio(med, "throughput.raydbg", "throughput.plain"),
            # each round's raydbg and plain runs are back to back: their ratio cancels slow drift
            "throughput.paired": _paired(s.get("throughput.raydbg", []), s.get("throughput.plain", [])),
            # the same for two identical plain drivers: how far from 1 noise alone moves it
            "throughput.control": _ratio(med, "throughput.control", "throughput.plain"),
            "throughput.control.paired": _paired(s.get("throughput.control", []), s.get("throughput.plain", [])),
            **_ci_of("throughput.paired", s.get("throughput.raydbg", []), s.get("throughput.plain", [])),
            **_ci_of("throughput.control.paired", s.get("throughput.control", []), s.get("throughput.plain", [])),
            "task_cpu": _ratio(med, "task_cpu_us.raydbg", "task_cpu_us.plain"),
            "task_cpu.all": _ratio(med, "task_cpu_us.all.raydbg", "task_cpu_us.all.plain"),
        }
        for loop in LOOPS:
            # speed in the worker that was debugged relative to a never-debugged one (1 = same)
            ratios[f"cpu.{loop}.raydbg"] = _ratio(med, f"spin.{loop}.raydbg.fresh", f"spin.{loop}.raydbg.paused")
            ratios[f"cpu.{loop}.builtin"] = _ratio(med, f"spin.{loop}.builtin.fresh", f"spin.{loop}.builtin.paused")
            for dbg in ("raydbg", "builtin"):
                ratios[f"cpu_wall.{loop}.{dbg}"] = _ratio(med, f"spin_wall.{loop}.{dbg}.fresh",
                                                          f"spin_wall.{loop}.{dbg}.paused")
            # never-debugged workers: raydbg's job vs plain Ray (different rounds: noisier)
            ratios[f"cpu.{loop}.idle"] = _ratio(med, f"spin.{loop}.builtin.fresh", f"spin.{loop}.raydbg.fresh")
        # the raydbg job with a part switched off, and plain Ray with a runtime_env, vs plain Ray
        for v in extras:
            ratios[f"throughput.{v}"] = _ratio(med, f"throughput.{v}", "throughput.plain")
            ratios[f"throughput.{v}.paired"] = _paired(s.get(f"throughput.{v}", []), s.get("throughput.plain", []))
            ratios.update(_ci_of(f"throughput.{v}.paired", s.get(f"throughput.{v}", []), s.get("throughput.plain", [])))
            ratios[f"task_cpu.{v}"] = _ratio(med, f"task_cpu_us.{v}", "task_cpu_us.plain")
        if self.args.env_control:  # raydbg against a job that has a runtime_env too
            raydbg, env = s.get("throughput.raydbg", []), s.get(f"throughput.{ENV_CONTROL}", [])
            ratios[f"throughput.vs_{ENV_CONTROL}"] = _ratio(med, "throughput.raydbg", f"throughput.{ENV_CONTROL}")
            ratios[f"throughput.vs_{ENV_CONTROL}.paired"] = _paired(raydbg, env)
            ratios.update(_ci_of(f"throughput.vs_{ENV_CONTROL}.paired", raydbg, env))
            ratios[f"task_cpu.vs_{ENV_CONTROL}"] = _ratio(med, "task_cpu_us.raydbg", f"task_cpu_us.{ENV_CONTROL}")
        ratios = {k: round(v, 4) for k, v in ratios.items()}
        # When two identical plain drivers differ at least as much, the gap is not raydbg's.
        control = ratios.get("throughput.control", float("nan"))
        within_noise = abs(1 - control) >= abs(1 - ratios["throughput"])
        checks = {
            "throughput": ratios["throughput"] >= TARGETS["throughput_ratio"],
            "throughput.within_aa_noise": within_noise,
            "cpu.calls": ratios["cpu.calls.raydbg"] >= TARGETS["cpu_ratio"],
            "cpu.loop": ratios["cpu.loop.raydbg"] >= TARGETS["cpu_ratio"],
            "pause.cold": med.get("pause.raydbg.listed.cold", 1e9) <= TARGETS["pause_ms"],
            "pause.warm": med.get("pause.raydbg.listed.warm", 1e9) <= TARGETS["pause_ms"],
            "attach": med.get("attach_ms.raydbg", 1e9) <= TARGETS["attach_ms"],
        }
        return {
            "benchmark": "debugger",
            "command": " ".join(["python", "benchmarks/debugger.py", *self.args.argv]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(started)),
            "duration_s": round(time.time() - started, 1),
            "phases_s": self.phases,
            "machine": _machine(load_before),
            "versions": {"python": platform.python_version(), "ray": ray.__version__,
                         "debugpy": debugpy.__version__},
            "config": {"tasks": self.args.tasks, "throughput_rounds": self.args.throughput_rounds,
                       "control": self.args.control, "epochs": self.args.epochs,
                       "warmup": self.args.warmup, "debug_rounds": self.args.rounds, "spins": self.args.spins,
                       "loops": LOOPS, "cpus": self.args.cpus, "poll_s": POLL_S,
                       "wait_timeout": self.args.wait_timeout, "variants": self.args.variant,
                       "env_control": self.args.env_control},
            "medians": med,
            "ratios": ratios,
            "targets": TARGETS,
            "checks": checks,
            "samples": s,
            "notes": self.notes,
        }


async def attach_and_time(host: str, port: int, timeout: float = 30) -> float:
    """Connect, attach, first stackTrace of the stopped thread (timed); then continue + detach."""
    from raydbg.dap.session import attach_session
    from raydbg.dap.transport import open_tcp

    t = time.perf_counter()
    reader, writer = await open_tcp(host, port, timeout)
    client, stopped = await attach_session(reader, writer, timeout=timeout)
    try:
        thread_id = stopped["body"]["threadId"]
        await client.stack_trace(thread_id, timeout=timeout)
        elapsed = time.perf_counter() - t
        await client.continue_(thread_id, timeout=timeout)
    finally:
        await client.disconnect()
    return elapsed


def _ratio(med: dict[str, float], num: str, den: str) -> float:
    if num not in med or den not in med or not med[den]:
        return float("nan")
    return med[num] / med[den]


def _ci_of(key: str, num: list[float], den: list[float]) -> dict[str, float]:
    lo, hi = _paired_ci(num, den)
    return {f"{key}.ci_lo": lo, f"{key}.ci_hi": hi}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _machine(load_before: tuple[float, ...]) -> dict[str, Any]:
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


# --- report -----------------------------------------------------------------------------------
def _f(med: dict[str, float], key: str, unit: str = " ms", digits: int = 0) -> str:
    return f"{med[key]:,.{digits}f}{unit}" if key in med else "-"


def rows(res: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(measure, raydbg, Ray built-in or plain Ray, target, met) rows of the report."""
    med, ratios, checks = res["medians"], res["ratios"], res["checks"]

    def met(name: str) -> str:
        return "yes" if checks.get(name) else "NO"

    def r(key: str) -> str:
        return f"{ratios[key]:.4f}" if ratios[key] == ratios[key] else "-"

    n = res["config"]["tasks"]
    builtin_never = "never" if med.get("tracer_left.builtin") == 1.0 else "-"
    return [
        (f"throughput, {n:,} no-op tasks", _f(med, "throughput.raydbg", " /s"),
         _f(med, "throughput.plain", " /s") + " (plain Ray)", "", ""),
        ("  ratio raydbg / plain Ray", r("throughput"), "", ">= 0.98",
         "no, within A/A noise" if not checks["throughput"] and checks.get("throughput.within_aa_noise") else
         met("throughput")),
        ("  median of the rounds' ratios (95% interval)",
         f"{r('throughput.paired')} ({r('throughput.paired.ci_lo')}-{r('throughput.paired.ci_hi')})",
         "", "", ""),
        ("  A/A control: a 2nd plain driver / plain (same, paired, interval)",
         f"{r('throughput.control')}, {r('throughput.control.paired')} "
         f"({r('throughput.control.paired.ci_lo')}-{r('throughput.control.paired.ci_hi')})", "", "", ""),
        *[(f"  variant {v} ({', '.join(f'{k}={x}' for k, x in env.items())}) / plain (paired, interval)",
           f"{r(f'throughput.{v}')}, {r(f'throughput.{v}.paired')} "
           f"({r(f'throughput.{v}.paired.ci_lo')}-{r(f'throughput.{v}.paired.ci_hi')}); CPU {r(f'task_cpu.{v}')}",
           "", "", "") for v, env in res["config"].get("variants", {}).items()],
        *([("  plain Ray with a runtime_env (env_vars only) / plain (paired, interval)",
            f"{r(f'throughput.{ENV_CONTROL}')}, {r(f'throughput.{ENV_CONTROL}.paired')} "
            f"({r(f'throughput.{ENV_CONTROL}.paired.ci_lo')}-{r(f'throughput.{ENV_CONTROL}.paired.ci_hi')}); "
            f"CPU {r(f'task_cpu.{ENV_CONTROL}')}", "", "", ""),
           ("  ratio raydbg / plain Ray with a runtime_env (paired, interval)",
            f"{r(f'throughput.vs_{ENV_CONTROL}')}, {r(f'throughput.vs_{ENV_CONTROL}.paired')} "
            f"({r(f'throughput.vs_{ENV_CONTROL}.paired.ci_lo')}-{r(f'throughput.vs_{ENV_CONTROL}.paired.ci_hi')}); "
            f"CPU {r(f'task_cpu.vs_{ENV_CONTROL}')}", "", "", "")] if res["config"].get("env_control") else []),
        ("CPU time per task, driver + workers", _f(med, "task_cpu_us.raydbg", " us"),
         _f(med, "task_cpu_us.plain", " us") + " (plain Ray)", "", ""),
        ("  ratio raydbg / plain Ray", r("task_cpu"), "", "", ""),
        ("CPU time per task, all processes of the cluster", _f(med, "task_cpu_us.all.raydbg", " us"),
         _f(med, "task_cpu_us.all.plain", " us") + " (plain Ray)", "", ""),
        ("  ratio raydbg / plain Ray", r("task_cpu.all"), "", "", ""),
        ("CPU loop after a session, vs never-debugged: calls", r("cpu.calls.raydbg"), r("cpu.calls.builtin"),
         ">= 0.95", met("cpu.calls")),
        ("CPU loop after a session, vs never-debugged: loop", r("cpu.loop.raydbg"), r("cpu.loop.builtin"),
         ">= 0.95", met("cpu.loop")),
        ("never-debugged worker, raydbg job / plain Ray: calls, loop",
         f"{r('cpu.calls.idle')}, {r('cpu.loop.idle')}", "", "", ""),
        ("tracer removed after the client detached", _f(med, "tracer_gone_ms.raydbg"), builtin_never, "", ""),
        ("breakpoint() -> listed, cold worker", _f(med, "pause.raydbg.listed.cold"),
         _f(med, "pause.builtin.cold"), "<= 100 ms", met("pause.cold")),
        ("breakpoint() -> listed, warm worker", _f(med, "pause.raydbg.listed.warm"),
         _f(med, "pause.builtin.warm"), "<= 100 ms", met("pause.warm")),
        ("breakpoint() -> attachable, cold worker", _f(med, "pause.raydbg.attachable.cold"),
         _f(med, "pause.builtin.cold"), "", ""),
        ("breakpoint() -> attachable, warm worker", _f(med, "pause.raydbg.attachable.warm"),
         _f(med, "pause.builtin.warm"), "", ""),
        ("connect -> first stackTrace, all", _f(med, "attach_ms.raydbg"), _f(med, "attach_ms.builtin"),
         "<= 300 ms", met("attach")),
        ("  first attach to a worker (cold)", _f(med, "attach_ms.raydbg.cold"), _f(med, "attach_ms.builtin.cold"),
         "", ""),
        ("  second attach (warm)", _f(med, "attach_ms.raydbg.warm"), _f(med, "attach_ms.builtin.warm"), "", ""),
    ]


HEADERS = ("measure (medians)", "raydbg", "Ray built-in", "target", "met")


def print_table(res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Debugger benchmark ({res['date']}, {res['duration_s']:.0f} s)", header_style="bold")
    for h in HEADERS:
        table.add_column(h, justify="left" if h.startswith("measure") else "right")
    for row in rows(res):
        table.add_row(*row, style="red" if row[4] == "NO" else None)
    console = Console()
    console.print(table)
    counts = {k: len(v) for k, v in res["samples"].items()}
    console.print(f"samples: {counts}", style="dim")
    for note in res["notes"]:
        console.print(f"note: {note}", style="yellow")


def markdown(res: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace(">=", "≥").replace("<=", "≤") for c in row) + " |" for row in rows(res)]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--driver", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="few rounds: a smoke test (~1 min)")
    p.add_argument("--rounds", type=int, help="debug rounds per debugger (default 5, --quick 1)")
    p.add_argument("--throughput-rounds", type=int, help="throughput rounds per driver (default 12, --quick 2)")
    p.add_argument("--epochs", type=int, help="fresh drivers this many times in the throughput part (default 3, --quick 1)")
    p.add_argument("--spins", type=int, help="runs of each CPU loop per actor per round (default 4, --quick 2)")
    p.add_argument("--warmup", type=int, help="unmeasured throughput runs per driver (default 2, --quick 1)")
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                   help="a third, plain driver in the throughput rounds: the A/A noise floor (default on; --quick off)")
    p.add_argument("--cpus", type=int, default=2, help="logical CPUs of the local cluster")
    p.add_argument("--wait-timeout", type=float, default=60, help="RAYDBG_WAIT_TIMEOUT for raydbg's pauses")
    p.add_argument("--memory-budgets", action=argparse.BooleanOptionalAction, default=True,
                   help="raydbg job records retry budgets + runs the memory start gate per task (default on, as in raydbg)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=KEY=VALUE[,KEY=VALUE]",
                   help="one more raydbg driver in the throughput rounds, with these environment variables "
                        "(e.g. nobudgets=RAYDBG_MEMORY_BUDGETS=0): what one part of raydbg costs")
    p.add_argument("--env-control", action="store_true",
                   help="one more plain driver whose job has a runtime_env (env_vars only, no raydbg), as "
                        "raydbg's job has: Ray's own cost of a job-level runtime_env (ray-project/ray#48591)")
    p.add_argument("--skip-throughput", action="store_true", help="only the debug rounds (parts 2-4)")
    p.add_argument("--skip-debug", action="store_true", help="only the throughput rounds (part 1)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.variant = dict(_variant(v, p) for v in args.variant)
    for name, full, quick in (("rounds", 5, 1), ("throughput_rounds", 12, 2), ("epochs", 3, 1), ("spins", 4, 2),
                              ("warmup", 2, 1), ("control", True, False)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def _variant(spec: str, parser: argparse.ArgumentParser) -> tuple[str, dict[str, str]]:
    name, _, env = spec.partition("=")
    pairs = [kv.partition("=") for kv in env.split(",") if kv]
    if not name.isidentifier() or name in ("raydbg", "plain", "control", ENV_CONTROL) or not pairs or not all(k and eq for k, eq, _ in pairs):
        parser.error(f"--variant {spec!r}: expected NAME=KEY=VALUE[,KEY=VALUE] with a new NAME")
    return name, {k: v for k, _, v in pairs}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.driver:
        driver_main(args.driver)
        return 0
    res = asyncio.run(Bench(args).run())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print_table(res)
    if args.markdown:
        print(markdown(res))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
