"""Telemetry overhead on the tiny SD training step: steps/s with the embedded default on vs off.

    python benchmarks/telemetry_overhead.py [--steps 400] [--sdk] [--json]

One process, one model: neighbouring steps form on/off pairs (off = the state before
`setup()`, the API's cheap path; order alternates pair by pair) so drift and neighbours
hit both alike. Reports the median over pairs of on/off step time, wall and process CPU
(CPU includes the export thread), with a bootstrap 95% interval, and the load average.
Each step carries the spans and histograms sd_reference's train loop emits. Also prints
the pure cost of that instrumentation per step (no model), with and without the export
thread's work, which bounds the overhead without the noise. `--sdk` measures the
OpenTelemetry SDK path instead of raydbg's light spans and metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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


def instrumentation_only(n: int = 2000) -> tuple[float, float]:
    """Seconds per step of the instrumentation alone (telemetry on, no model): on the
    calling thread, and for the whole process once the export thread has written it."""
    telemetry.flush()
    caller = 0.0
    c0 = time.process_time()
    for chunk in range(0, n, 100):
        t0 = time.thread_time()
        for step in range(chunk, chunk + 100):
            for part in ("data_wait", "step", "forward_backward", "optimizer"):
                with _timed(part, step):
                    pass
            for h in H.values():
                h.record(0.01)
            LOSS.record(0.1)
            IPS.record(100.0)
        caller += time.thread_time() - t0
        telemetry.flush()  # every 400 spans: the bounded queue must not drop (and skip) any
    return caller / n, (time.process_time() - c0) / n


def _median_ci(values: list[float], rounds: int = 2000) -> tuple[float, float, float]:
    """Median and a 95% percentile-bootstrap interval for it (seeded: reruns agree)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return statistics.median(values), meds[int(0.025 * rounds)], meds[int(0.975 * rounds)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="steps, half on and half off")
    p.add_argument(
        "--sdk",
        action="store_true",
        help="OpenTelemetry SDK spans/metrics (RAYDBG_TELEMETRY_LIGHT=0)",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="A/A: 'on' steps run with telemetry off too (the method's own noise and bias)",
    )
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    from diffusers import UNet2DConditionModel

    if a.sdk:
        os.environ["RAYDBG_TELEMETRY_LIGHT"] = "0"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = UNet2DConditionModel(**TINY_UNET)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    os.environ.setdefault("RAYDBG_TELEMETRY_DIR", tempfile.mkdtemp(prefix="raydbg-bench-"))
    telemetry.setup("worker")
    on = (state.tracer, state.meter)
    modes = {"on": (None, None) if a.control else on, "off": (None, None)}
    for step in range(5):  # warm-up (allocator, first-call costs)
        train_step(model, opt, step)
    load_start = os.getloadavg()[0]
    wall: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    for pair in range(a.steps // 2):
        # Neighbouring steps form a pair, ordered on-off, off-on, ... so drift and
        # neighbours' load hit both modes alike. "off" is exactly the API's state before
        # setup(): tracer and meter unset.
        for mode in ("on", "off") if pair % 2 == 0 else ("off", "on"):
            state.tracer, state.meter = modes[mode]
            w0, c0 = time.perf_counter(), time.process_time()
            train_step(model, opt, pair)
            wall[mode].append(time.perf_counter() - w0)
            cpu[mode].append(time.process_time() - c0)
    state.tracer, state.meter = on
    time.sleep(1.5)  # let the export thread drain, so its CPU is counted below
    load_end = os.getloadavg()[0]
    caller, process = instrumentation_only()
    ratio_wall = _median_ci([x / y for x, y in zip(wall["on"], wall["off"], strict=True)])
    ratio_cpu = _median_ci([x / y for x, y in zip(cpu["on"], cpu["off"], strict=True)])
    off_step = statistics.median(wall["off"])
    result = {
        "path": "control (A/A)" if a.control else "sdk" if a.sdk else "light",
        "steps": a.steps,
        "steps_per_s_on": 1 / statistics.median(wall["on"]),
        "steps_per_s_off": 1 / off_step,
        # The headline: median over pairs of (on step time / off step time) - 1.
        "slowdown_wall": ratio_wall[0] - 1,
        "slowdown_wall_ci95": [ratio_wall[1] - 1, ratio_wall[2] - 1],
        "slowdown_cpu": ratio_cpu[0] - 1,
        "slowdown_cpu_ci95": [ratio_cpu[1] - 1, ratio_cpu[2] - 1],
        "instrumentation_ms_per_step": caller * 1e3,
        "instrumentation_with_export_ms_per_step": process * 1e3,
        "instrumentation_share": process / off_step,
        "load_start": load_start,
        "load_end": load_end,
        "spans_exported": telemetry.stats()["exporters"]["jsonl"]["exported"],
        "spans_dropped": telemetry.stats()["exporters"]["jsonl"]["dropped"],
    }
    telemetry.shutdown()
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        r = result
        print(
            f"[{r['path']}] {r['steps']} steps, load {load_start:.1f}->{load_end:.1f}: "
            f"steps/s on {r['steps_per_s_on']:.2f}, off {r['steps_per_s_off']:.2f}; "
            f"median paired slowdown {r['slowdown_wall']:+.2%} wall "
            f"(95% CI {r['slowdown_wall_ci95'][0]:+.2%}..{r['slowdown_wall_ci95'][1]:+.2%}), "
            f"{r['slowdown_cpu']:+.2%} CPU "
            f"({r['slowdown_cpu_ci95'][0]:+.2%}..{r['slowdown_cpu_ci95'][1]:+.2%}); "
            f"instrumentation alone {r['instrumentation_ms_per_step']:.3f} ms/step on the caller, "
            f"{r['instrumentation_with_export_ms_per_step']:.3f} ms with export "
            f"= {r['instrumentation_share']:.2%} of a step"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
