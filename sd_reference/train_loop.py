"""The Ray Train worker: one UNet training step after another, checkpointing, resuming.

Runs inside each Ray Train worker. Per step: wait for data, (online: encode
images and captions), forward/backward, clip, AdamW with warmup, EMA update;
every N steps a sharded DCP checkpoint is reported to Ray Train. On a restart
`ray.train.get_checkpoint()` brings back the UNet, optimizer, EMA and step.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from sd_reference import checkpoint, metrics, parallel
from sd_reference.config import TrainConfig
from sd_reference.diffusion import (
    EMA,
    NoiseSchedule,
    caption_dropout,
    ema_decay_at,
    lr_at,
    step_generator,
)
from sd_reference.models import (
    ComponentsSpec,
    build_unet,
    encode_images,
    encode_text,
    load_encoders,
    load_scheduler_config,
    load_tokenizer,
    tokenize,
)

FAILURE_MARKER = ".failure_injected"


class JsonLog:
    """Append-only JSON-lines training log, written by rank 0 only."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(dict(record, time=round(time.time(), 3))) + "\n")


class Worker:
    """Model, optimizer, EMA and objective of one rank."""

    def __init__(
        self, cfg: TrainConfig, spec: ComponentsSpec, uncond_path: str | None,
        rank: int = 0, world: int = 1, local_rank: int = 0,
    ) -> None:
        self.cfg, self.spec = cfg, spec
        self.rank, self.world = rank, world
        cuda = torch.cuda.is_available() and cfg.use_gpu is not False
        self.device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)  # NCCL object collectives use the current device
        self.bf16 = self.device.type == "cuda"
        unet = build_unet(spec, cfg.seed)
        self.model = parallel.wrap(unet, cfg.strategy, cfg.fsdp_mode, self.device, self.bf16 and cfg.strategy == "fsdp")
        if cfg.compile:
            self.model.compile(dynamic=False)  # fixed batch shapes (drop_last); dynamic shapes trip inductor here
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr or 1e-4, weight_decay=cfg.weight_decay)
        self.ema = EMA(parallel.named_params(self.model))
        self.schedule = NoiseSchedule(load_scheduler_config(spec), cfg.prediction_type)
        self.vae = self.text_encoder = None
        self.uncond: torch.Tensor | None
        if cfg.online:
            self.vae, self.text_encoder = load_encoders(spec, str(self.device))
            ids = tokenize(load_tokenizer(spec), [""])
            self.uncond = encode_text(self.text_encoder, ids)[0].float()
        else:  # offline: the empty prompt's embedding was computed by preprocess
            self.uncond = torch.from_numpy(np.load(uncond_path)).float() if uncond_path else None
        self.step = 0

    def state_fingerprint(self) -> dict[str, dict[str, str]]:
        """Every rank's state hashes, gathered (collective)."""
        mine = checkpoint.fingerprint(self.model, self.optimizer, self.ema)
        if not dist.is_initialized():
            return {"0": mine}
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, mine)
        return {str(r): fp for r, fp in enumerate(gathered)}

    def inputs(self, batch: dict[str, torch.Tensor], gen: torch.Generator, timer: metrics.Timer) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.cfg.online:
            return batch["latents"].to(self.device).float(), batch["text_emb"].to(self.device).float()
        with timer.timed("encode"), torch.autocast("cuda", torch.bfloat16, enabled=self.bf16):
            latents = encode_images(self.vae, batch["pixels"], gen).float()
            text = encode_text(self.text_encoder, batch["input_ids"]).float()
        return latents, text

    def train_step(self, batch: dict[str, torch.Tensor], timer: metrics.Timer) -> dict[str, float]:
        cfg = self.cfg
        gen = step_generator(cfg.seed, self.step, self.rank)
        latents, text = self.inputs(batch, gen, timer)
        if self.uncond is not None:
            text = caption_dropout(text, self.uncond, cfg.caption_dropout, gen)
        bsz = latents.shape[0]
        noise = torch.randn(latents.shape, generator=gen).to(self.device)
        timesteps = torch.randint(0, self.schedule.num_timesteps, (bsz,), generator=gen).to(self.device)
        noisy, target = self.schedule.noisy_and_target(latents, noise, timesteps)
        lr = lr_at(self.step, cfg.lr or 1e-4, cfg.warmup_steps or 0)
        with timer.timed("forward_backward"):
            autocast = self.bf16 and cfg.strategy == "ddp"  # FSDP2 casts via its MixedPrecisionPolicy
            with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
                pred = self.model(noisy, timesteps, encoder_hidden_states=text).sample
            loss = self.schedule.loss(pred, target, timesteps, cfg.snr_gamma)
            loss.backward()
        with timer.timed("optimizer"):
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.ema.update(parallel.named_params(self.model), ema_decay_at(self.step, cfg.ema_decay or 0.0))
        self.step += 1
        # On the training device: NCCL reduces CUDA tensors only.
        stats = torch.stack([loss.detach().float(), _full(norm).detach().float().to(self.device)])
        if dist.is_initialized():
            dist.all_reduce(stats)
            stats /= self.world
        loss_mean, norm_mean = stats.tolist()
        return {"loss": loss_mean, "grad_norm": norm_mean, "lr": lr}

    def save(self, extra: dict[str, Any]) -> None:
        """Write this rank's shards locally and report them; Ray Train merges them in storage."""
        import ray.train

        local = Path(tempfile.mkdtemp(prefix=f"sd-ckpt-r{self.rank}-"))
        try:
            state = dict(extra, step=self.step, world_size=self.world, strategy=self.cfg.strategy)
            checkpoint.save(local, self.model, self.optimizer, self.ema, state)
            ray.train.report(
                {"step": self.step, "loss": extra.get("loss")},
                checkpoint=ray.train.Checkpoint.from_directory(str(local)),
                checkpoint_dir_name=checkpoint.dir_name(self.step),
            )
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def restore(self) -> dict[str, Any] | None:
        import ray.train

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            return None
        with ckpt.as_directory() as d:
            state = checkpoint.load(Path(d), self.model, self.optimizer, self.ema)
        self.step = int(state["step"])
        return state


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _maybe_inject_failure(cfg: TrainConfig, worker: Worker, run_dir: Path) -> None:
    """Kill the last rank, once per run (a marker in the run directory survives restarts)."""
    if cfg.inject_failure_at_step != worker.step + 1 or worker.rank != worker.world - 1:
        return
    marker = run_dir / FAILURE_MARKER
    if marker.exists():
        return
    marker.write_text(json.dumps({"step": worker.step + 1, "rank": worker.rank, "pid": os.getpid()}))
    # Ray Train V2's controller collects reports on its health-check poll: a worker
    # dying right after ray.train.report can lose that checkpoint, and the run then
    # resumes from the one before. Waiting out one poll makes the demo's resume
    # point the latest checkpoint (the race itself is real and documented).
    time.sleep(float(os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2")) + 1.5)
    os.kill(os.getpid(), signal.SIGKILL)  # an abrupt death, as a lost node or OOM kill would be


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point; `config` carries the TrainConfig, components and paths as JSON."""
    import ray.train

    metrics.setup()
    cfg = TrainConfig(**config["train"])
    spec = ComponentsSpec.from_json(config["components"])
    run_dir = Path(config["run_dir"])
    ctx = ray.train.get_context()
    attrs = {"train.run.id": cfg.name, "ray.train.world_rank": ctx.get_world_rank()}
    with metrics.span("sd.train.setup", attrs):
        worker = Worker(cfg, spec, config.get("uncond_path"), ctx.get_world_rank(), ctx.get_world_size(),
                        ctx.get_local_rank())
    log = JsonLog(config["log_path"] if worker.rank == 0 else None)
    steps, bsz = int(cfg.steps or 1), int(cfg.batch_size or 1)

    with metrics.span("sd.train.restore", attrs):
        restored = worker.restore()
    if restored is not None:
        fp = worker.state_fingerprint() if cfg.fingerprint else None
        log.write({"event": "resume", "step": worker.step, "fingerprint": fp})
    else:
        log.write({"event": "start", "step": 0, "world_size": worker.world, "strategy": cfg.strategy})

    columns = ["pixels", "input_ids"] if cfg.online else ["latents", "text_emb"]
    shard = ray.train.get_dataset_shard("train")
    last: dict[str, float] = {}
    while worker.step < steps:
        batches = 0
        timer = metrics.Timer("sd.train", attrs)
        t0 = time.perf_counter()
        iterator = shard.iter_torch_batches(
            batch_size=bsz, drop_last=True, local_shuffle_buffer_size=cfg.shuffle_buffer or None,
            local_shuffle_seed=cfg.seed + worker.step,
        )
        with timer.timed("data_wait"):
            batch = next(iter_ := iter(iterator), None)
        while batch is not None and worker.step < steps:
            batches += 1
            _maybe_inject_failure(cfg, worker, run_dir)
            if cfg.breakpoint_at_step == worker.step + 1 and worker.rank == 0:
                breakpoint()  # with RAY_DEBUG=1, raydbg pauses this Train worker for an attach
            with metrics.span("sd.train.step", {**attrs, "train.step": worker.step + 1}):
                last = worker.train_step({c: batch[c] for c in columns}, timer)
            step_time = time.perf_counter() - t0
            images_per_s = bsz * worker.world / step_time
            metrics.histogram("sd.train.step.duration", step_time)
            metrics.histogram("sd.train.loss", last["loss"])
            metrics.histogram("sd.train.images_per_second", images_per_s)
            log.write({"step": worker.step, **last, "images_per_s": round(images_per_s, 3), "step_s": round(step_time, 4),
                       "timings": {k: round(v, 4) for k, v in timer.seconds.items()}})
            if worker.step % cfg.checkpoint_every == 0 or worker.step == steps:
                with timer.timed("checkpoint"):
                    fp = worker.state_fingerprint() if cfg.fingerprint else None
                    worker.save({"loss": last["loss"], "fingerprint": fp})
                log.write({"event": "checkpoint", "step": worker.step, "fingerprint": fp,
                           "seconds": round(timer.seconds["checkpoint"], 3)})
            timer = metrics.Timer("sd.train", attrs)
            t0 = time.perf_counter()
            if worker.step < steps:
                with timer.timed("data_wait"):
                    batch = next(iter_, None)
        if batches == 0:
            raise RuntimeError(
                f"the dataset gave no batch of {bsz} per worker: it needs at least "
                f"{bsz * worker.world} rows for {worker.world} workers (lower --batch-size)"
            )
    log.write({"event": "end", "step": worker.step, "loss": last.get("loss")})
