"""Checkpoints in the training loop: saved in the background, reported to Ray Train when every rank is done.

`Saver.start` copies this rank's shards to CPU memory (the only part that stalls the
step loop) and lets DCP write them to a local directory in a background thread;
training goes on. `Control.exchange` runs once per step on a small gloo group of its
own (no device sync, never mixed with training collectives): it tells every rank
whether all ranks' writes are done (then each calls `Saver.report`, which hands the
directory to `ray.train.report` with an asynchronous upload) and whether any rank
got SIGTERM. `ray.train.report` is a barrier, so every rank reports the same
checkpoint at the same step. With `asynchronous=False` a save writes and uploads
before the loop continues (the behaviour before async saves, and what preemption
and the final step use).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from sd_reference import checkpoint


class Control:
    """Per-step flags agreed across ranks: did any rank get SIGTERM, are all ranks' saves written."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo") if dist.is_initialized() else None

    def exchange(self, sigterm: bool, saved: bool) -> tuple[bool, bool]:
        """(any rank got SIGTERM, every rank's pending save is written)."""
        flags = torch.tensor([int(sigterm), int(not saved)], dtype=torch.int32)
        if self.group is not None:
            dist.all_reduce(flags, group=self.group)
        return bool(flags[0] > 0), bool(flags[1] == 0)


@dataclass
class Pending:
    step: int
    local: Path
    train_state: dict[str, Any]
    future: Future[Any] | None
    started: float  # perf_counter when the save began
    stage_s: float  # the loop's stall to start it: staging (background) or the whole write (synchronous)


class Saver:
    """One rank's checkpoint saves: at most one in flight."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: Any, rank: int,
                 asynchronous: bool = True) -> None:
        self.model, self.optimizer, self.ema, self.rank = model, optimizer, ema, rank
        self.asynchronous = asynchronous
        # DCP's background thread runs collectives: a gloo group that nothing else uses.
        self.group = dist.new_group(backend="gloo") if dist.is_initialized() and asynchronous else None
        self.pending: Pending | None = None

    def written(self) -> bool:
        """This rank has nothing in flight (no save, or its write finished)."""
        return self.pending is None or self.pending.future is None or self.pending.future.done()

    def start(self, step: int, train_state: dict[str, Any], blocking: bool = False) -> list[dict[str, Any]]:
        """Collective: begin saving the current state; returns the records of the checkpoints
        reported meanwhile (a save still in flight; this one when blocking or synchronous)."""
        records = [self.report()] if self.pending is not None else []  # one save in flight at a time
        t0 = time.perf_counter()
        local = Path(tempfile.mkdtemp(prefix=f"sd-ckpt-r{self.rank}-"))
        future = None
        if self.asynchronous and not blocking:
            future = checkpoint.start_save(local, self.model, self.optimizer, self.ema, self.group)
        else:
            checkpoint.save(local, self.model, self.optimizer, self.ema, train_state)
        self.pending = Pending(step, local, train_state, future, t0, time.perf_counter() - t0)
        if future is None:
            records.append(self.report())
        return records

    def report(self) -> dict[str, Any]:
        """Collective (a barrier in Ray Train): report the pending save; returns its log record."""
        import ray.train
        from ray.train import CheckpointUploadMode

        pending = self.pending
        assert pending is not None
        t0 = time.perf_counter()
        if pending.future is not None:
            pending.future.result()  # done already unless finish() waits for it; raises a failed write
            checkpoint.write_train_state(pending.local, pending.train_state)
        write_s = time.perf_counter() - pending.started
        mode = CheckpointUploadMode.ASYNC if pending.future is not None else CheckpointUploadMode.SYNC
        try:
            ray.train.report(
                {"step": pending.step, "loss": pending.train_state.get("loss")},
                checkpoint=ray.train.Checkpoint.from_directory(str(pending.local)),
                checkpoint_dir_name=checkpoint.dir_name(pending.step),
                checkpoint_upload_mode=mode,  # ASYNC uploads in Ray's thread pool, then deletes the directory
            )
        finally:
            if mode == CheckpointUploadMode.SYNC:
                shutil.rmtree(pending.local, ignore_errors=True)
        self.pending = None
        report_s = time.perf_counter() - t0
        return {"event": "checkpoint", "step": pending.step, "fingerprint": pending.train_state.get("fingerprint"),
                "seconds": round(pending.stage_s + report_s, 4),  # what the step loop stood still for
                "stage_s": round(pending.stage_s, 4), "report_s": round(report_s, 4), "write_s": round(write_s, 4),
                "asynchronous": mode == CheckpointUploadMode.ASYNC}

    def finish(self) -> dict[str, Any] | None:
        """Collective: wait for the pending write (if any) and report it."""
        if self.pending is None:
            return None
        return self.report()
