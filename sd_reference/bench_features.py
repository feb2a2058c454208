"""bench --what features: what the training features cost and save, on this machine, in one process each.

AdamW implementations (for-loop, foreach, fused) and the EMA update (one lerp per
parameter vs one foreach call) over the UNet's real parameter list; gradient
checkpointing's step memory (the peak RSS of the steps above the RSS between them,
i.e. activations: Linux's resettable VmHWM) and step time, each configuration in a
fresh process.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from sd_reference.presets import Preset


def _median_ms(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up (lazy state, allocator)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 2)


def optimizer_and_ema(preset: Preset, repeats: int) -> dict[str, Any]:
    """Milliseconds per AdamW step and per EMA update over the UNet's parameters (random gradients)."""
    from diffusers import UNet2DConditionModel

    from sd_reference import optim
    from sd_reference.ema import EMA

    unet = UNet2DConditionModel(**preset.unet)
    params = [p for p in unet.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    out: dict[str, Any] = {"tensors": len(params), "parameters_m": round(sum(p.numel() for p in params) / 1e6, 1)}
    for impl in ("for-loop", "foreach", "fused"):
        opt = optim.adamw(params, 1e-4, 0.01, impl, "cpu")
        out[f"adamw_{impl}_ms"] = _median_ms(opt.step, repeats)
    named = list(unet.named_parameters())
    ema = EMA(named)

    @torch.no_grad()
    def loop() -> None:  # the per-parameter update this module replaced
        for name, p in named:
            ema.shadow[name].lerp_(p, 1e-4)

    out["ema_loop_ms"] = _median_ms(loop, repeats)
    out["ema_foreach_ms"] = _median_ms(lambda: ema.update(named, 0.9999), repeats)
    return out


def _rss_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _checkpointing_child(preset_json: str, grad_checkpointing: bool, bsz: int, steps: int, queue: Any) -> None:
    from sd_reference.config import TrainConfig
    from sd_reference.metrics import Timer
    from sd_reference.models import ComponentsSpec
    from sd_reference.train_loop import Worker

    torch.set_num_threads(1)
    preset = json.loads(preset_json)
    spec = ComponentsSpec(tempfile.mkdtemp(), preset["name"], preset["resolution"], preset["unet"])
    worker = Worker(TrainConfig(batch_size=bsz, lr=1e-4, warmup_steps=0, ema_decay=0.999, use_gpu=False,
                                grad_checkpointing=grad_checkpointing), spec, None)
    lat = preset["resolution"] // 8
    batch = {"latents": torch.randn(bsz, 4, lat, lat), "text_emb": torch.randn(bsz, 77, preset["unet"]["cross_attention_dim"])}
    worker.train_step(batch, Timer("bench"))  # AdamW state and gradient buffers exist from here on
    between = _rss_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: reset the peak RSS (VmHWM) to the current RSS
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        worker.train_step(batch, Timer("bench"))
        times.append(time.perf_counter() - start)
    queue.put({"rss_between_steps_mib": round(between, 1),
               "step_peak_above_mib": round(_rss_mib("VmHWM") - between, 1),
               "step_s": round(statistics.median(times), 3)})


def checkpointing(preset: Preset, bsz: int, steps: int) -> dict[str, Any]:
    """How far RSS rises during a step above its level between steps (activations), and step time; off vs on."""
    ctx = multiprocessing.get_context("spawn")
    out = {}
    preset_json = json.dumps({"name": preset.name, "resolution": preset.resolution, "unet": preset.unet})
    for label, on in (("off", False), ("on", True)):
        queue = ctx.Queue()
        proc = ctx.Process(target=_checkpointing_child, args=(preset_json, on, bsz, steps, queue))
        proc.start()
        out[label] = queue.get(timeout=1800)
        proc.join()
    return out
