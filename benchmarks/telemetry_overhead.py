"""Telemetry overhead on an SD training step: the embedded default on vs off, paired, with A/A.

    python benchmarks/telemetry_overhead.py --preset tiny --blocks 250
    python benchmarks/telemetry_overhead.py --preset small --blocks 24
    python benchmarks/telemetry_overhead.py --quick            # smoke test, seconds

One process, one model (the preset's UNet, CPU, 1 thread, the preset's batch size;
latents and text embeddings given, as in offline-preprocessed training). Steps run in
blocks of three, one per mode, in an order that rotates block by block (a cyclic Latin
square), so drift and neighbours' load hit every mode alike:

- `off`: the API's state when telemetry is off (one attribute check per call);
- `sdk`: telemetry on: OpenTelemetry SDK spans and metrics into the embedded JSON lines;
- `off2`: off again: the A/A control, the method's own noise.

(Until 2026-12-02 a fourth mode measured raydbg's own "light" spans and metrics beside
the SDK's; docs/telemetry.md#benchmark has that comparison and why the light path went.)

Each step carries the SD loop's per-step instrumentation (4 spans, 6 histogram records).
The headline per mode is the median over blocks of (mode step time / `off` step time) - 1,
wall and process CPU (CPU includes the export threads), with a bootstrap 95% interval.
Also: the instrumentation alone per step (no model), on the caller and with export.
Writes benchmarks/results/telemetry_overhead_<preset>.json (with the load averages).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from raydbg.telemetry import api, provider
from raydbg.telemetry.provider import state
from raydbg.telemetry.settings import read_plan
from sd_reference.presets import get_preset

MODES = ("off", "sdk", "off2")
RESULTS = Path(__file__).resolve().parent / "results"


class Mode:
    """One telemetry state (tracer, meter, generation) and instruments bound to it."""

    def __init__(self, name: str, built: provider.State | None, generation: int) -> None:
        self.name = name
        self.built = built
        self.tracer = built.tracer if built else None
        self.meter = built.meter if built else None
        self.generation = generation
        self.h = {
            n: api.Histogram(f"sd.train.{n}.duration", "s")
            for n in ("data_wait", "forward_backward", "optimizer", "step")
        }
        self.loss = api.Histogram("sd.train.loss", "1")
        self.ips = api.Histogram("sd.train.images_per_second", "{image}/s")

    def use(self) -> None:
        state.tracer, state.meter, state.generation = self.tracer, self.meter, self.generation
        state.auto = False  # "off" means off: never an automatic set-up


def _span(part: str, step: int) -> Any:
    return api.span(f"sd.train.{part}", step=step)


def train_step(m: Mode, model: Any, opt: Any, shapes: dict[str, Any], step: int) -> None:
    b, s, seq, dim = shapes["batch"], shapes["size"], shapes["seq"], shapes["dim"]
    t0 = time.perf_counter()
    with _span("data_wait", step):
        latents = torch.randn(b, 4, s, s)
        text = torch.randn(b, seq, dim)
    m.h["data_wait"].record(time.perf_counter() - t0)
    with api.span("sd.train.step", step=step):
        t1 = time.perf_counter()
        with _span("forward_backward", step):
            noise = torch.randn_like(latents)
            t = torch.randint(0, 1000, (b,))
            pred = model(latents + noise, t, encoder_hidden_states=text).sample
            loss = torch.nn.functional.mse_loss(pred, noise)
            loss.backward()
        t2 = time.perf_counter()
        m.h["forward_backward"].record(t2 - t1)
        with _span("optimizer", step):
            opt.step()
            opt.zero_grad(set_to_none=True)
        m.h["optimizer"].record(time.perf_counter() - t2)
    dt = time.perf_counter() - t0
    m.h["step"].record(dt)
    m.loss.record(float(loss.detach()))
    m.ips.record(b / dt)


def instrumentation_only(m: Mode, n: int = 2000) -> tuple[float, float]:
    """Seconds per step of the instrumentation alone (no model): on the calling thread,
    and for the whole process once the export thread has written it."""
    m.use()
    caller = 0.0
    c0 = time.process_time()
    for chunk in range(0, n, 100):
        t0 = time.thread_time()
        for step in range(chunk, chunk + 100):
            for part in ("data_wait", "step", "forward_backward", "optimizer"):
                with _span(part, step):
                    pass
            for h in m.h.values():
                h.record(0.01)
            m.loss.record(0.1)
            m.ips.record(100.0)
        caller += time.thread_time() - t0
        if m.built is not None:  # every 400 spans: the bounded queue must not drop any
            for p in m.built.processors:
                p.force_flush(10_000)
    return caller / n, (time.process_time() - c0) / n


def _median_ci(values: list[float], rounds: int = 2000) -> tuple[float, float, float]:
    """Median and a 95% percentile-bootstrap interval for it (seeded: reruns agree)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return statistics.median(values), meds[int(0.025 * rounds)], meds[int(0.975 * rounds)]


