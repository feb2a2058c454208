"""TrainConfig: every knob of a training run, with the checks that turn bad values into one-line errors."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sd_reference.diffusion import PREDICTION_TYPES
from sd_reference.errors import UserError
from sd_reference.optim import OPTIMIZER_IMPLS
from sd_reference.parallel import FSDP_MODES, STRATEGIES

PLACEMENTS = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")  # Ray's placement group strategies


def parse_workers(text: str) -> tuple[int | None, int]:
    """`--workers N` or `--workers MIN:MAX` -> (min or None, max); UserError when malformed."""
    lo, sep, hi = text.partition(":")
    try:
        values = (int(lo), int(hi)) if sep else (None, int(text))
    except ValueError:
        raise UserError(f"--workers {text}: give a count (2) or a range MIN:MAX (1:4)") from None
    if values[1] < 1 or (values[0] is not None and not 1 <= values[0] <= values[1]):
        raise UserError(f"--workers {text}: counts must be at least 1 and MIN <= MAX")
    return values


@dataclass
class TrainConfig:
    data: str = "sd_work/latents"
    online: bool = False
    preset: str = "tiny"
    resolution: int | None = None
    pretrained: str | None = None
    pretrained_unet: bool = False
    storage_path: str = "sd_work/runs"  # a path or URI (s3://...): every node must reach it
    shared_fs: bool = False  # local paths are on a file system every node mounts
    name: str | None = None
    workers: int = 2  # the most workers (all of them when min_workers is None)
    min_workers: int | None = None  # elastic: Ray Train runs with any count in [min_workers, workers]
    resize_check_s: float = 60.0  # elastic: how often Ray Train looks for room to grow
    placement: str = "PACK"  # Ray placement group strategy of the workers
    cpus_per_worker: float = 1.0
    use_gpu: bool | None = None  # None: use GPUs when the cluster has them
    strategy: str = "fsdp"
    fsdp_mode: str = "full"
    steps: int | None = None
    batch_size: int | None = None  # per worker
    lr: float | None = None
    warmup_steps: int | None = None
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    prediction_type: str = "epsilon"
    snr_gamma: float = 0.0
    ema_decay: float | None = None
    caption_dropout: float = 0.1
    checkpoint_every: int = 100
    keep_checkpoints: int = 3
    max_failures: int = 3
    inject_failure_at_step: int | None = None
    inject_sigterm_at_step: int | None = None  # the last rank gets SIGTERM once (preemption demo/tests)
    async_save: bool = True  # checkpoints written in the background (DCP async_save)
    log_samples: bool = False  # every step's sample keys, all ranks, in the log (resume tests)
    min_step_seconds: float = 0.0  # slow steps down (elasticity demos and tests on a fast machine)
    breakpoint_at_step: int | None = None  # rank 0 calls breakpoint() there (raydbg demo)
    fingerprint: bool = False  # hash state at save/restore to prove an exact resume
    compile: bool = False
    seed: int = 0
    shuffle_buffer: int = 256  # online: Ray Data's local shuffle buffer
    shuffle_window: int = 8  # offline: row groups whose rows are shuffled together (sampler.py)
    cache_data_mib: int = 1024  # offline: latent row groups each worker keeps in memory
    export: bool = True
    export_dir: str | None = None
    # Training features for SD2-scale runs (docs/sd_reference.md, "Training features").
    grad_accum: int = 1  # micro-batches of batch_size per optimizer step
    grad_checkpointing: bool = False
    optimizer: str = "auto"  # AdamW: auto (fused where supported), fused, foreach, for-loop
    log_every: int = 1  # read the loss back (host sync) every N steps
    sync_timings: bool = False  # synchronise the device around each timed part
    tf32: bool = True  # float32 matmuls in TF32 on GPU
    val_every: int = 0  # validation loss every N steps (0: off)
    val_rows: int = 32
    sample_every: int = 0  # sample grid every N steps (0: off)

    def resolved(self) -> TrainConfig:
        """Fill preset defaults and validate; raises UserError on the first bad value."""
        from sd_reference.presets import get_preset

        preset = get_preset(self.preset, self.resolution)
        cfg = TrainConfig(**asdict(self))
        cfg.name = cfg.name or f"sd-{preset.name}"
        cfg.steps = cfg.steps if cfg.steps is not None else preset.steps
        cfg.batch_size = cfg.batch_size or preset.batch_size
        cfg.lr = cfg.lr if cfg.lr is not None else preset.lr
        cfg.warmup_steps = cfg.warmup_steps if cfg.warmup_steps is not None else preset.warmup_steps
        cfg.ema_decay = cfg.ema_decay if cfg.ema_decay is not None else preset.ema_decay
        checks = [
            (cfg.strategy in STRATEGIES, f"--strategy must be one of {', '.join(STRATEGIES)}"),
            (cfg.fsdp_mode in FSDP_MODES, f"--fsdp-mode must be one of {', '.join(FSDP_MODES)}"),
            (cfg.prediction_type in PREDICTION_TYPES, f"--prediction-type must be one of {', '.join(PREDICTION_TYPES)}"),
            (cfg.workers >= 1, "--workers must be at least 1"),
            (cfg.min_workers is None or 1 <= cfg.min_workers <= cfg.workers, "--workers MIN:MAX needs 1 <= MIN <= MAX"),
            (cfg.placement in PLACEMENTS, f"--placement must be one of {', '.join(PLACEMENTS)}"),
            (cfg.resize_check_s > 0, "--resize-check-s must be positive"),
            (cfg.shuffle_window >= 1, "--shuffle-window must be at least 1"),
            (cfg.min_step_seconds >= 0, "--min-step-seconds must be 0 or more"),
            (cfg.steps >= 1, "--steps must be at least 1"),
            (cfg.batch_size >= 1, "--batch-size must be at least 1"),
            (cfg.lr > 0, "--lr must be positive"),
            (0 <= cfg.caption_dropout < 1, "--caption-dropout must be in [0, 1)"),
            (0 <= cfg.ema_decay < 1, "--ema-decay must be in [0, 1)"),
            (cfg.checkpoint_every >= 1, "--checkpoint-every must be at least 1"),
            (cfg.max_failures >= 0, "--max-failures must be 0 or more"),
            (cfg.inject_failure_at_step is None or 1 <= cfg.inject_failure_at_step <= cfg.steps,
             "--inject-failure-at-step must be between 1 and --steps"),
            (cfg.inject_failure_at_step is None or cfg.max_failures >= 1,
             "--inject-failure-at-step needs --max-failures of at least 1 to resume"),
            (cfg.inject_sigterm_at_step is None or 1 <= cfg.inject_sigterm_at_step <= cfg.steps,
             "--inject-sigterm-at-step must be between 1 and --steps"),
            (cfg.inject_sigterm_at_step is None or cfg.max_failures >= 1,
             "--inject-sigterm-at-step needs --max-failures of at least 1 to resume"),
            (cfg.grad_accum >= 1, "--grad-accum must be at least 1"),
            (cfg.optimizer in OPTIMIZER_IMPLS, f"--optimizer must be one of {', '.join(OPTIMIZER_IMPLS)}"),
            (cfg.log_every >= 1, "--log-every must be at least 1"),
            (cfg.val_every >= 0 and cfg.sample_every >= 0, "--val-every and --sample-every must be 0 (off) or more"),
            (cfg.val_rows >= cfg.workers, "--val-rows must be at least --workers (each rank evaluates its share)"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)
        return cfg

    def num_workers(self) -> int | tuple[int, int]:
        """Ray Train's ScalingConfig(num_workers=...): a count, or (min, max) for an elastic run."""
        if self.min_workers is None or self.min_workers == self.workers:
            return self.workers
        return (self.min_workers, self.workers)

    def rows_per_step(self) -> int:
        """Rows one worker consumes per optimizer step (batch size x accumulation)."""
        return int(self.batch_size or 1) * self.grad_accum

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
