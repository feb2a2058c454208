"""Telemetry overhead on the tiny SD training step: steps/s with the embedded default on vs off.

    python benchmarks/telemetry_overhead.py [--steps 400] [--json]

One process, one model: steps alternate on/off (off = the state before `setup()`,
the API's cheap path) so drift and neighbours hit both alike; medians of wall and
process CPU time per step (CPU includes the export thread). Each step carries the
spans and histograms sd_reference's train loop emits. Also prints the pure cost of
that instrumentation per step (no model), which bounds the overhead without noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import torch

from raydbg import telemetry
from raydbg.telemetry.provider import state
from sd_reference.presets import tiny

TINY_UNET: dict[str, Any] = tiny().unet  # the SD app's tiny preset
H = {
    n: telemetry.histogram(f"sd.train.{n}.duration", "s")
    for n in ("data_wait", "forward_backward", "optimizer", "step")
}
LOSS = telemetry.histogram("sd.train.loss", "1")
IPS = telemetry.histogram("sd.train.images_per_second", "{image}/s")


def _timed(part: str, step: int) -> Any:
    return telemetry.span(f"sd.train.{part}", step=step)


def train_step(model: Any, opt: Any, step: int, batch: int = 8) -> None:
    t0 = time.perf_counter()
    with _timed("data_wait", step):
        latents = torch.randn(batch, 4, 8, 8)
        text = torch.randn(batch, 4, 32)
    H["data_wait"].record(time.perf_counter() - t0)
    with telemetry.span("sd.train.step", step=step):
        t1 = time.perf_counter()
        with _timed("forward_backward", step):
            noise = torch.randn_like(latents)
            t = torch.randint(0, 1000, (batch,))
            pred = model(latents + noise, t, encoder_hidden_states=text).sample
            loss = torch.nn.functional.mse_loss(pred, noise)
            loss.backward()
        t2 = time.perf_counter()
        H["forward_backward"].record(t2 - t1)
        with _timed("optimizer", step):
            opt.step()
            opt.zero_grad(set_to_none=True)
        H["optimizer"].record(time.perf_counter() - t2)
    dt = time.perf_counter() - t0
    H["step"].record(dt)
    LOSS.record(float(loss.detach()))
    IPS.record(batch / dt)


def instrumentation_only(n: int = 2000) -> float:
    """Seconds per step of the instrumentation alone (telemetry on, no model)."""
    t0 = time.perf_counter()
    for step in range(n):
        for part in ("data_wait", "step", "forward_backward", "optimizer"):
            with _timed(part, step):
                pass
        for h in H.values():
            h.record(0.01)
        LOSS.record(0.1)
        IPS.record(100.0)
    return (time.perf_counter() - t0) / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="steps, alternating on/off")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    from diffusers import UNet2DConditionModel

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = UNet2DConditionModel(**TINY_UNET)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    os.environ.setdefault("RAYDBG_TELEMETRY_DIR", tempfile.mkdtemp(prefix="raydbg-bench-"))
    telemetry.setup("worker")
    on = (state.tracer, state.meter)
    for step in range(5):  # warm-up (allocator, first-call costs)
        train_step(model, opt, step)
    wall: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    for step in range(a.steps):
        # Alternate every step so neighbours' load and drift hit both modes alike; "off"
        # is exactly the API's state before setup(): tracer and meter unset.
        mode = "on" if step % 2 == 0 else "off"
        state.tracer, state.meter = on if mode == "on" else (None, None)
        w0, c0 = time.perf_counter(), time.process_time()
        train_step(model, opt, step)
        wall[mode].append(time.perf_counter() - w0)
        cpu[mode].append(time.process_time() - c0)
    state.tracer, state.meter = on
    time.sleep(1.5)  # let the export thread drain, so its CPU is counted below
    per_step = instrumentation_only()
    med = {
        f"{k}_{m}": statistics.median(v[m]) for k, v in (("wall", wall), ("cpu", cpu)) for m in v
    }
    result = {
        "steps_per_s_on": 1 / med["wall_on"],
        "steps_per_s_off": 1 / med["wall_off"],
        "slowdown_wall": med["wall_on"] / med["wall_off"] - 1,
        "slowdown_cpu": med["cpu_on"] / med["cpu_off"] - 1,
        "instrumentation_ms_per_step": per_step * 1e3,
        "instrumentation_share": per_step / med["wall_off"],
        "steps": a.steps,
        "spans_exported": telemetry.stats()["exporters"]["jsonl"]["exported"],
    }
    telemetry.shutdown()
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"median steps/s on {result['steps_per_s_on']:.2f}, off {result['steps_per_s_off']:.2f}: "
            f"slowdown {result['slowdown_wall']:+.2%} wall, {result['slowdown_cpu']:+.2%} CPU; "
            f"instrumentation alone "
            f"{result['instrumentation_ms_per_step']:.3f} ms/step = "
            f"{result['instrumentation_share']:.2%} of a step"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
