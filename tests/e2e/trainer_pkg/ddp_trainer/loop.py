"""The training loop, written the way a team writes one for Ray Train.

A model wrapped by `ray.train.torch.prepare_model` (DDP), a `DataLoader` over a
`DistributedSampler`, a checkpoint per epoch through `ray.train.report`. The run goes on
until the file `config["release"]` exists (or `config["max_epochs"]` epochs have run);
each step waits `config["step_s"]` as a stand-in for reading its batch.
"""

from __future__ import annotations

import dataclasses
import os
import random
import tempfile
import time
from typing import Any


@dataclasses.dataclass
class Sample:  # a dataclass: its __init__ is generated code (`<string>`), called per sample
    x: list[float]
    y: float


def make_samples(n: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = [rng.uniform(-1.0, 1.0) for _ in range(8)]
        out.append(Sample(x, sum(x)))
    return out


def build_model() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def train_epoch(model: Any, loader: Any, optimizer: Any, step_s: float) -> float:
    import torch

    total = 0.0
    for x, y in loader:
        time.sleep(step_s)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        loss.backward()  # DDP's gradient all_reduce
        optimizer.step()
        total += float(loss)
    return total


def train_func(config: dict[str, Any]) -> None:
    import ray.train
    import torch
    from ray.train import Checkpoint
    from ray.train.torch import prepare_model
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    context = ray.train.get_context()
    rank = context.get_world_rank()
    samples = make_samples(int(config.get("samples", 512)), seed=0)
    data = TensorDataset(torch.tensor([s.x for s in samples]), torch.tensor([s.y for s in samples]))
    sampler = DistributedSampler(data, num_replicas=context.get_world_size(), rank=rank)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    model = prepare_model(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    epoch = 0
    while epoch < int(config.get("max_epochs", 100)) and not os.path.exists(config["release"]):
        sampler.set_epoch(epoch)
        loss = train_epoch(model, loader, optimizer, float(config.get("step_s", 0.05)))
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if rank == 0:
                torch.save(model.module.state_dict(), os.path.join(directory, "model.pt"))
                checkpoint = Checkpoint.from_directory(directory)
            ray.train.report({"epoch": epoch, "loss": loss}, checkpoint=checkpoint)
        epoch += 1
    with open(os.path.join(config["out"], f"rank{rank}"), "w") as out:
        out.write(str(epoch))
