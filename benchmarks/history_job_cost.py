"""Benchmark: what the history record (the gateway's recorder) costs a job on its node: per-task throughput and a Ray Train step, record on vs off, paired, with an A/A control.

    .venv/bin/python benchmarks/history_job_cost.py [--pairs 4] [--block-s 10] [--settle-s 4] [--tasks 2000]
        [--report-every 50] [--measures tasks train] [--out FILE]
    .venv/bin/python benchmarks/history_job_cost.py --quick     # smoke run (~3 min); its figures mean nothing

One local cluster with raydbg active (tests/cluster.py, 4 logical CPUs), this script the job's
driver. The record is written by the recorder in the head's agent (the gateway,
raydbg/agent_host/history_recorder.py), which reads RAYDBG_HISTORY once, when it starts. So each
trial first restarts the head's agent with the record on (RAYDBG_HISTORY=<a temp directory>) or
off (RAYDBG_HISTORY=off), the one difference between the kinds, then waits: `--settle-s`, and
until the agent spends under 100 ms of CPU in a second (its start, and the recorder's first round,
which imports torch to read Train's state and catches up on the session's spans, are a
restart's cost, not the recorder's steady one), then measures for `--block-s` (10 s: the recorder
polls every 2 s and takes steps, memory, Train state and spans every 10 s, so a block holds one
whole period). Kinds per round: `on`, `off` and `off2` (off again: the A/A control), in an order
that rotates round by round (a cyclic Latin square). Two measures, one after the other:

- `tasks`: no-op Ray tasks from the driver in batches of `--tasks`, as many batches as the block
  holds: tasks per second. A job of plain tasks has nothing to record (no beats, sessions or
  events): it pays the recorder's polling only;
- `train`: a TorchTrainer run (CPU, gloo, 2 workers) for the whole measure, each step a small MLP
  under DistributedDataParallel inside a telemetry span `*.train.step` with the run's id (a span
  and a progress beat a step), `ray.train.report` every `--report-every` steps, Train's state
  tracking on and a storage_path: the recorder records steps, Train attempts, memory and every
  span, into the record and its copy under the storage_path. Not a report each step: Train v2's
  report waits until the controller took the previous one (it polls every 2 s), so a report a
  step makes every step ~2 s of waiting. A step's time: from the previous step's end to its own,
  less its wait in `ray.train.report`, rank 0's; per block the median (the headline) and the
  mean (which a periodic stall moves where the median may not).

Ratios: on/off and off2/off, median of the per-round ratios with a 95 % bootstrap interval
(benchmarks/paired_stats.py; n/a under 4 rounds). Also per kind the head agent's CPU (ms per
second, the recorder's own CPU shows there) and RSS, and the record's entries by kind (that it
was written). Writes benchmarks/results/history_job_cost.json (with --quick only given --out),
with the load averages at the start and the end. ~8 min on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import REPO  # benchmarks/, this script's directory; the repository's root on sys.path
from paired_stats import paired, paired_ci
from proc_cpu import cpu_ns
from rich.console import Console
from rich.table import Table

MODES = ("off", "on", "off2")


def noop() -> None:
    return None


def train_loop(config: dict[str, Any]) -> None:
    import ray.train
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from raydbg.telemetry import api

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank = ray.train.get_context().get_world_rank()
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, flag = torch.randn(128, 256), torch.zeros(1)
    attrs = {"train.run.id": config["run"], "ray.train.world_rank": rank}
    stop, log = Path(config["stop"]), open(config["log"], "a") if rank == 0 else None  # noqa: SIM115
    step = 0
    while True:
        # A span named *.train.step: the telemetry record of the step, and a progress beat.
        with api.span("bench.train.step", {**attrs, "train.step": step}):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        waited = 0.0
        if step % config["report_every"] == 0:
            t = time.perf_counter()
            ray.train.report({"step": step})
            waited = time.perf_counter() - t
        flag[0] = 1.0 if rank == 0 and stop.exists() else 0.0
        dist.all_reduce(flag)  # rank 0 decides: both ranks leave after the same step
        if log is not None:
            log.write(f"{time.time():.6f} {waited:.6f}\n")
            log.flush()
        if flag.item():
            break
        step += 1


class HeadAgent:
    """Restarts the head's agent with the record on or off (ensure_agent's options, plus RAYDBG_HISTORY)."""

    def __init__(self, node_id: str, history_dir: str) -> None:
        self.node_id, self.history_dir = node_id, history_dir
        self.pid = 0
        self.restart_s: list[float] = []

    def restart(self, mode: str) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from raydbg import config
        from raydbg.agent_host.actor import NodeAgent

        t = time.monotonic()
        name = config.agent_name(self.node_id)
        old = ray.get_actor(name, namespace=config.NAMESPACE)
        ray.get(old.shutdown.remote(), timeout=60)  # its memory monitor and registry records go
        ray.kill(old, no_restart=True)
        while True:  # the name is free once the actor is dead
            try:
                ray.get_actor(name, namespace=config.NAMESPACE)
            except ValueError:
                break
            time.sleep(0.1)
        history = self.history_dir if mode == "on" else "off"
        agent = ray.remote(NodeAgent).options(  # type: ignore[attr-defined]
            name=name, namespace=config.NAMESPACE, lifetime="detached", num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False),
            runtime_env={"env_vars": {"RAY_DEBUG": "0", "RAYDBG_AGENT": "1", "RAYDBG_HISTORY": history}},
        ).remote(self.node_id, True, "benchmarks/history_job_cost.py", False)
        self.pid = int(ray.get(agent.info.remote(), timeout=120)["pid"])
        self.restart_s.append(time.monotonic() - t)


def runnable(pid: int) -> bool:
    """Whether a thread of `pid` is running or waiting for a CPU (state R): a process starved by
    the machine's load spends little CPU without being idle."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "R":
                    return True
        except (OSError, IndexError):
            pass
    return False