def _build() -> provider.State:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return provider.build(read_plan(env), "bench")


def run(preset: str, blocks: int, warmup: int) -> dict[str, Any]:
    from diffusers import UNet2DConditionModel

    p = get_preset(preset)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = UNet2DConditionModel(**p.unet)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr)
    shapes = {
        "batch": p.batch_size,
        "size": p.unet["sample_size"],
        # tiny: the short text the tiny tests use; others: CLIP's 77 tokens
        "seq": 4 if preset == "tiny" else 77,
        "dim": p.unet["cross_attention_dim"],
    }
    os.environ.setdefault("RAYDBG_TELEMETRY_DIR", tempfile.mkdtemp(prefix="raydbg-bench-"))
    modes = {
        "off": Mode("off", None, 1001),
        "sdk": Mode("sdk", _build(), 1002),
        "off2": Mode("off2", None, 1003),
    }
    for i in range(warmup):  # allocator and first-call costs, every mode
        for m in modes.values():
            m.use()
            train_step(m, model, opt, shapes, i)
    load_start = os.getloadavg()[0]
    wall: dict[str, list[float]] = {k: [] for k in MODES}
    cpu: dict[str, list[float]] = {k: [] for k in MODES}
    t_start = time.monotonic()
    for block in range(blocks):
        k = block % len(MODES)
        for name in MODES[k:] + MODES[:k]:
            m = modes[name]
            m.use()
            w0, c0 = time.perf_counter(), time.process_time()
            train_step(m, model, opt, shapes, block)
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    elapsed = time.monotonic() - t_start
    time.sleep(1.5)  # let the export threads drain, so their CPU is counted below
    load_end = os.getloadavg()[0]
    off_step = statistics.median(wall["off"])
    out: dict[str, Any] = {
        "preset": preset,
        "blocks": blocks,
        "batch": shapes["batch"],
        "threads": 1,
        "off_step_s": off_step,
        "elapsed_s": elapsed,
        "load_start": load_start,
        "load_end": load_end,
        "modes": {},
    }
    for name in ("sdk", "off2"):
        rw = _median_ci([x / y for x, y in zip(wall[name], wall["off"], strict=True)])
        rc = _median_ci([x / y for x, y in zip(cpu[name], cpu["off"], strict=True)])
        caller, process = instrumentation_only(modes[name])
        out["modes"][name] = {
            "slowdown_wall": rw[0] - 1,
            "slowdown_wall_ci95": [rw[1] - 1, rw[2] - 1],
            "slowdown_cpu": rc[0] - 1,
            "slowdown_cpu_ci95": [rc[1] - 1, rc[2] - 1],
            "step_s": statistics.median(wall[name]),
            "instrumentation_ms_per_step": caller * 1e3,
            "instrumentation_with_export_ms_per_step": process * 1e3,
            "instrumentation_share": process / off_step,
        }
    for m in modes.values():
        if m.built is not None:
            out["modes"][m.name]["spans"] = {
                k: v for p in m.built.processors for k, v in p.stats().items()
            }
            for p in m.built.processors:
                p.shutdown()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", choices=("tiny", "small"))
    ap.add_argument("--blocks", type=int, default=250, help="blocks of three steps (one a mode)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps per mode")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny, 8 blocks")
    ap.add_argument("--json", action="store_true", help="print the JSON, not the summary")
    ap.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    a = ap.parse_args()
    if a.quick:
        a.preset, a.blocks, a.warmup = "tiny", 8, 1
    r = run(a.preset, a.blocks, a.warmup)
    if not a.no_save and not a.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"telemetry_overhead_{a.preset}.json").write_text(json.dumps(r, indent=2))
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(
        f"[{r['preset']}] {r['blocks']} blocks, off step {r['off_step_s'] * 1e3:.1f} ms, "
        f"{r['elapsed_s']:.0f} s, load {r['load_start']:.2f}->{r['load_end']:.2f}"
    )
    for name, m in r["modes"].items():
        print(
            f"  {name:5s} wall {m['slowdown_wall']:+.2%} "
            f"(95% CI {m['slowdown_wall_ci95'][0]:+.2%}..{m['slowdown_wall_ci95'][1]:+.2%}), "
            f"CPU {m['slowdown_cpu']:+.2%} "
            f"({m['slowdown_cpu_ci95'][0]:+.2%}..{m['slowdown_cpu_ci95'][1]:+.2%}); "
            f"instrumentation {m['instrumentation_ms_per_step']:.3f} ms caller, "
            f"{m['instrumentation_with_export_ms_per_step']:.3f} ms with export "
            f"= {m['instrumentation_share']:.3%} of a step"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
