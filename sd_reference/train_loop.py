"""The Ray Train worker: one UNet training step after another, checkpointing, resuming.

Runs inside each Ray Train worker. Per step: wait for data, (online: encode
images and captions), forward/backward, clip, AdamW with warmup, EMA update;
every N steps a sharded DCP checkpoint is saved in the background and reported to
Ray Train (saver.py). On a restart `ray.train.get_checkpoint()` brings back the
UNet, optimizer, EMA, step and data position. A SIGTERM becomes a checkpoint at the
next step boundary (preemption.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from sd_reference import checkpoint, device, metrics, optim, parallel, preemption, storage
from sd_reference.config import TrainConfig
from sd_reference.diffusion import (
    NoiseSchedule,
    caption_dropout,
    dropout_mask,
    lr_at,
    step_generator,
)
from sd_reference.ema import EMA, ema_decay_at
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
from sd_reference.sampler import Position
from sd_reference.saver import Control, Saver
from sd_reference.step_stats import StepReporter

FAILURE_MARKER = ".failure_injected"
SIGTERM_MARKER = ".sigterm_injected"


class JsonLog:
    """Rank 0's training log: records go to the driver's RunLog actor (runlog.py), which stores them."""

    def __init__(self, actor: Any | None) -> None:
        self.actor = actor

    def write(self, record: dict[str, Any] | None) -> None:
        if self.actor is not None and record is not None:
            self.actor.write.remote(record)  # ordered: one caller's actor calls run in order

    def flush(self) -> None:
        import ray

        if self.actor is not None:
            ray.get(self.actor.flush.remote())


class Worker:
    """Model, optimizer, EMA and objective of one rank."""

    def __init__(
        self, cfg: TrainConfig, spec: ComponentsSpec, uncond_path: str | None,
        rank: int = 0, world: int = 1, local_rank: int = 0,
    ) -> None:
        self.cfg, self.spec = cfg, spec
        self.rank, self.world = rank, world
        self.device = device.pick(cfg.use_gpu, local_rank)
        device.enable_tf32(self.device, cfg.tf32)
        self.bf16 = self.device.type == "cuda"
        unet = build_unet(spec, cfg.seed)
        if cfg.grad_checkpointing:
            unet.enable_gradient_checkpointing()  # recompute block activations in backward: less memory
        self.latent_shape = (int(spec.unet.get("in_channels", 4)), int(spec.unet["sample_size"]), int(spec.unet["sample_size"]))
        self.model = parallel.wrap(unet, cfg.strategy, cfg.fsdp_mode, self.device, self.bf16 and cfg.strategy == "fsdp")
        if cfg.compile:
            self.model.compile(dynamic=False)  # fixed batch shapes (drop_last); dynamic shapes trip inductor here
        self.optimizer = optim.adamw(self.model.parameters(), cfg.lr or 1e-4, cfg.weight_decay, cfg.optimizer,
                                     self.device.type)
        self.ema = EMA(parallel.named_params(self.model))
        self.schedule = NoiseSchedule(load_scheduler_config(spec), cfg.prediction_type)
        self.vae = self.text_encoder = None
        self.uncond: torch.Tensor | None
        if cfg.online:
            self.vae, self.text_encoder = load_encoders(spec, str(self.device))
            ids = tokenize(load_tokenizer(spec), [""])
            self.uncond = encode_text(self.text_encoder, ids)[0].float()
        else:  # offline: the empty prompt's embedding was computed by preprocess
            self.uncond = _load_npy(uncond_path).to(self.device) if uncond_path else None
        self.step = 0
        self.position: Position | None = None  # in the offline data; saved with every checkpoint

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
            return (batch["latents"].to(self.device, non_blocking=True).float(),
                    batch["text_emb"].to(self.device, non_blocking=True).float())
        with timer.timed("encode"), torch.autocast("cuda", torch.bfloat16, enabled=self.bf16):
            latents = encode_images(self.vae, batch["pixels"], gen).float()
            text = encode_text(self.text_encoder, batch["input_ids"]).float()
        return latents, text

    def predict(self, noisy: torch.Tensor, timesteps: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """The UNet's prediction (bf16 on GPU: FSDP2 casts through its policy, DDP through autocast)."""
        autocast = self.bf16 and self.cfg.strategy == "ddp"
        with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
            return self.model(noisy, timesteps, encoder_hidden_states=text).sample

    def objective(self, latents: torch.Tensor, text: torch.Tensor, noise: torch.Tensor,
                  timesteps: torch.Tensor) -> torch.Tensor:
        """The training loss of one micro-batch with the given noise and timesteps."""
        noisy, target = self.schedule.noisy_and_target(latents, noise, timesteps)
        return self.schedule.loss(self.predict(noisy, timesteps, text), target, timesteps, self.cfg.snr_gamma)

    def step_on_device(self, batch: dict[str, torch.Tensor], timer: metrics.Timer) -> tuple[torch.Tensor, float]:
        """One optimizer step over `batch` (grad_accum micro-batches); [loss, grad_norm] stay on the device.

        Noise, timesteps and caption dropout are drawn for the whole batch on the device,
        then cut per micro-batch: N micro-batches of B see what one batch of N x B would.
        Only the last micro-batch's backward reduces gradients across ranks.
        """
        cfg, accum = self.cfg, self.cfg.grad_accum
        rows = len(next(iter(batch.values())))
        if rows % accum:
            raise ValueError(f"a batch of {rows} rows does not split into {accum} equal micro-batches")
        gen = step_generator(cfg.seed, self.step, self.rank, self.device)
        noise = torch.randn((rows, *self.latent_shape), generator=gen, device=self.device)
        timesteps = torch.randint(0, self.schedule.num_timesteps, (rows,), generator=gen, device=self.device)
        drop = dropout_mask(rows, cfg.caption_dropout, gen) if self.uncond is not None else None
        micro = rows // accum
        total = torch.zeros((), device=self.device)
        for i in range(accum):
            part = slice(i * micro, (i + 1) * micro)
            latents, text = self.inputs({k: v[part] for k, v in batch.items()}, gen, timer)
            if self.uncond is not None:
                text = caption_dropout(text, self.uncond, None if drop is None else drop[part])
            with timer.timed("forward_backward"), parallel.gradient_sync(self.model, i == accum - 1):
                loss = self.objective(latents, text, noise[part], timesteps[part]) / accum
                loss.backward()
            total += loss.detach().float()
        lr = lr_at(self.step, cfg.lr or 1e-4, cfg.warmup_steps or 0)
        with timer.timed("optimizer"):
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.ema.update(parallel.named_params(self.model), ema_decay_at(self.step, cfg.ema_decay or 0.0))
        self.step += 1
        # On the training device: NCCL reduces CUDA tensors only.
        return torch.stack([total, _full(norm).detach().float().to(self.device)]), lr

    def mean_over_ranks(self, stats: torch.Tensor) -> torch.Tensor:
        if dist.is_initialized():
            dist.all_reduce(stats)
            stats /= self.world
        return stats

    def train_step(self, batch: dict[str, torch.Tensor], timer: metrics.Timer) -> dict[str, float]:
        """One step, read back at once (a host sync): for benchmarks and tests; the loop batches read-backs."""
        stats, lr = self.step_on_device(batch, timer)
        loss_mean, norm_mean = self.mean_over_ranks(stats).tolist()
        return {"loss": loss_mean, "grad_norm": norm_mean, "lr": lr}

    def train_state(self, loss: float | None, fingerprint: Any) -> dict[str, Any]:
        """What train_state.json records beside the shards: step, data position, run facts."""
        return {"step": self.step, "world_size": self.world, "strategy": self.cfg.strategy, "loss": loss,
                "fingerprint": fingerprint, "seed": self.cfg.seed,
                "sampler": self.position.to_json() if self.position is not None else None}

    def restore(self) -> dict[str, Any] | None:
        import ray.train

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            return None
        with ckpt.as_directory() as d:
            state = checkpoint.load(Path(d), self.model, self.optimizer, self.ema)
        optim.reapply(self.optimizer, self.cfg.optimizer, self.device.type)  # --optimizer wins over the saved flags
        self.step = int(state["step"])
        if state.get("sampler") and not self.cfg.online:
            self.position = Position.from_json(state["sampler"])
        return state


