"""Per-step loss and gradient norm kept on the device and read back once every N steps.

A `.item()` or `.tolist()` every step makes the host wait for the device each step;
the window keeps each step's [loss, grad_norm] on the device, and one flush averages
them over ranks (one all_reduce) and reads them back (one sync) for the whole window.
Each step still gets its own log record; throughput is the window's average, the
only figure that is exact without a per-step sync.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class _Pending:
    step: int
    stats: torch.Tensor  # [loss, grad_norm], on the device
    lr: float
    timings: dict[str, float]


@dataclass
class StatsWindow:
    """Steps since the last read-back; `flush` turns them into log records."""

    images_per_step: int  # over all ranks
    reduce_mean: Callable[[torch.Tensor], torch.Tensor] = lambda t: t  # mean over ranks
    clock: Callable[[], float] = time.perf_counter
    pending: list[_Pending] = field(default_factory=list)
    started: float | None = None

    def start_step(self) -> None:
        """Call before a step's data wait: the first step of a window starts its clock."""
        if self.started is None:
            self.started = self.clock()

    def add(self, step: int, stats: torch.Tensor, lr: float, timings: dict[str, float]) -> None:
        self.pending.append(_Pending(step, stats.detach(), lr, dict(timings)))

    def __len__(self) -> int:
        return len(self.pending)

    def flush(self) -> list[dict[str, Any]]:
        """Read the window back (one collective, one sync): one record per step, oldest first."""
        if not self.pending:
            return []
        values = self.reduce_mean(torch.stack([p.stats.float() for p in self.pending])).tolist()
        elapsed = self.clock() - (self.started if self.started is not None else self.clock())
        step_s = elapsed / len(self.pending)
        images_per_s = self.images_per_step / step_s if step_s > 0 else 0.0
        records = [
            {"step": p.step, "loss": loss, "grad_norm": norm, "lr": p.lr,
             "images_per_s": round(images_per_s, 3), "step_s": round(step_s, 4),
             "timings": {k: round(v, 4) for k, v in p.timings.items()}}
            for p, (loss, norm) in zip(self.pending, values, strict=True)
        ]
        self.pending, self.started = [], None
        return records
