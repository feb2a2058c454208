"""Validation during training: the objective on fixed rows with fixed noise, and sample grids, every N steps.

The validation rows are the first `--val-rows` rows of the training data (the first
latent shards in order; online: the first rows of the raw data), read once by the
driver and handed to every worker through the object store; each rank evaluates
its equal share. They are also trained on: the figure is a low-variance tracking
loss (same rows, same noise, timesteps spread evenly over the schedule at every
evaluation), not a held-out generalisation measure.
Both parts are collective under FSDP2 (every rank runs the same forwards).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from sd_reference import metrics

if TYPE_CHECKING:
    from sd_reference.config import TrainConfig
    from sd_reference.train_loop import Worker


def parquet_rows(files: list[str], columns: list[str], rows: int,
                 filesystem: Callable[[str], tuple[Any, str]] | None = None) -> dict[str, np.ndarray]:
    """The first `rows` rows of latent parquet shards, in file order (`filesystem`: uri -> (fs, path))."""
    import pyarrow.parquet as pq
    import ray.data  # noqa: F401 - registers Ray's tensor extension type, the latents' column type

    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    got = 0
    for f in files:
        fs, path = filesystem(f) if filesystem else (None, f)
        for batch in pq.ParquetFile(path, filesystem=fs).iter_batches(batch_size=rows, columns=columns):
            take = min(batch.num_rows, rows - got)
            for c in columns:
                parts[c].append(batch.column(c).to_numpy(zero_copy_only=False)[:take])
            got += take
            if got == rows:
                return {c: np.concatenate(v) for c, v in parts.items()}
    return {c: np.concatenate(v) for c, v in parts.items()}


def driver_rows(cfg: TrainConfig, online_ds: Any) -> dict[str, np.ndarray]:
    """Driver side: the validation rows, once: latents from the shards, or raw rows from the online dataset."""
    if cfg.online:
        batch = online_ds.limit(cfg.val_rows).take_batch(cfg.val_rows, batch_format="numpy")
        return {c: batch[c] for c in ("pixels", "input_ids")}
    from sd_reference import storage
    from sd_reference.preprocess import load_manifest

    manifest, root = load_manifest(cfg.data)
    files = [storage.join(root, f["path"]) for f in manifest["files"]]
    return parquet_rows(files, ["latents", "text_emb"], cfg.val_rows, filesystem=storage.filesystem)


def worker_rows(rows_ref: Any) -> dict[str, torch.Tensor] | None:
    """Worker side: the driver's validation rows as tensors (None when validation is off)."""
    if rows_ref is None:
        return None
    import ray

    return {c: torch.from_numpy(np.asarray(v)) for c, v in ray.get(rows_ref).items()}


def rank_share(batch: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """This rank's equal slice of the validation rows (the remainder is dropped: equal work per rank)."""
    n = len(next(iter(batch.values()))) // world
    return {k: v[rank * n:(rank + 1) * n] for k, v in batch.items()}


def spread_timesteps(first_row: int, n: int, total_rows: int, num_timesteps: int) -> torch.Tensor:
    """Row j of `total_rows` gets timestep (j + 1/2) / total_rows of the way through the schedule."""
    j = torch.arange(first_row, first_row + n, dtype=torch.float64)
    return ((j + 0.5) * num_timesteps / total_rows).long().clamp_(0, num_timesteps - 1)


class ValidationLoss:
    """The training objective on this rank's validation rows, with noise and timesteps drawn once."""

    def __init__(self, worker: Worker, rows: dict[str, torch.Tensor], seed: int) -> None:
        self.worker = worker
        n = len(next(iter(rows.values())))
        if n == 0:
            raise ValueError("no validation rows for this rank (raise --val-rows)")
        gen = torch.Generator(device=worker.device).manual_seed(seed + 7919 * (worker.rank + 1))
        timer = metrics.Timer("sd.train.validation")
        self.latents, self.text = worker.inputs(rows, gen, timer)  # online: encoded once here
        self.noise = torch.randn(self.latents.shape, generator=gen, device=worker.device)
        total = n * worker.world
        self.timesteps = spread_timesteps(worker.rank * n, n, total, worker.schedule.num_timesteps).to(worker.device)
        self.micro = int(worker.cfg.batch_size or 1)

    @torch.no_grad()
    def loss(self) -> float:
        """Mean loss over every rank's rows (collective)."""
        total = torch.zeros(2, device=self.worker.device)
        for start in range(0, len(self.latents), self.micro):
            part = slice(start, start + self.micro)
            loss = self.worker.objective(self.latents[part], self.text[part], self.noise[part], self.timesteps[part])
            rows = self.latents[part].shape[0]
            total += torch.stack([loss.float() * rows, torch.tensor(float(rows), device=total.device)])
        if dist.is_initialized():
            dist.all_reduce(total)
        summed, rows_all = total.tolist()
        return summed / rows_all


class Evaluation:
    """Runs the validation loss and the sample grid when their step comes; returns the log record."""

    def __init__(self, worker: Worker, val_rows: dict[str, torch.Tensor] | None, out_dir: str) -> None:
        from sd_reference.grid import SampleGrid

        cfg = worker.cfg
        self.val_every, self.sample_every = cfg.val_every, cfg.sample_every
        self.val = ValidationLoss(worker, rank_share(val_rows, worker.rank, worker.world), cfg.seed) \
            if self.val_every and val_rows is not None else None
        self.grid = SampleGrid(worker, out_dir) if self.sample_every else None

    def due(self, step: int) -> bool:
        return bool((self.val and step % self.val_every == 0) or (self.grid and step % self.sample_every == 0))

    def run(self, step: int) -> dict[str, Any]:
        start = time.perf_counter()
        record: dict[str, Any] = {"event": "validation", "step": step}
        if self.val is not None and step % self.val_every == 0:
            record["val_loss"] = self.val.loss()
        if self.grid is not None and step % self.sample_every == 0:
            record["grid"] = self.grid.render(step)
        record["seconds"] = round(time.perf_counter() - start, 3)
        return record