def settle(pid: int, min_s: float, quiet_ms: float = 50.0, max_s: float = 30.0) -> float:
    """Wait `min_s`, then until the agent is idle for a second (under `quiet_ms` of CPU, and
    runnable in at most 1 of 10 looks), at most `max_s` more: its start, and the recorder's first
    round (which imports what Train's state needs, torch included, and catches up on the session's
    spans), are a restart's cost, not the recorder's steady one."""
    t = time.monotonic()
    time.sleep(min_s)
    while time.monotonic() - t < min_s + max_s:
        c0, busy = cpu_ns(pid), 0
        for _ in range(10):
            time.sleep(0.1)
            busy += runnable(pid)
        if (cpu_ns(pid) - c0) / 1e6 < quiet_ms and busy <= 1:
            break
    return time.monotonic() - t


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration, ValueError):
        return float("nan")


def trials(name: str, agent: HeadAgent, args: argparse.Namespace, measure: Any) -> dict[str, Any]:
    """`args.pairs` rounds of the three kinds; `measure(block_s)` -> (the figure, a second one)."""
    out: dict[str, dict[str, list[float]]] = {
        k: {m: [] for m in MODES} for k in ("values", "extra", "agent_cpu_ms_per_s", "agent_rss_mib", "settle_s")}
    for r in range(args.pairs):
        k = r % len(MODES)
        for mode in MODES[k:] + MODES[:k]:
            agent.restart("on" if mode == "on" else "off")
            out["settle_s"][mode].append(round(settle(agent.pid, args.settle_s), 1))
            c0, t0 = cpu_ns(agent.pid), time.monotonic()
            value, more = measure(args.block_s)
            out["agent_cpu_ms_per_s"][mode].append((cpu_ns(agent.pid) - c0) / 1e6 / (time.monotonic() - t0))
            out["agent_rss_mib"][mode].append(round(rss_mib(agent.pid), 1))
            out["values"][mode].append(value)
            out["extra"][mode].append(more)
            print(f"  {name} round {r + 1}/{args.pairs} {mode:4s}: {value:.6g} ({more:.6g}); agent CPU "
                  f"{out['agent_cpu_ms_per_s'][mode][-1]:.1f} ms/s, RSS {out['agent_rss_mib'][mode][-1]} MiB; "
                  f"restart {agent.restart_s[-1]:.1f} s, settle {out['settle_s'][mode][-1]} s", flush=True)
    return out


