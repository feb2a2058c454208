"""A Ray Train loop whose rank 1 fails on the first attempt only (a marker file), for the restart tests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

FAILURE = "planted failure on rank 1 (first attempt only)"


def fail_once(config: dict[str, Any]) -> None:
    import ray.train

    rank = int(ray.train.get_context().get_world_rank())
    marker = Path(config["marker"])
    if rank == 1 and not marker.exists():
        marker.write_text("failed once")
        raise RuntimeError(FAILURE)
    # The second attempt stays up until the test has looked at it (its stacks), then ends.
    release, deadline = Path(config["release"]), time.monotonic() + 300
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
