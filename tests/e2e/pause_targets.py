"""Work for `raydbg pause` to stop (tests/e2e/test_pause.py); lines carry `# BP:<name>` markers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bp_markers import marker_line

FILE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    return marker_line(__file__, marker)


def _rank() -> int:
    import ray.train

    return int(ray.train.get_context().get_world_rank())


def loop_until_released(config: dict[str, Any]) -> None:
    """Each rank counts in a Python loop until the release file exists; writes its count's checksum."""
    release = Path(config["release"])
    total = 0
    i = 0
    while not release.exists():  # BP:loop_head
        total += i  # BP:loop_body
        i += 1
        time.sleep(0.005)
    Path(config["out"], f"rank{_rank()}").write_text(str(total == i * (i - 1) // 2))


def counting_task(release: str) -> int:
    """A plain Ray task in a Python loop (a pid target)."""
    n = 0
    while not Path(release).exists():  # BP:task_loop
        n += 1
        time.sleep(0.005)
    return n


def blocked_in_all_reduce(config: dict[str, Any]) -> None:
    """Rank 1 enters the all_reduce at once; rank 0 joins it only once the release file exists."""
    import torch
    import torch.distributed as dist

    rank = _rank()
    step = 3
    grads = torch.full((4, 2), float(rank + 1))
    if rank == 0:
        while not Path(config["release"]).exists():
            time.sleep(0.05)
    dist.all_reduce(grads)  # BP:all_reduce
    after = float(grads.sum().item())  # BP:after_all_reduce
    Path(config["out"], f"rank{rank}").write_text(str(after + step - step))
