"""Ray Train loops for the gang tests (gloo on CPU); pause lines carry a `# BP:<name>` marker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bp_markers import marker_line


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


FILE = str(Path(__file__).resolve())

# For the Train test clusters. Ray Train's PlacementGroupCleaner asks the State API whether
# the run's controller lives. These clusters have no dashboard, so the API address is found
# by scanning for local Ray instances and can be another test cluster's, which answers "no
# such actor": the cleaner then removes this run's placement group and kills its workers
# (seen 2026-12-03 with three clusters up: a paused rank's run destroyed mid-test). An
# address that refuses keeps it at "State API unavailable, continuing to monitor".
# Ray Train's preemption watcher (an actor per worker-group start that watches for node
# drains, which no test here makes) is off: 6% of a gang module's CPU on this 2-core machine
# (tests/e2e/test_gang_shapes.py: 18 of 310 CPU-s). The SD app's modules do the same;
# test_pause keeps Ray's default.
TRAIN_CLUSTER_ENV = {"RAY_API_SERVER_ADDRESS": "http://127.0.0.1:1", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}


def _rank() -> int:
    import ray.train

    return int(ray.train.get_context().get_world_rank())


def _sum_of_ranks_plus_one() -> float:
    """all_reduce of (rank + 1) over the group: 1 + 2 + ... + world size."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(_rank() + 1)])
    dist.all_reduce(t)
    return float(t.item())


def _write(config: dict[str, Any], result: float) -> None:
    """Each rank's result, for the test to check (Train V2 keeps metrics only with a checkpoint)."""
    Path(config["out"], f"rank{_rank()}").write_text(str(result))


def rank0_pauses(config: dict[str, Any]) -> None:
    """Rank 0 stops before the collective; the others wait in it."""
    import ray.train

    local_value = 1000 + _rank()
    if _rank() == 0:
        breakpoint()  # BP:gang_rank0
    total = _sum_of_ranks_plus_one()
    ray.train.report({"sum": total, "local_value": local_value})
    _write(config, total)


def all_ranks_pause(config: dict[str, Any]) -> None:
    """Every rank stops at the same line; the run's workers have RAYDBG_TRAIN_PAUSE=all: one group."""
    import ray.train

    local_value = 2000 + _rank()
    breakpoint()  # BP:gang_all
    total = _sum_of_ranks_plus_one()
    ray.train.report({"sum": total, "local_value": local_value})
    _write(config, total)


def stuck_rank(config: dict[str, Any]) -> None:
    """Rank `stuck` (default 1) is stuck (as in a data loader) until a file appears; the others
    wait in the all_reduce it has not reached."""
    import ray.train

    if _rank() == int(config.get("stuck", 1)):
        release = Path(config["release"])
        while not release.exists():
            time.sleep(0.2)  # BP:gang_stuck
    total = _sum_of_ranks_plus_one()
    ray.train.report({"sum": total})
    _write(config, total)


def slow_steps(config: dict[str, Any]) -> None:
    """Slow but progressing: a step every `step_s` seconds, each reported."""
    import ray.train

    total = 0.0
    for _ in range(int(config["steps"])):
        time.sleep(float(config["step_s"]))
        total += _sum_of_ranks_plus_one()
        ray.train.report({"sum": total})
    _write(config, total)


def stuck_job_task(release: str) -> int:
    """Not Train: one `raydbg.progress()` beat, then stuck until a file appears."""
    import os

    import raydbg

    raydbg.progress(1)
    while not Path(release).exists():
        time.sleep(0.2)
    return os.getpid()


def straggler_steps(config: dict[str, Any]) -> None:
    """`steps` reported steps of `step_s` seconds; rank `slow_rank` (if any) works `extra_s` longer
    each; then (with `release`) every rank waits for that file, its records still listed."""
    import ray.train

    extra = float(config["extra_s"]) if _rank() == config.get("slow_rank") else 0.0
    for step in range(int(config["steps"])):
        time.sleep(float(config["step_s"]) + extra)
        ray.train.report({"step": step})
    while config.get("release") and not Path(config["release"]).exists():
        time.sleep(0.1)
    _write(config, float(config["steps"]))
