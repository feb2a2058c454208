"""Per-step loss and gradient norm kept on the device and read back once every N steps, with MFU and memory.

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
from typing import TYPE_CHECKING, Any

import torch

from sd_reference import device, flops, metrics, optim

if TYPE_CHECKING:
    from sd_reference.train_loop import Worker


@dataclass
class _Pending:
    step: int
    stats: torch.Tensor  # [loss, grad_norm], on the device
    lr: float
    timings: dict[str, float]
    extra: dict[str, Any] | None = None  # more fields for the step's record (e.g. its sample keys)


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

    def add(self, step: int, stats: torch.Tensor, lr: float, timings: dict[str, float],
            extra: dict[str, Any] | None = None) -> None:
        self.pending.append(_Pending(step, stats.detach(), lr, dict(timings), extra))

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
             "timings": {k: round(v, 4) for k, v in p.timings.items()}, **(p.extra or {})}
            for p, (loss, norm) in zip(self.pending, values, strict=True)
        ]
        self.pending, self.started = [], None
        return records


class StepReporter:
    """The loop's step records: the read-back window, then MFU and peak memory, telemetry and the log."""

    def __init__(self, worker: Worker, write: Callable[[dict[str, Any]], None], counted: bool = True) -> None:
        self.worker, self.write = worker, write
        self.window = StatsWindow(worker.cfg.rows_per_step() * worker.world, worker.mean_over_ranks)
        self.train_flops: int | None = None
        if counted:  # rank 0 writes the log; the count takes ~2 s for SD2-base
            try:
                self.train_flops = flops.unet_flops_per_image(worker.spec.unet).train
            except Exception:  # noqa: BLE001 - a metric must never stop a run (e.g. an unusual pretrained config)
                self.train_flops = None
        self.peak = flops.peak_flops(device.name(worker.device)) if worker.device.type == "cuda" else None
        device.reset_peak_memory(worker.device)

    def start_fields(self) -> dict[str, Any]:
        """What the run's `start` record says about the device and the training features."""
        cfg = self.worker.cfg
        return {"device": device.name(self.worker.device), "optimizer": optim.implementation(self.worker.optimizer),
                "grad_accum": cfg.grad_accum, "grad_checkpointing": cfg.grad_checkpointing,
                "train_flops_per_image": self.train_flops}

    def start_step(self) -> None:
        self.window.start_step()

    def add(self, step: int, stats: torch.Tensor, lr: float, timings: dict[str, float],
            extra: dict[str, Any] | None = None) -> None:
        self.window.add(step, stats, lr, timings, extra)

    def flush(self) -> dict[str, Any]:
        """Read the window back and write one record per step; returns the last ({} if none)."""
        last: dict[str, Any] = {}
        for record in self.window.flush():
            mfu = flops.mfu(self.train_flops, record["images_per_s"] / self.worker.world, self.peak) \
                if self.train_flops else None
            last = dict(record, mfu=None if mfu is None else round(mfu, 4),
                        peak_mem_gib=device.peak_memory_gib(self.worker.device))
            metrics.histogram("sd.train.step.duration", last["step_s"])
            metrics.histogram("sd.train.loss", last["loss"])
            metrics.histogram("sd.train.images_per_second", last["images_per_s"])
            self.write(last)
        return last
