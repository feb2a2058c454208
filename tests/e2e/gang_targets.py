"""Ray Train loops for the gang tests (gloo on CPU); pause lines carry a `# BP:<name>` marker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bp_markers import marker_line


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


FILE = str(Path(__file__).resolve())


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
    import ray.train

    import raydbg

    local_value = 2000 + _rank()
    raydbg.breakpoint(all_ranks=True)  # BP:gang_all
    total = _sum_of_ranks_plus_one()
    ray.train.report({"sum": total, "local_value": local_value})
    _write(config, total)


def stuck_rank(config: dict[str, Any]) -> None:
    """Rank 1 is stuck (as in a data loader) until a file appears; rank 0 waits in all_reduce."""
    import ray.train

    if _rank() == 1:
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
