"""bench: offline (precomputed latents) vs online (encode in the loop), FSDP2 vs DDP, and learning.

Models are SD2-base with every width divided by --width-div (default 8), so the
UNet, VAE and text encoder keep SD2's proportions. Offline and online steps are
interleaved in one process so machine noise hits both alike; FSDP2 and DDP run as
real 2-worker Ray Train jobs on in-memory batches.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from sd_reference import ui
from sd_reference.config import TrainConfig
from sd_reference.models import (
    ComponentsSpec,
    encode_images,
    encode_text,
    prepare_components,
    tokenize,
)
from sd_reference.presets import Preset, get_preset, sd2_scaled
from sd_reference.synth import make_sample
from sd_reference.train_loop import Worker
from sd_reference.transforms import decode_resize_crop


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def synthetic_batches(spec: ComponentsSpec, worker: Worker, n: int, bsz: int) -> list[dict[str, torch.Tensor]]:
    """`n` batches of real synthetic images, with both online inputs and their precomputed latents."""
    from sd_reference.models import load_tokenizer

    tok = load_tokenizer(spec)
    out = []
    for b in range(n):
        samples = [make_sample(1234, b * bsz + i) for i in range(bsz)]
        pixels = torch.stack([torch.from_numpy(decode_resize_crop(s.jpg, spec.resolution)) for s in samples])
        ids = tokenize(tok, [s.caption or "" for s in samples])
        out.append({"pixels": pixels, "input_ids": ids})
    if worker.vae is not None:
        for batch in out:
            batch["latents"] = encode_images(worker.vae, batch["pixels"], torch.Generator().manual_seed(0)).half()
            batch["text_emb"] = encode_text(worker.text_encoder, batch["input_ids"]).half()
    return out


def bench_online(preset: Preset, bsz: int, steps: int, workdir: Path) -> dict[str, Any]:
    """Images/s of the same UNet step with latents precomputed vs encoded in the loop."""
    spec = prepare_components(preset, None, str(workdir / "components"))
    cfg = TrainConfig(online=True, steps=10**6, batch_size=bsz, lr=1e-4, warmup_steps=0, ema_decay=0.999,
                      use_gpu=None)
    online = Worker(cfg, spec, None)
    offline = Worker(replace(cfg, online=False), spec, None)
    offline.uncond = online.uncond
    assert online.vae is not None and online.text_encoder is not None
    sizes = {"unet": _params(online.model), "vae": _params(online.vae), "text_encoder": _params(online.text_encoder)}
    batches = synthetic_batches(spec, online, 2, bsz)
    times: dict[str, list[float]] = {"offline": [], "online": []}
    from sd_reference.metrics import Timer

    with ui.progress() as bar:
        task = bar.add_task("offline vs online", total=2 * (steps + 1), info="")
        for i in range(steps + 1):  # step 0 warms up both
            for mode, worker in (("offline", offline), ("online", online)):
                batch = batches[i % len(batches)]
                start = time.perf_counter()
                worker.train_step(batch, Timer("bench"))
                if i > 0:
                    times[mode].append(time.perf_counter() - start)
                bar.advance(task)
    med = {m: statistics.median(v) for m, v in times.items()}
    return {
        "params": sizes,
        "resolution": preset.resolution,
        "batch_size": bsz,
        "steps": steps,
        "offline_images_per_s": round(bsz / med["offline"], 3),
        "online_images_per_s": round(bsz / med["online"], 3),
        "offline_over_online": round(med["online"] / med["offline"], 3),
    }


def _parallel_loop(config: dict[str, Any]) -> None:
    """Ray Train worker for the FSDP2/DDP comparison: in-memory batches, per-rank memory."""
    import ray.train
    import torch.distributed as dist

    from sd_reference import parallel
    from sd_reference.metrics import Timer

    ctx = ray.train.get_context()
    rss_before = _rss_bytes()
    cfg = TrainConfig(**config["train"])
    spec = ComponentsSpec.from_json(config["components"])
    worker = Worker(cfg, spec, config["uncond_path"], ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank())
    lat, txt = config["latent_shape"], config["text_shape"]
    gen = torch.Generator().manual_seed(ctx.get_world_rank())
    batch = {"latents": torch.randn([cfg.batch_size or 1, *lat], generator=gen),
             "text_emb": torch.randn([cfg.batch_size or 1, *txt], generator=gen)}
    times = []
    for i in range(int(cfg.steps or 1) + 1):
        start = time.perf_counter()
        worker.train_step(batch, Timer("bench"))
        if i > 0:
            times.append(time.perf_counter() - start)
    mine = {
        "state_bytes": parallel.local_state_bytes(worker.model, worker.optimizer),
        "peak_rss_growth_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before,
        "step_s": statistics.median(times),
    }
    gathered: list[Any] = [None] * ctx.get_world_size()
    dist.all_gather_object(gathered, mine)
    if ctx.get_world_rank() == 0:  # V2 keeps metrics only with checkpoints: hand them over in a file
        Path(config["result_path"]).write_text(json.dumps(gathered))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def bench_parallel(preset: Preset, bsz: int, steps: int, workdir: Path) -> dict[str, Any]:
    """2-worker Ray Train runs, FSDP2 vs DDP: model-state bytes and peak RSS growth per rank, images/s."""
    import numpy as np
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    spec = prepare_components(preset, None, str(workdir / "components"))
    uncond = workdir / "uncond.npy"
    np.save(uncond, np.zeros((77, preset.text_encoder["hidden_size"]), np.float32))
    out: dict[str, Any] = {}
    for strategy in ("fsdp", "ddp"):
        cfg = TrainConfig(strategy=strategy, steps=steps, batch_size=bsz, lr=1e-4, warmup_steps=0,
                          ema_decay=0.999, use_gpu=False)
        trainer = TorchTrainer(
            _parallel_loop,
            train_loop_config={"train": cfg.to_json(), "components": spec.to_json(), "uncond_path": str(uncond),
                               "result_path": str(workdir / f"{strategy}.json"),
                               "latent_shape": [4, preset.resolution // 8, preset.resolution // 8],
                               "text_shape": [77, preset.text_encoder["hidden_size"]]},
            torch_config=TorchConfig(backend="gloo"),
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(name=f"bench-{strategy}", storage_path=str(workdir / "runs")),
        )
        trainer.fit()
        ranks = json.loads((workdir / f"{strategy}.json").read_text())
        step_s = max(r["step_s"] for r in ranks)
        out[strategy] = {
            "images_per_s": round(2 * bsz / step_s, 3),
            "state_mib_per_rank": [round(r["state_bytes"] / 2**20, 1) for r in ranks],
            "peak_rss_growth_mib_per_rank": [round(r["peak_rss_growth_bytes"] / 2**20, 1) for r in ranks],
        }
    return out


def bench_learning(steps: int, workdir: Path) -> dict[str, Any]:
    """Tiny preset, one process: mean loss of the last 20% of steps vs the first 20%."""
    from sd_reference.metrics import Timer

    preset = get_preset("tiny")
    spec = prepare_components(preset, None, str(workdir / "components-tiny"))
    cfg = TrainConfig(online=True, steps=steps, batch_size=16, lr=preset.lr, warmup_steps=preset.warmup_steps,
                      ema_decay=preset.ema_decay, caption_dropout=0.1)
    worker = Worker(cfg, spec, None)
    batches = synthetic_batches(spec, worker, 8, 16)
    worker.cfg.online = False  # batches were encoded once above; the objective is what is measured
    losses = []
    with ui.progress() as bar:
        task = bar.add_task("learning (tiny)", total=steps, info="")
        for i in range(steps):
            b = batches[i % len(batches)]
            offline = {"latents": b["latents"], "text_emb": b["text_emb"]}
            losses.append(worker.train_step(offline, Timer("bench"))["loss"])
            bar.update(task, advance=1, info=f"loss {losses[-1]:.4f}")
    k = max(1, steps // 5)
    first, last = statistics.mean(losses[:k]), statistics.mean(losses[-k:])
    return {"steps": steps, "first_20pct_loss": round(first, 4), "last_20pct_loss": round(last, 4),
            "ratio": round(last / first, 3)}


def run_bench(args: argparse.Namespace) -> int:
    from sd_reference.cluster import ensure_ray

    torch.set_num_threads(args.threads)
    preset = sd2_scaled(args.width_div, args.resolution, name=f"sd2-div{args.width_div}")
    results: dict[str, Any] = {"preset": preset.name, "torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory(prefix="sd-bench-") as tmp:
        work = Path(tmp)
        if args.what in ("all", "online"):
            results["offline_vs_online"] = bench_online(preset, args.batch_size, args.steps, work)
        if args.what in ("all", "parallel"):
            ensure_ray()
            results["fsdp_vs_ddp"] = bench_parallel(preset, args.batch_size, args.steps, work)
        if args.what in ("all", "learning"):
            results["learning"] = bench_learning(300, work)
        if args.what in ("all", "features"):
            from sd_reference import bench_features

            results["features"] = {"optimizer_and_ema": bench_features.optimizer_and_ema(preset, 5),
                                   "grad_checkpointing": bench_features.checkpointing(preset, args.batch_size, args.steps)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    parts = []
    if "offline_vs_online" in results:
        r = results["offline_vs_online"]
        parts.append(f"offline {r['offline_images_per_s']} img/s vs online {r['online_images_per_s']} img/s "
                     f"= {r['offline_over_online']}x")
    if "fsdp_vs_ddp" in results:
        r = results["fsdp_vs_ddp"]
        parts.append(f"FSDP2 {r['fsdp']['images_per_s']} img/s {r['fsdp']['state_mib_per_rank'][0]} MiB/rank vs "
                     f"DDP {r['ddp']['images_per_s']} img/s {r['ddp']['state_mib_per_rank'][0]} MiB/rank")
    if "learning" in results:
        r = results["learning"]
        parts.append(f"learning: loss {r['first_20pct_loss']} -> {r['last_20pct_loss']}")
    if "features" in results:
        o, c = results["features"]["optimizer_and_ema"], results["features"]["grad_checkpointing"]
        parts.append(f"AdamW for-loop/foreach/fused {o['adamw_for-loop_ms']}/{o['adamw_foreach_ms']}/{o['adamw_fused_ms']} ms, "
                     f"EMA loop/foreach {o['ema_loop_ms']}/{o['ema_foreach_ms']} ms, checkpointing: step peak above RSS "
                     f"{c['off']['step_peak_above_mib']} -> {c['on']['step_peak_above_mib']} MiB")
    ui.summary("bench: " + "; ".join(parts) + f" -> {args.out}")
    return 0
