"""Ray Train loops of real training shapes (gloo on CPU), each with one rank stuck in user code.

Written as their users write them, with torch's and Ray Train's own APIs: DDP
(`prepare_model`, a DataLoader with a DistributedSampler), tensor-parallel subgroups
(`new_group`), HSDP (FSDP2's `fully_shard` on a 2x2 `init_device_mesh`), a 4-stage pipeline
(`send`/`recv` of activations and gradients), two groups entered in opposite orders (a
deadlock), FSDP2 on the SD reference app's tiny UNet. The stuck rank sleeps in `load_batch`
(a data loader that hangs) until `config["release"]` exists.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def _rank() -> int:
    import ray.train

    return int(ray.train.get_context().get_world_rank())


def load_batch(config: dict[str, Any], rank: int) -> None:
    """The stuck rank's data loader: it hangs until the test releases it."""
    if rank == int(config["stuck"]):
        while not Path(config["release"]).exists():
            time.sleep(0.2)


def _done(config: dict[str, Any], value: float) -> None:
    import ray.train

    ray.train.report({"value": value})
    Path(config["out"], f"rank{_rank()}").write_text(str(value))


def ddp(config: dict[str, Any]) -> None:
    """DDP as Ray Train's users write it: `prepare_model`, a DataLoader with a DistributedSampler
    (`prepare_data_loader`); the stuck rank's dataset hangs in step 2's batch."""
    import ray.train.torch
    import torch
    from torch.utils.data import DataLoader, Dataset

    rank = _rank()

    class Batches(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 24

        def __getitem__(self, i: int) -> torch.Tensor:
            if i >= 12:  # the second half: step 2 on every rank
                load_batch(config, rank)
            return torch.full((8,), float(i))

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(torch.nn.Linear(8, 1))
    loader = ray.train.torch.prepare_data_loader(DataLoader(Batches(), batch_size=4, shuffle=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in loader:
        loss = model(batch).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    _done(config, float(next(model.parameters()).sum()))


def tensor_parallel(config: dict[str, Any]) -> None:
    """Megatron-style: tensor-parallel groups {0,1} and {2,3}; an all_reduce of the partial
    activations in the group, then the data-parallel gradient all_reduce over the world."""
    import torch
    import torch.distributed as dist

    rank = _rank()
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    tp = tp_groups[rank // 2]
    layer = torch.nn.Linear(8, 8)
    for _ in range(2):
        load_batch(config, rank)
        partial = layer(torch.ones(2, 8))
        dist.all_reduce(partial, group=tp)
        partial.sum().backward()
        for p in layer.parameters():
            dist.all_reduce(p.grad)
    _done(config, float(layer.weight.grad.sum()))


def hsdp(config: dict[str, Any]) -> None:
    """HSDP with FSDP2: shard within {0,1} and {2,3}, replicate across them."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank = _rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        load_batch(config, rank)
        loss = model(torch.ones(2, 8)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    _done(config, float(loss))


def pipeline(config: dict[str, Any]) -> None:
    """A 4-stage pipeline: each stage a layer; activations forward with send/recv, gradients back."""
    import torch
    import torch.distributed as dist

    stage, last = _rank(), dist.get_world_size() - 1
    layer = torch.nn.Linear(8, 8)
    for _ in range(2):
        act = torch.ones(2, 8)
        if stage > 0:
            load_batch(config, stage)  # the stage's own input pipeline stalls
            dist.recv(act, src=stage - 1)
        act.requires_grad_(True)
        out = layer(act)
        if stage < last:
            dist.send(out.detach(), dst=stage + 1)
            grad = torch.empty_like(out)
            dist.recv(grad, src=stage + 1)
            out.backward(grad)
        else:
            out.sum().backward()
        if stage > 0:
            dist.send(act.grad, dst=stage - 1)
    _done(config, float(layer.weight.grad.sum()))


def opposite_orders(config: dict[str, Any]) -> None:
    """A deadlock: rank 0 syncs its pair group {0,1} first, rank 1 the world first."""
    import torch
    import torch.distributed as dist

    rank = _rank()
    pair = dist.new_group([0, 1])
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t, group=pair)
    dist.all_reduce(t)
    if rank == 1:
        dist.all_reduce(t, group=pair)
    _done(config, float(t.sum()))


def fsdp2_sd_tiny(config: dict[str, Any]) -> None:
    """FSDP2 (`fully_shard` per UNet block, as the SD reference app trains) on the tiny preset's
    UNet; the stuck rank's loader hangs before step 2's forward."""
    import torch
    import torch.nn.functional as F

    from sd_reference import models, parallel, presets

    rank = _rank()
    preset = presets.tiny()
    spec = models.ComponentsSpec("", preset.name, preset.resolution, dict(preset.unet))
    unet = parallel.wrap(models.build_unet(spec), "fsdp", "full", torch.device("cpu"), bf16=False)
    opt = torch.optim.AdamW(unet.parameters(), lr=preset.lr)
    latent = preset.resolution // 8
    for step in range(2):
        if step == 1:
            load_batch(config, rank)
        noisy = torch.randn(2, 4, latent, latent)
        text = torch.randn(2, 8, preset.unet["cross_attention_dim"])
        pred = unet(noisy, torch.tensor([10, 20]), encoder_hidden_states=text).sample
        loss = F.mse_loss(pred, torch.zeros_like(pred))
        loss.backward()
        opt.step()
        opt.zero_grad()
    _done(config, float(loss))
