"""Benchmark: how many steps after a rank starts straggling its `straggler` event comes.

    .venv/bin/python benchmarks/straggler_detection.py [--loop report|ddp|fsdp] [--trials 3] [--ranks 3]
        [--extra S] [--out FILE]

Each trial is a fresh local cluster (a driver subprocess with RAY_DEBUG=1, so raydbg's
agents start with the job) running a Ray Train run (gloo, CPU) of `--steps` reported steps.
`--loop report`: each step sleeps 0.1 s, no collective; from step `--slow-from` on, the slow
rank works `--extra` s longer each step. `--loop ddp`: `prepare_model` (DDP) over a small MLP
with a DataLoader and a DistributedSampler; `--loop fsdp`: the SD reference app's tiny UNet
under FSDP2; in both, from step `--slow-from` on, the slow rank's collate function sleeps
`--extra` s (the others wait for it inside the step: only the arrivals at the collectives
show it). The driver polls the gateway's events and prints the steps the event judged.
Steps to the event = the last judged step - slow_from + 1; the floor is
RAYDBG_STRAGGLER_STEPS (5): the steps it must see. Results to
benchmarks/results/straggler_detection[_LOOP].json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

REPO = Path(__file__).resolve().parents[1]

DRIVER = r"""
import asyncio, json, os, sys, tempfile, threading, time
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

ranks, steps, slow_from, extra = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
kind, slow_rank = sys.argv[5], int(sys.argv[6])
ray.init(address="local", num_cpus=ranks + 2, include_dashboard=False, logging_level="ERROR",
         runtime_env={"env_vars": {"RAY_API_SERVER_ADDRESS": "http://127.0.0.1:1"}})

def report_loop(config):
    import ray.train
    rank = ray.train.get_context().get_world_rank()
    for step in range(1, config["steps"] + 1):
        time.sleep(0.1 + (config["extra"] if rank == config["slow_rank"] and step >= config["slow_from"] else 0.0))
        ray.train.report({"step": step})

def batches(config, dataset):
    # The slow rank's own data loading: its collate sleeps from step slow_from on.
    import ray.train
    from torch.utils.data import DataLoader, DistributedSampler, default_collate
    ctx = ray.train.get_context()
    seen = [0]
    def collate(batch):
        seen[0] += 1
        if ctx.get_world_rank() == config["slow_rank"] and seen[0] >= config["slow_from"]:
            time.sleep(config["extra"])
        return default_collate(batch)
    sampler = DistributedSampler(dataset, num_replicas=ctx.get_world_size(), rank=ctx.get_world_rank())
    return enumerate(DataLoader(dataset, batch_size=config["batch"], sampler=sampler, collate_fn=collate), start=1)

def ddp_loop(config):
    import ray.train, torch
    from ray.train.torch import prepare_model
    from torch.utils.data import TensorDataset
    torch.manual_seed(0)
    x = torch.randn(config["steps"] * config["batch"] * ray.train.get_context().get_world_size(), 32)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (inputs, target) in batches(config, TensorDataset(x, x.sum(dim=1, keepdim=True))):
        loss = torch.nn.functional.mse_loss(model(inputs), target)
        opt.zero_grad(); loss.backward(); opt.step()
        ray.train.report({"step": step})

def fsdp_loop(config):
    import ray.train, torch
    from diffusers import UNet2DConditionModel
    from torch.utils.data import TensorDataset
    from sd_reference import parallel
    from sd_reference.presets import tiny
    torch.manual_seed(0)
    torch.set_num_threads(1)
    preset = tiny()
    model = parallel.wrap(UNet2DConditionModel(**preset.unet), "fsdp", "full", torch.device("cpu"), bf16=False)
    opt = torch.optim.AdamW(model.parameters(), preset.lr)
    n, size = config["steps"] * config["batch"] * ray.train.get_context().get_world_size(), preset.unet["sample_size"]
    data = TensorDataset(torch.randn(n, 4, size, size), torch.randn(n, 4, preset.unet["cross_attention_dim"]))
    for step, (latents, text) in batches(config, data):
        noise = torch.randn_like(latents)
        pred = model(latents + noise, torch.randint(0, 1000, (latents.shape[0],)), encoder_hidden_states=text).sample
        loss = torch.nn.functional.mse_loss(pred, noise)
        opt.zero_grad(); loss.backward(); opt.step()
        ray.train.report({"step": step})