def _load_npy(uri: str) -> torch.Tensor:
    import io

    return torch.from_numpy(np.load(io.BytesIO(storage.read_bytes(uri)))).float()


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _maybe_inject(cfg: TrainConfig, worker: Worker, run_uri: str) -> None:
    """Kill (SIGKILL) or preempt (SIGTERM) the last rank, once per run: a marker in the run directory survives restarts."""
    if worker.rank != worker.world - 1:
        return
    kill = cfg.inject_failure_at_step == worker.step + 1
    if not kill and cfg.inject_sigterm_at_step != worker.step + 1:
        return
    marker = storage.join(run_uri, FAILURE_MARKER if kill else SIGTERM_MARKER)
    if storage.exists(marker):
        return
    storage.write_text(marker, json.dumps({"step": worker.step + 1, "rank": worker.rank, "pid": os.getpid()}))
    if not kill:
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler would; the next step boundary saves and stops
        for _ in range(100):  # the handler runs on the main thread: let it, so the next step sees the flag
            if preemption.requested():
                break
            time.sleep(0.05)
        return
    # Ray Train V2's controller collects reports on its health-check poll: a worker
    # dying right after ray.train.report can lose that checkpoint, and the run then
    # resumes from the one before. Waiting out one poll makes the demo's resume
    # point the latest checkpoint (the race itself is real and documented).
    time.sleep(float(os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2")) + 1.5)
    os.kill(os.getpid(), signal.SIGKILL)  # an abrupt death, as a lost node or OOM kill would be


@dataclass
class StepBatch:
    tensors: dict[str, torch.Tensor]
    keys: list[str] | None  # sample keys (offline data)
    position: Position | None  # the data position after this batch (offline data)


def _offline_batches(cfg: TrainConfig, worker: Worker, config: dict[str, Any]) -> Iterator[StepBatch]:
    """The sampler's order from the run's position on (feed.py): the same samples on every attempt."""
    from sd_reference.feed import Feed, Shard

    shards = [Shard.from_json(s) for s in config["shards"]]
    position = worker.position or Position()
    feed = Feed(shards, cfg.seed, position, cfg.rows_per_step(), worker.rank, worker.world,
                window_blocks=cfg.shuffle_window, cache_mib=cfg.cache_data_mib)
    try:
        while True:
            batch = feed.next()
            yield StepBatch(batch.tensors, batch.keys, batch.position)
    finally:
        feed.close()


def _online_batches(cfg: TrainConfig, worker: Worker) -> Iterator[StepBatch]:
    """Ray Data's streaming split of the raw images, epoch after epoch (order not saved: see the docs)."""
    import ray.train

    shard = ray.train.get_dataset_shard("train")
    rows = cfg.rows_per_step()
    while True:
        batches = 0
        for batch in shard.iter_torch_batches(batch_size=rows, drop_last=True,
                                              local_shuffle_buffer_size=cfg.shuffle_buffer or None,
                                              local_shuffle_seed=cfg.seed + worker.step):
            batches += 1
            yield StepBatch({c: batch[c] for c in ("pixels", "input_ids")}, None, None)
        if batches == 0:
            raise RuntimeError(
                f"the dataset gave no batch of {rows} per worker: it needs at least "
                f"{rows * worker.world} rows for {worker.world} workers (lower --batch-size or --grad-accum)"
            )


def _gathered(keys: list[str] | None, group: Any, world: int) -> list[list[str]] | None:
    """Every rank's sample keys of this step (rank order), for --log-samples."""
    if keys is None:
        return None
    if group is None:
        return [keys]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, keys, group=group)
    return out


def _rank_pids(group: Any, world: int) -> list[dict[str, Any]]:
    """Which process and node each rank is (collective once per attempt; the log's start/resume records)."""
    import ray

    mine = {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()[:12]}
    if group is None:
        return [mine]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, mine, group=group)
    return out


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point; `config` carries the TrainConfig, components, paths and the log actor."""
    import ray.train

    from sd_reference.validation import Evaluation, worker_rows

    metrics.setup()
    cfg = TrainConfig(**config["train"])
    spec = ComponentsSpec.from_json(config["components"])
    run_uri = config["run_dir"]
    ctx = ray.train.get_context()
    attrs = {"train.run.id": cfg.name, "ray.train.world_rank": ctx.get_world_rank()}
    with metrics.span("sd.train.setup", attrs):
        worker = Worker(cfg, spec, config.get("uncond_path"), ctx.get_world_rank(), ctx.get_world_size(),
                        ctx.get_local_rank())
    log = JsonLog(config.get("log_actor") if worker.rank == 0 else None)
    steps = int(cfg.steps or 1)
    control = Control()
    saver = Saver(worker.model, worker.optimizer, worker.ema, worker.rank, asynchronous=cfg.async_save)

    with metrics.span("sd.train.restore", attrs):
        restored = worker.restore()
    reporter = StepReporter(worker, log.write, counted=worker.rank == 0)
    ranks = _rank_pids(control.group, worker.world)
    if restored is not None:
        fp = worker.state_fingerprint() if cfg.fingerprint else None
        log.write({"event": "resume", "step": worker.step, "world_size": worker.world, "ranks": ranks,
                   "position": worker.position.to_json() if worker.position else None, "fingerprint": fp})
    else:
        log.write({"event": "start", "step": 0, "world_size": worker.world, "strategy": cfg.strategy,
                   "ranks": ranks, **reporter.start_fields()})

    evaluation = None
    if cfg.val_every or cfg.sample_every:
        evaluation = Evaluation(worker, worker_rows(config.get("val_rows")), run_uri)
    sync = device.synchronizer(worker.device) if cfg.sync_timings else None
    batches = _online_batches(cfg, worker) if cfg.online else _offline_batches(cfg, worker, config)
    last: dict[str, Any] = {}
    saved_step = worker.step if restored is not None else -1
    try:
        while worker.step < steps:
            timer = metrics.Timer("sd.train", attrs, sync)
            t0 = time.perf_counter()
            reporter.start_step()
            with timer.timed("data_wait"):
                batch = next(batches)
            if saver.pending is not None and cfg.inject_failure_at_step == worker.step + 1:
                log.write(saver.finish())  # the injected kill below must find the latest checkpoint reported
            preempted, written = control.exchange(preemption.requested(), saver.written())
            if written and saver.pending is not None:
                log.write(saver.report())
            if preempted:
                _stop_for_preemption(worker, saver, reporter, log, last, saved_step)
            _maybe_inject(cfg, worker, run_uri)
            if cfg.breakpoint_at_step == worker.step + 1 and worker.rank == 0:
                breakpoint()  # with RAY_DEBUG=1, raydbg pauses this Train worker for an attach
            with metrics.span("sd.train.step", {**attrs, "train.step": worker.step + 1}):
                stats, lr = worker.step_on_device(batch.tensors, timer)
            worker.position = batch.position
            samples = _gathered(batch.keys, control.group, worker.world) if cfg.log_samples else None
            if cfg.min_step_seconds:
                time.sleep(max(0.0, cfg.min_step_seconds - (time.perf_counter() - t0)))
            reporter.add(worker.step, stats, lr, timer.seconds, {"samples": samples} if samples is not None else None)
            checkpoint_due = worker.step % cfg.checkpoint_every == 0 or worker.step == steps
            evaluation_due = evaluation is not None and evaluation.due(worker.step)
            if len(reporter.window) >= cfg.log_every or checkpoint_due or evaluation_due:
                last = reporter.flush() or last
            if evaluation is not None and evaluation_due:
                log.write(evaluation.run(worker.step))
            if checkpoint_due:
                fp = worker.state_fingerprint() if cfg.fingerprint else None
                for record in saver.start(worker.step, worker.train_state(last.get("loss"), fp),
                                          blocking=worker.step == steps):
                    log.write(record)
                saved_step = worker.step
        last = reporter.flush() or last
        log.write(saver.finish())
        log.write({"event": "end", "step": worker.step, "loss": last.get("loss")})
    finally:
        batches.close()  # type: ignore[attr-defined]  # a generator: stops the feed's thread
        log.flush()


def _stop_for_preemption(worker: Worker, saver: Saver, reporter: StepReporter, log: JsonLog,
                         last: dict[str, Any], saved_step: int) -> None:
    """Some rank got SIGTERM: make sure the current step is checkpointed and reported, then stop every rank."""
    last = reporter.flush() or last  # collective, like everything here: every rank took the same flags
    log.write(saver.finish())
    if saved_step != worker.step:
        fp = worker.state_fingerprint() if worker.cfg.fingerprint else None
        for record in saver.start(worker.step, worker.train_state(last.get("loss"), fp), blocking=True):
            log.write(record)
    log.write({"event": "preempted", "step": worker.step, "signal": "SIGTERM"})
    log.flush()
    raise preemption.Preempted(f"SIGTERM: checkpoint at step {worker.step} reported; Ray Train restarts from it")
