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

The parts live beside this entry point: debugger_throughput.py (1), debugger_sessions.py
(2, 3), debugger_attach.py (4), debugger_report.py (the table), debugger_driver.py (the
driver subprocesses), debugger_common.py (what they share).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO, free_port  # benchmarks/, this script's directory
from debugger_attach import attach_checks
from debugger_common import ENV_CONTROL, LOOPS, POLL_S, TARGETS, machine
from debugger_report import markdown, print_table
from debugger_sessions import SessionRounds, cpu_ratios, session_checks
from debugger_throughput import (
    ThroughputRounds,
    throughput_checks,
    throughput_ratios,
    variant_ratios,
)

DEFAULT_OUT = REPO / "benchmarks" / "results" / "debugger.json"


# --- the parent: cluster, measurements, report -----------------------------------------------
class Bench(ThroughputRounds, SessionRounds):
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
                       dashboard_port=free_port(), logging_level=logging.ERROR, log_to_driver=False,
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
        ratios = {**throughput_ratios(s, med), **cpu_ratios(med),
                  **variant_ratios(s, med, extras, self.args.env_control)}
        ratios = {k: round(v, 4) for k, v in ratios.items()}
        checks = {**throughput_checks(ratios), **session_checks(ratios, med), **attach_checks(med)}
        return {
            "benchmark": "debugger",
            "command": " ".join(["python", "benchmarks/debugger.py", *self.args.argv]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(started)),
            "duration_s": round(time.time() - started, 1),
            "phases_s": self.phases,
            "machine": machine(load_before),
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
