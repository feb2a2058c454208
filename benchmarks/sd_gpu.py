"""SD2-base on one GPU in under 10 minutes: UNet training img/s (eager vs torch.compile), memory, MFU, encoders.

    python benchmarks/sd_gpu.py --out DIR          # on a machine with one CUDA GPU
    python benchmarks/sd_gpu.py --dry-run --out DIR  # the same plumbing on CPU, tiny preset, seconds

Measures the app's own training step (sd_reference.train_loop.Worker: FSDP2 on a
one-rank group, bf16 mixed precision, device-side noise, fused AdamW, clipping, EMA)
on batches already on the device, i.e. the UNet work offline preprocessing leaves
to the trainer; and the preprocessing encoder UDF (sd_reference.preprocess.Encoder:
VAE + text encoder, bf16 autocast, results copied back to the host) on 256 px
images. Per training configuration: images/s, step time, peak memory, MFU (FLOPs
per image counted by FlopCounterMode over the card's dense bf16 peak) and host
syncs per step (torch.cuda.set_sync_debug_mode). Configurations run cheapest
first and the JSON is rewritten after each, so a run cut short keeps what it
measured; torch.compile (minutes of compilation) runs last and is skipped when
the time left (--budget-s) is too short. Writes DIR/sd_gpu.json and
DIR/sd_gpu.md (the Markdown block for docs/sd_reference.md).
Reference: MosaicML's SD2-base trained at 1,100 images/s at 256 px on 8 A100s (~137 per GPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from sd_reference import device as devices
from sd_reference import flops, optim
from sd_reference.config import TrainConfig
from sd_reference.metrics import Timer
from sd_reference.models import ComponentsSpec, prepare_components
from sd_reference.presets import get_preset
from sd_reference.train_loop import Worker

COMPILE_ALLOWANCE_S = 300  # compiling SD2-base's UNet forward + backward: start it only with this much left


@dataclass(frozen=True)
class Plan:
    preset: str
    resolution: int
    batch_size: int
    steps: int
    warmup: int
    dry_run: bool


def plan(args: argparse.Namespace) -> Plan:
    if args.dry_run:
        return Plan("tiny", 64, 4, 2, 1, True)
    return Plan("sd2-base", args.resolution, args.batch_size, args.steps, args.warmup, False)


def count_syncs(worker: Worker, batch: dict[str, torch.Tensor], steps: int) -> float | None:
    """Host syncs per training step, as CUDA's sync debug mode reports them (None on CPU)."""
    if worker.device.type != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                worker.step_on_device(batch, Timer("bench"))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) / steps


def train_config(p: Plan, label: str, compile_unet: bool, grad_checkpointing: bool, unet_flops: int) -> dict[str, Any]:
    """Build a Worker, warm up (compiling if asked), then time `steps` steps with one sync at the end."""
    preset = get_preset(p.preset, p.resolution)
    spec = ComponentsSpec(tempfile.mkdtemp(prefix="sd-gpu-"), preset.name, p.resolution, preset.unet)
    cfg = TrainConfig(steps=10**9, batch_size=p.batch_size, lr=1e-4, warmup_steps=0, ema_decay=0.9999,
                      compile=compile_unet, grad_checkpointing=grad_checkpointing, use_gpu=not p.dry_run)
    worker = Worker(cfg, spec, None)
    dev = worker.device
    lat = p.resolution // 8
    gen = torch.Generator(device=dev).manual_seed(0)
    batch = {"latents": torch.randn(p.batch_size, 4, lat, lat, generator=gen, device=dev),
             "text_emb": torch.randn(p.batch_size, 77, preset.unet["cross_attention_dim"], generator=gen, device=dev)}
    sync = devices.synchronizer(dev) or (lambda: None)
    start = time.perf_counter()
    for _ in range(p.warmup):  # includes compilation
        worker.step_on_device(batch, Timer("bench"))
    sync()
    warmup_s = time.perf_counter() - start
    syncs = count_syncs(worker, batch, 2)
    devices.reset_peak_memory(dev)
    start = time.perf_counter()
    stats = [worker.step_on_device(batch, Timer("bench"))[0] for _ in range(p.steps)]
    losses = torch.stack(stats)[:, 0].tolist()  # the one read-back: as the loop does with --log-every
    elapsed = time.perf_counter() - start
    images_per_s = p.batch_size * p.steps / elapsed
    mfu = flops.mfu(unet_flops, images_per_s, flops.peak_flops(devices.name(dev)))
    result = {
        "config": label, "compile": compile_unet, "grad_checkpointing": grad_checkpointing,
        "images_per_s": round(images_per_s, 1), "step_ms": round(1000 * elapsed / p.steps, 1),
        "peak_mem_gib": devices.peak_memory_gib(dev), "mfu": None if mfu is None else round(mfu, 4),
        "host_syncs_per_step": syncs, "warmup_s": round(warmup_s, 1), "loss_finite": bool(np.isfinite(losses).all()),
        "optimizer": optim.implementation(worker.optimizer),
    }
    del worker, batch, stats
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return result