def ratio(num: list[float], den: list[float]) -> dict[str, float]:
    low, high = paired_ci(num, den)
    return {"ratio": paired(num, den), "low": low, "high": high}


def tasks_measure(batch: int) -> Any:
    import ray

    remote = ray.remote(noop)
    ray.get([remote.remote() for _ in range(batch)])  # warm: the workers exist

    def measure(block_s: float) -> tuple[float, float]:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < block_s:
            ray.get([remote.remote() for _ in range(batch)])
            n += batch
        took = time.perf_counter() - t0
        return n / took, float(n)  # tasks/s, and how many

    return measure


def step_measure(log: Path, run_error: list[BaseException]) -> Any:
    def steps() -> list[tuple[float, float]]:  # (end, seconds waited in ray.train.report)
        try:
            return [(float(a), float(b)) for a, b in (line.split() for line in log.read_text().splitlines())]
        except (OSError, ValueError):
            return []

    deadline = time.monotonic() + 300
    while len(steps()) < 30:  # started, and past its first steps
        if run_error or time.monotonic() > deadline:
            raise SystemExit(f"the Train run did not start: {run_error or 'no steps in 300 s'}")
        time.sleep(1)

    def measure(block_s: float) -> tuple[float, float]:
        t0 = time.time()
        time.sleep(block_s)
        inside = [s for s in steps() if t0 <= s[0] <= time.time()]
        if len(inside) < 3 or run_error:
            raise SystemExit(f"the Train run made {len(inside)} steps in {block_s} s: {run_error}")
        # a step: from the previous step's end to its own, less its wait for Train's controller
        took = [b[0] - a[0] - b[1] for a, b in zip(inside, inside[1:], strict=False)]
        return statistics.median(took), statistics.fmean(took)

    return measure


def record_entries(history_dir: str) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    for seg in Path(history_dir).rglob("seg-*.jsonl"):
        for line in seg.read_bytes().splitlines():
            try:
                kinds[json.loads(line).get("kind", "?")] += 1
            except ValueError:
                kinds["torn"] += 1
    return dict(sorted(kinds.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4, help="rounds of on, off, off2 per measure")
    ap.add_argument("--block-s", type=float, default=10.0, help="each trial's measured seconds")
    ap.add_argument("--settle-s", type=float, default=4.0,
                    help="seconds after the agent's restart, unmeasured, at least (then until it is idle)")
    ap.add_argument("--tasks", type=int, default=2000, help="tasks a batch (a trial: as many batches as its block holds)")
    ap.add_argument("--report-every", type=int, default=50, help="steps between two ray.train.report calls")
    ap.add_argument("--measures", nargs="+", default=["tasks", "train"], choices=["tasks", "train"])
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, 4 s blocks, 300-task batches")
    ap.add_argument("--out", type=Path, default=None,
                    help="result file (default benchmarks/results/history_job_cost.json; none with --quick)")
    args = ap.parse_args()
    if args.quick:
        args.pairs, args.block_s, args.settle_s, args.tasks = 2, 4.0, 4.0, 300
    out = args.out or (None if args.quick else REPO / "benchmarks" / "results" / "history_job_cost.json")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from raydbg import registry
    from tests.cluster import ENV, Cluster

    load_before = os.getloadavg()[0]
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="raydbg-history-job-cost-"))
    history_dir = str(tmp / "history")
    env = {**ENV, "RAYDBG_HISTORY": "off", "RAY_TRAIN_ENABLE_STATE_TRACKING": "1",
           "RAY_API_SERVER_ADDRESS": "http://127.0.0.1:1"}  # tests/e2e/gang_targets.py says why
    results: dict[str, Any] = {}
    with Cluster(num_cpus=4, env=env, by_value=(sys.modules[__name__],)) as cluster:
        deadline = time.monotonic() + 120
        while registry.get(registry.GATEWAY) is None:  # the activated driver starts the agents
            if time.monotonic() > deadline:
                raise SystemExit("raydbg's gateway did not start in 120 s")
            time.sleep(0.5)
        agent = HeadAgent(cluster.head_node_id(), history_dir)
        if "tasks" in args.measures:
            print("tasks: no-op tasks, record on/off")
            results["tasks"] = trials("tasks", agent, args, tasks_measure(args.tasks))
        if "train" in args.measures:
            print(f"train: TorchTrainer, 2 gloo workers, a span each step, a report every {args.report_every}, record on/off")
            stop, log = tmp / "stop", tmp / "steps.log"
            trainer = TorchTrainer(
                train_loop, train_loop_config={"run": "bench-history-cost", "stop": str(stop), "log": str(log),
                                   "report_every": args.report_every},
                torch_config=TorchConfig(backend="gloo"), scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(name="bench-history-cost", storage_path=str(tmp / "storage")))
            run_error: list[BaseException] = []

            def fit() -> None:
                try:
                    trainer.fit()
                except BaseException as exc:  # noqa: BLE001 - said by the measure
                    run_error.append(exc)

            fitting = threading.Thread(target=fit, daemon=True)
            fitting.start()
            try:
                results["train"] = trials("train", agent, args, step_measure(log, run_error))
            finally:
                stop.touch()
                fitting.join(120)
        entries = {"main": record_entries(history_dir), "storage_copy": record_entries(str(tmp / "storage"))}
    shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()[0]
    report(results, args, entries, agent.restart_s, load_before, load_after, time.monotonic() - started, out)


