"""Ray Train loops written as users write them, one rank's data loading slower every step (gloo on CPU).

DDP through `ray.train.torch.prepare_model` with a `DataLoader` and a `DistributedSampler`;
FSDP2 through the SD reference app's tiny preset (`fully_shard` on an explicit CPU mesh).
Rank `slow_rank` sleeps `extra_s` in its own collate function, each batch: the others wait for
it inside their step (in DDP's gradient all_reduce, in FSDP's first all_gather), so every
rank's time between reports is the same. Each run reports every step, then (with `release`)
waits for that file, its progress records still listed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def _rank() -> int:
    import ray.train

    return int(ray.train.get_context().get_world_rank())


def slow_collate(config: dict[str, Any]) -> Any:
    """The default collate, `extra_s` slower on the slow rank: its own loader's work."""
    from torch.utils.data import default_collate

    extra = float(config["extra_s"]) if _rank() == config.get("slow_rank") else 0.0

    def collate(batch: list[Any]) -> Any:
        if extra:
            time.sleep(extra)  # the slow rank's own data loading
        return default_collate(batch)

    return collate


def _loader(dataset: Any, config: dict[str, Any]) -> Any:
    import ray.train
    from torch.utils.data import DataLoader, DistributedSampler

    ctx = ray.train.get_context()
    sampler = DistributedSampler(dataset, num_replicas=ctx.get_world_size(), rank=ctx.get_world_rank(), seed=0)
    return DataLoader(dataset, batch_size=int(config["batch_size"]), sampler=sampler,
                      collate_fn=slow_collate(config))


def _hold(config: dict[str, Any]) -> None:
    while config.get("release") and not Path(config["release"]).exists():
        time.sleep(0.1)


def ddp_train(config: dict[str, Any]) -> None:
    """A small regression MLP under DDP (`prepare_model`), one report per step."""
    import ray.train
    import torch
    from ray.train.torch import prepare_model
    from torch.utils.data import TensorDataset

    torch.manual_seed(0)
    steps, batch = int(config["steps"]), int(config["batch_size"])
    world = ray.train.get_context().get_world_size()
    x = torch.randn(steps * batch * world, 32)
    dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (inputs, target) in enumerate(_loader(dataset, config)):
        loss = torch.nn.functional.mse_loss(model(inputs), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ray.train.report({"step": step, "loss": float(loss)})
    _hold(config)


def fsdp_train(config: dict[str, Any]) -> None:
    """The SD reference app's tiny UNet, FSDP2-sharded (sd_reference.parallel.wrap), one report per step."""
    import ray.train
    import torch
    from diffusers import UNet2DConditionModel
    from torch.utils.data import TensorDataset

    from sd_reference import parallel
    from sd_reference.presets import tiny

    torch.manual_seed(0)
    torch.set_num_threads(1)
    preset = tiny()
    model = parallel.wrap(UNet2DConditionModel(**preset.unet), "fsdp", "full", torch.device("cpu"), bf16=False)
    opt = torch.optim.AdamW(model.parameters(), preset.lr)
    steps, batch, size = int(config["steps"]), int(config["batch_size"]), preset.unet["sample_size"]
    world = ray.train.get_context().get_world_size()
    n = steps * batch * world
    dataset = TensorDataset(torch.randn(n, 4, size, size), torch.randn(n, 4, preset.unet["cross_attention_dim"]))
    for step, (latents, text) in enumerate(_loader(dataset, config)):
        noise = torch.randn_like(latents)
        t = torch.randint(0, 1000, (latents.shape[0],))
        pred = model(latents + noise, t, encoder_hidden_states=text).sample
        loss = torch.nn.functional.mse_loss(pred, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ray.train.report({"step": step, "loss": float(loss)})
    _hold(config)