def encoders(p: Plan, work: Path) -> dict[str, Any]:
    """Rows/s of preprocessing's encoder UDF (VAE + text encoder) on one device, bf16 autocast on GPU."""
    from sd_reference.preprocess import Encoder

    preset = get_preset(p.preset, p.resolution)
    spec = prepare_components(preset, None, work / "components")
    encoder = Encoder(spec.to_json(), report=lambda n: None, seed=0)
    rng = np.random.default_rng(0)
    batch = {"key": np.array([str(i) for i in range(p.batch_size)], dtype=object),
             "caption": np.array(["a red circle"] * p.batch_size, dtype=object),
             "pixels": rng.integers(0, 256, (p.batch_size, 3, p.resolution, p.resolution), dtype=np.uint8),
             "input_ids": rng.integers(0, 100, (p.batch_size, 77)).astype(np.int64)}
    for _ in range(p.warmup):
        encoder(batch)
    start = time.perf_counter()
    for _ in range(p.steps):
        out = encoder(batch)  # ends with the copy back to the host: synchronised
    elapsed = time.perf_counter() - start
    return {"rows_per_s": round(p.batch_size * p.steps / elapsed, 1), "batch_size": p.batch_size,
            "latents_shape": list(out["latents"].shape[1:]), "text_emb_shape": list(out["text_emb"].shape[1:])}


def markdown(result: dict[str, Any]) -> str:
    """The block docs/sd_reference.md shows."""
    def fmt(v: Any, pct: bool = False) -> str:
        if v is None:
            return "n/a"
        return f"{100 * v:.1f}%" if pct else str(v)

    lines = [f"Device: {result['device']}; torch {result['torch']}; {result['preset']} UNet at {result['resolution']} px "
             f"(latents {result['resolution'] // 8}x{result['resolution'] // 8}), batch {result['batch_size']}, "
             f"{result['train_flops_per_image'] / 1e9:.1f} GFLOPs per image (train); `{result['command']}`.", "",
             "| configuration | images/s | step ms | peak memory GiB | MFU | host syncs/step | warm-up s |",
             "|---|---|---|---|---|---|---|"]
    for r in result["train"]:
        if "skipped" in r:
            lines.append(f"| {r['config']} | skipped: {r['skipped']} | | | | | |")
            continue
        lines.append(f"| {r['config']} | {r['images_per_s']} | {r['step_ms']} | {fmt(r['peak_mem_gib'])} | "
                     f"{fmt(r['mfu'], pct=True)} | {fmt(r['host_syncs_per_step'])} | {r['warmup_s']} |")
    if "encoders" in result:
        e = result["encoders"]
        lines += ["", f"Preprocessing encoders (VAE + text encoder, one device): **{e['rows_per_s']} rows/s** "
                      f"at batch {e['batch_size']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sd_work/gpu", help="directory for sd_gpu.json and sd_gpu.md")
    ap.add_argument("--resolution", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    ap.add_argument("--budget-s", type=float, default=540, help="skip torch.compile if less than its allowance is left")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="tiny preset on CPU: checks the script, measures nothing real")
    args = ap.parse_args(argv)
    began = time.perf_counter()
    if not args.dry_run and not torch.cuda.is_available():
        print("sd_gpu: no CUDA device visible to torch (use --dry-run to check the script on CPU)")
        return 2
    p = plan(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sd-gpu-"))
    # A one-rank process group so the FSDP2 (fully_shard) path is the one measured; a file store needs no port.
    dist.init_process_group("gloo" if args.dry_run else "nccl", init_method=f"file://{work / 'store'}", rank=0, world_size=1)
    preset = get_preset(p.preset, p.resolution)
    unet_flops = flops.unet_flops_per_image(preset.unet).train
    dev = devices.pick(not args.dry_run)
    precision = "bf16" if dev.type == "cuda" else "fp32"  # the app trains in bf16 on GPU only
    result: dict[str, Any] = {
        "device": devices.name(dev), "torch": torch.__version__, "python": platform.python_version(),
        "preset": p.preset, "resolution": p.resolution, "batch_size": p.batch_size, "steps": p.steps,
        "train_flops_per_image": unet_flops, "dry_run": p.dry_run,
        "command": "python benchmarks/sd_gpu.py" + (" --dry-run" if args.dry_run else ""), "train": [],
    }

    def save() -> None:
        (out / "sd_gpu.json").write_text(json.dumps(result, indent=1))
        (out / "sd_gpu.md").write_text(markdown(result))

    try:
        for label, ckpt in ((f"eager, {precision}", False), (f"eager, {precision}, gradient checkpointing", True)):
            result["train"].append(train_config(p, label, False, ckpt, unet_flops))
            save()
        result["encoders"] = encoders(p, work)
        save()
        left = args.budget_s - (time.perf_counter() - began)
        if args.no_compile or args.dry_run or left < COMPILE_ALLOWANCE_S:
            why = "--no-compile" if args.no_compile else "dry run" if args.dry_run else f"{left:.0f} s left"
            result["train"].append({"config": f"torch.compile, {precision}", "skipped": why})
        else:
            result["train"].append(train_config(p, f"torch.compile, {precision}", True, False, unet_flops))
        save()
    finally:
        dist.destroy_process_group()
    result["seconds"] = round(time.perf_counter() - began, 1)
    save()
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