def report(results: dict[str, Any], args: argparse.Namespace, entries: dict[str, dict[str, int]],
           restart_s: list[float], load_before: float, load_after: float, elapsed: float, out: Path | None) -> None:
    table = Table(title="record on vs off: on/off and the A/A control (off2/off), median of the per-round "
                        "ratios (95 %); the head agent's CPU and RSS, medians")
    for col in ("measure", "off", "on/off", "A/A", "agent CPU ms/s off, on", "agent RSS MiB off, on"):
        table.add_column(col)
    def fmt(r: dict[str, float]) -> str:
        return f"{r['ratio']:.4f} " + ("(n/a)" if r["low"] != r["low"] else f"({r['low']:.4f}-{r['high']:.4f})")

    summary: dict[str, Any] = {}
    for name, r in results.items():
        v, x = r["values"], r["extra"]
        med = {k: {m: round(statistics.median(r[k][m]), 2) for m in MODES} for k in ("agent_cpu_ms_per_s", "agent_rss_mib")}
        s: dict[str, Any] = {"on_off": ratio(v["on"], v["off"]), "aa": ratio(v["off2"], v["off"])}
        rows = [(f"{name} (tasks/s)" if name == "tasks" else "train step (median)", v, s)]
        if name == "train":
            s_mean = {"on_off": ratio(x["on"], x["off"]), "aa": ratio(x["off2"], x["off"])}
            s |= {"on_off_mean": s_mean["on_off"], "aa_mean": s_mean["aa"]}
            rows.append(("train step (mean)", x, s_mean))
        summary[name] = {**r, **s, **{f"{k}_median": m for k, m in med.items()}}
        for label, values, ratios in rows:
            off = statistics.median(values["off"])
            table.add_row(label, f"{off:.0f} tasks/s" if name == "tasks" else f"{off * 1e3:.2f} ms",
                          fmt(ratios["on_off"]), fmt(ratios["aa"]),
                          "{0[off]}, {0[on]}".format(med["agent_cpu_ms_per_s"]),
                          "{0[off]}, {0[on]}".format(med["agent_rss_mib"]))
    Console().print(table)
    print(f"record written (entries by kind): {entries}")
    print(f"agent restart median {statistics.median(restart_s):.1f} s; {elapsed:.0f} s in all; "
          f"load average {load_before:.2f} before, {load_after:.2f} after")
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": " ".join(sys.argv), "load_before": load_before, "load_after": load_after,
        "elapsed_s": round(elapsed, 1), "pairs": args.pairs, "block_s": args.block_s, "settle_s": args.settle_s,
        "tasks_per_batch": args.tasks, "report_every": args.report_every,
        "agent_restart_s": [round(t, 2) for t in restart_s], "record_entries": entries, "results": summary},
        indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
