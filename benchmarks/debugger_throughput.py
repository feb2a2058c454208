"""The debugger benchmark's part 1, throughput: no-op tasks of a raydbg job against plain Ray.

Rounds of `--tasks` no-op tasks from each driver in turn (ABBA with two drivers, every order
with the A/A control, a Latin square with variants), wall clock and CPU time per task of the
driver, of the job's workers and of every process of the cluster; each epoch has new drivers.
"""

from __future__ import annotations

import itertools
from typing import Any

from debugger_common import ENV_CONTROL, TARGETS, BenchState, ci_of, cpu_delta, ratio, tree_cpu
from paired_stats import paired


class ThroughputRounds(BenchState):
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
                    before = tree_cpu()
                    got = await self.drivers[kind].call("tasks", n=n, timeout=300)
                    self.add(f"task_cpu_us.all.{kind}", cpu_delta(before, tree_cpu()) / n * 1e6)
                    self.add(f"throughput.{kind}", n / got["wall"])
                    self.add(f"task_cpu_us.driver.{kind}", got["driver_cpu"] / n * 1e6)
                    if got["workers_cpu"] is not None:
                        self.add(f"task_cpu_us.workers.{kind}", got["workers_cpu"] / n * 1e6)
                    self.step(f"throughput: round {done}, {kind}", 1)


def throughput_ratios(s: dict[str, list[float]], med: dict[str, float]) -> dict[str, float]:
    """raydbg / plain Ray: throughput (of medians, and paired by round, with its interval),
    the A/A control's, and CPU time per task."""
    return {
        "throughput": ratio(med, "throughput.raydbg", "throughput.plain"),
        # each round's raydbg and plain runs are back to back: their ratio cancels slow drift
        "throughput.paired": paired(s.get("throughput.raydbg", []), s.get("throughput.plain", [])),
        # the same for two identical plain drivers: how far from 1 noise alone moves it
        "throughput.control": ratio(med, "throughput.control", "throughput.plain"),
        "throughput.control.paired": paired(s.get("throughput.control", []), s.get("throughput.plain", [])),
        **ci_of("throughput.paired", s.get("throughput.raydbg", []), s.get("throughput.plain", [])),
        **ci_of("throughput.control.paired", s.get("throughput.control", []), s.get("throughput.plain", [])),
        "task_cpu": ratio(med, "task_cpu_us.raydbg", "task_cpu_us.plain"),
        "task_cpu.all": ratio(med, "task_cpu_us.all.raydbg", "task_cpu_us.all.plain"),
    }


def variant_ratios(s: dict[str, list[float]], med: dict[str, float], extras: list[str],
                   env_control: bool) -> dict[str, float]:
    """The raydbg job with a part switched off, and plain Ray with a runtime_env, vs plain Ray."""
    ratios: dict[str, float] = {}
    for v in extras:
        ratios[f"throughput.{v}"] = ratio(med, f"throughput.{v}", "throughput.plain")
        ratios[f"throughput.{v}.paired"] = paired(s.get(f"throughput.{v}", []), s.get("throughput.plain", []))
        ratios.update(ci_of(f"throughput.{v}.paired", s.get(f"throughput.{v}", []), s.get("throughput.plain", [])))
        ratios[f"task_cpu.{v}"] = ratio(med, f"task_cpu_us.{v}", "task_cpu_us.plain")
    if env_control:  # raydbg against a job that has a runtime_env too
        raydbg, env = s.get("throughput.raydbg", []), s.get(f"throughput.{ENV_CONTROL}", [])
        ratios[f"throughput.vs_{ENV_CONTROL}"] = ratio(med, "throughput.raydbg", f"throughput.{ENV_CONTROL}")
        ratios[f"throughput.vs_{ENV_CONTROL}.paired"] = paired(raydbg, env)
        ratios.update(ci_of(f"throughput.vs_{ENV_CONTROL}.paired", raydbg, env))
        ratios[f"task_cpu.vs_{ENV_CONTROL}"] = ratio(med, "task_cpu_us.raydbg", f"task_cpu_us.{ENV_CONTROL}")
    return ratios


def throughput_checks(ratios: dict[str, Any]) -> dict[str, bool]:
    # When two identical plain drivers differ at least as much, the gap is not raydbg's.
    control = ratios.get("throughput.control", float("nan"))
    within_noise = abs(1 - control) >= abs(1 - ratios["throughput"])
    return {
        "throughput": ratios["throughput"] >= TARGETS["throughput_ratio"],
        "throughput.within_aa_noise": within_noise,
    }