loop = {"report": report_loop, "ddp": ddp_loop, "fsdp": fsdp_loop}[kind]
config = {"steps": steps, "slow_from": slow_from, "extra": extra, "slow_rank": slow_rank, "batch": 8 if kind == "ddp" else 1}
trainer = TorchTrainer(loop, train_loop_config=config,
                       torch_config=TorchConfig(backend="gloo"),
                       scaling_config=ScalingConfig(num_workers=ranks, resources_per_worker={"CPU": 0.5}),
                       run_config=RunConfig(name="bench-straggler", storage_path=tempfile.mkdtemp()))
threading.Thread(target=trainer.fit, daemon=True).start()
from raydbg.client import Gateway
os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address  # this cluster's gateway, not the latest's
found = None
deadline = time.time() + 600
while found is None and time.time() < deadline:
    time.sleep(0.5)
    try:
        events = asyncio.run(Gateway.discover(None, None).events(200))
    except Exception:
        continue
    found = next((e for e in events if e.get("kind") == "straggler"), None)
shown = None
if found is not None:  # what `raydbg steps` showed then
    from raydbg.commands.steps import render
    try:
        shown = render(asyncio.run(Gateway.discover(None, None).steps(None, "bench-straggler")), 200)
    except Exception as exc:
        shown = repr(exc)
print(json.dumps(found and {"judged_steps": found["details"]["steps"], "world_rank": found["details"]["world_rank"],
                            "others_waited_s": found["details"].get("others_waited_s"),
                            "busy_s": found["details"]["busy_s"], "others_median_s": found["details"]["others_median_s"],
                            "message": found["message"], "steps_shown": shown}),
      flush=True)
os._exit(0)
"""


def trial(ranks: int, steps: int, slow_from: int, extra: float, loop: str, slow_rank: int) -> dict[str, object] | None:
    env = {**os.environ, "RAY_DEBUG": "1", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(ranks), str(steps), str(slow_from), str(extra), loop,
                          str(slow_rank)],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    lines = [line for line in out.stdout.splitlines() if line.startswith(("{", "null"))]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"the driver failed (rc {out.returncode}): {out.stderr[-600:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", default="report", choices=["report", "ddp", "fsdp"])
    ap.add_argument("--slow-rank", type=int, default=0)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--slow-from", type=int, default=10)
    ap.add_argument("--extra", type=float, default=0.3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    suffix = "" if args.loop == "report" else f"_{args.loop}"
    args.out = args.out or Path(__file__).parent / "results" / f"straggler_detection{suffix}.json"
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    got = []
    with Progress() as progress:
        task = progress.add_task("trials", total=args.trials)
        for _ in range(args.trials):
            got.append(trial(args.ranks, args.steps, args.slow_from, args.extra, args.loop, args.slow_rank))
            progress.advance(task)
    to_event = [int(g["judged_steps"][-1]) - args.slow_from + 1 for g in got if g]  # type: ignore[index]
    Console().print(f"steps from the slowdown to the event: {to_event} (median "
                    f"{statistics.median(to_event) if to_event else 'n/a'}; {len(got) - len(to_event)} trial(s) without "
                    f"an event); wrong rank named: {sum(1 for g in got if g and g['world_rank'] != args.slow_rank)}; "
                    f"load {load}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "loop": args.loop, "extra_s": args.extra,
                                    "load_1m": load, "trials": got,
                                    "steps_to_event": to_event, "slow_from": args.slow_from}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
