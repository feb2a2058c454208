"""SD2-base UNet training throughput on one GPU: FSDP2 + bf16, with and without torch.compile.

Run by benchmarks/gpu_sd2.sh on a GPU machine. Uses the app's own training step
(sd_reference.train_loop.Worker: noise, v/eps target, AdamW, clipping, EMA) on
precomputed-latent-shaped batches, so it measures the UNet step that offline
preprocessing leaves to the trainer. Prints one JSON line per configuration.
Reference: MosaicML's SD2-base reached 1,100 images/s at 256 px on 8 A100s (~137/GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist

from sd_reference.config import TrainConfig
from sd_reference.metrics import Timer
from sd_reference.models import ComponentsSpec
from sd_reference.presets import get_preset, sd2_scaled
from sd_reference.train_loop import Worker


def run(resolution: int, batch_size: int, steps: int, warmup: int, compile_unet: bool, strategy: str,
        smoke: bool = False) -> dict[str, object]:
    preset = sd2_scaled(16, resolution) if smoke else get_preset("sd2-base", resolution)
    device = "cpu" if smoke else "cuda"
    # Frozen components are not needed for offline batches; the spec only names the UNet.
    spec = ComponentsSpec(tempfile.mkdtemp(), preset.name, resolution, preset.unet)
    cfg = TrainConfig(steps=10**9, batch_size=batch_size, lr=1e-4, warmup_steps=0, ema_decay=0.9999,
                      strategy=strategy, compile=compile_unet, use_gpu=not smoke)
    if not smoke:
        torch.cuda.reset_peak_memory_stats()
    worker = Worker(cfg, spec, None)
    lat = resolution // 8
    batch = {"latents": torch.randn(batch_size, 4, lat, lat, device=device),
             "text_emb": torch.randn(batch_size, 77, preset.text_encoder["hidden_size"], device=device)}
    for _ in range(warmup):  # includes compilation
        worker.train_step(batch, Timer("bench"))
    sync = torch.cuda.synchronize if not smoke else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        worker.train_step(batch, Timer("bench"))
    sync()
    elapsed = time.perf_counter() - start
    return {
        "gpu": "cpu smoke test" if smoke else torch.cuda.get_device_name(),
        "strategy": strategy, "compile": compile_unet, "resolution": resolution, "batch_size": batch_size,
        "images_per_s": round(batch_size * steps / elapsed, 1),
        "step_ms": round(1000 * elapsed / steps, 1),
        "peak_mem_gib": 0.0 if smoke else round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "unet_params_m": round(sum(p.numel() for p in worker.model.parameters()) / 1e6, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--resolution", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", choices=["off", "on", "both"], default="both")
    p.add_argument("--strategy", default="fsdp")
    p.add_argument("--cpu-smoke", action="store_true", help="check the script on CPU (tiny model, gloo)")
    args = p.parse_args()
    if not args.cpu_smoke and not torch.cuda.is_available():
        raise SystemExit("sd_gpu: no CUDA device")
    # A one-rank process group so the FSDP2 (fully_shard) path is the one measured.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo" if args.cpu_smoke else "nccl", rank=0, world_size=1)
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    for compile_unet in modes:
        print(json.dumps(run(args.resolution, args.batch_size, args.steps, args.warmup, compile_unet,
                             args.strategy, args.cpu_smoke)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
