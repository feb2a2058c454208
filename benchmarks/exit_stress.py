"""Run a driver many times as separate processes and check how each one exits.

    python benchmarks/exit_stress.py task in_flight -n 20          # drivers of exit_drivers.py
    python benchmarks/exit_stress.py --shared-cluster registry -n 50
    python benchmarks/exit_stress.py examples/post_mortem.py -n 10  # a script, by path

Each run: `PYTHONFAULTHANDLER=1`, `RAY_DEBUG=1`, core dumps on (`ulimit -c unlimited`, in a
directory of its own), `nice -n 10`. A run fails on a non-zero exit status, a signal, a core
file, faulthandler's "Fatal Python error" or a driver's traceback in its output; a failed run's directory is kept
(output, core, and `gdb -batch -ex 'thread apply all bt'` of the core in bt.txt) and named in
the table. Exit status 1 if any run failed, or a driver had no run that got as far as its
exit (each ray.init timed out: a loaded machine).

--shared-cluster: one cluster for all runs (started here, without raydbg; the first driver
starts the agents), as `ray start --head` then the job would; else each driver starts its own.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
DRIVERS = REPO / "benchmarks" / "exit_drivers.py"
FATAL_MARKS = ("Fatal Python error", "Segmentation fault", "Aborted", "Current thread 0x")
# The driver's own (a worker's lines come prefixed with its name and pid): something raised
# in one of its threads or at exit, even if the exit status is 0.
DRIVER_TRACEBACK = "Traceback (most recent call last)"
NO_CLUSTER = "The current node timed out during startup"  # ray.init gave up (a loaded machine)
WAIT_TIMEOUT_S = "3"  # examples that pause: nobody attaches, they go on after this


@dataclass
class Run:
    driver: str
    index: int
    rc: int
    seconds: float
    fatal: str
    core: bool
    kept: Path | None
    no_cluster: bool = False

    @property
    def failed(self) -> bool:
        return self.core or (not self.no_cluster and (self.rc != 0 or bool(self.fatal)))

    def verdict(self) -> str:
        if self.rc < 0:
            return f"signal {signal.Signals(-self.rc).name}"
        if self.no_cluster and self.rc == 1:
            return "no cluster (ray.init timed out)"
        return f"exit {self.rc}" if self.rc else (
            "traceback" if self.fatal.startswith(DRIVER_TRACEBACK) else "fatal text" if self.fatal
            else "core" if self.core else "ok")

    @property
    def exited_ok(self) -> bool:
        return not self.failed and not self.no_cluster


def command(driver: str) -> list[str]:
    if driver.endswith(".py"):
        return [sys.executable, str((REPO / driver).resolve())]
    return [sys.executable, str(DRIVERS), driver]


def _core_limit() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    os.nice(10)


def run_once(driver: str, index: int, env: dict[str, str], timeout: float, keep_root: Path) -> Run:
    workdir = Path(tempfile.mkdtemp(prefix=f"exit-{Path(driver).stem}-{index}-", dir=keep_root))
    started = time.monotonic()
    with open(workdir / "output.txt", "wb") as out:
        try:
            rc = subprocess.run(command(driver), env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_core_limit, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    seconds = time.monotonic() - started
    text = (workdir / "output.txt").read_text(errors="replace")
    fatal = next((line for line in text.splitlines()
                  if any(m in line for m in FATAL_MARKS) or line.startswith(DRIVER_TRACEBACK)), "")
    cores = [p for p in workdir.iterdir() if p.name.startswith("core")]
    run = Run(driver, index, rc, seconds, fatal, bool(cores), workdir, NO_CLUSTER in text)
    if not run.failed:
        shutil.rmtree(workdir, ignore_errors=True)
        run.kept = None
    elif cores:
        _backtrace(cores[0], workdir / "bt.txt")
    return run


def _backtrace(core: Path, into: Path) -> None:
    """All threads' native stacks of the core, for the report (gdb is slow: one core per run)."""
    with open(into, "w") as out:
        subprocess.run(["gdb", "-batch", "-ex", "thread apply all bt 30", sys.executable, str(core)],
                       stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False)


def _env(address: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "RAY_DEBUG": "1", "RAYDBG_WAIT_TIMEOUT": WAIT_TIMEOUT_S,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    # Never a `ray start` cluster of someone else on this machine (a plain ray.init() joins it).
    env["RAY_ADDRESS"] = address or "local"
    return env


def _shared_cluster() -> str:
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    return str(ray.get_runtime_context().gcs_address)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("drivers", nargs="+", help="exit_drivers.py names, or paths of scripts (examples/x.py)")
    p.add_argument("-n", "--runs", type=int, default=10, help="runs per driver (default 10)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it counts as hung")
    p.add_argument("--shared-cluster", action="store_true", help="one cluster for every run")
    p.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "raydbg-exit-stress",
                   help="where failed runs' directories are kept")
    args = p.parse_args()
    if args.runs < 1 or args.jobs < 1:
        p.error("--runs and --jobs must be at least 1")
    args.keep.mkdir(parents=True, exist_ok=True)
    console = Console()
    env = _env(_shared_cluster() if args.shared_cluster else None)
    runs: list[Run] = []
    try:
        with Progress(console=console) as progress, ThreadPoolExecutor(args.jobs) as pool:
            bars = {d: progress.add_task(d, total=args.runs) for d in args.drivers}
            futures = [(d, pool.submit(run_once, d, i, env, args.timeout, args.keep))
                       for i in range(args.runs) for d in args.drivers]
            for d, fut in futures:
                run = fut.result()
                runs.append(run)
                progress.advance(bars[d])
                if run.failed:
                    progress.console.print(f"[red]{d} #{run.index}: {run.verdict()} {run.fatal}  ({run.kept})")
    finally:
        if args.shared_cluster:
            import ray

            ray.shutdown()
    _report(console, args.drivers, runs)
    unmeasured = [d for d in args.drivers if not any(r.exited_ok for r in runs if r.driver == d)]
    if unmeasured:
        console.print(f"[red]no run exited ok (nothing measured): {', '.join(unmeasured)}")
    return 1 if any(r.failed for r in runs) or unmeasured else 0


def _report(console: Console, drivers: list[str], runs: list[Run]) -> None:
    table = Table(title="exits")
    for col in ("driver", "runs", "exited ok", "failed", "verdicts", "median s", "max s"):
        table.add_column(col)
    for d in drivers:
        mine = [r for r in runs if r.driver == d]
        secs = sorted(r.seconds for r in mine)
        verdicts = Counter(r.verdict() for r in mine)
        table.add_row(d, str(len(mine)), str(sum(r.exited_ok for r in mine)), str(sum(r.failed for r in mine)),
                      ", ".join(f"{v} x{n}" for v, n in verdicts.most_common()),
                      f"{secs[len(secs) // 2]:.1f}", f"{secs[-1]:.1f}")
    console.print(table)
    for r in runs:
        if r.failed:
            console.print(f"{r.driver} #{r.index}: {r.verdict()} -> {r.kept}")


if __name__ == "__main__":
    sys.exit(main())
