"""Data parallelism for the UNet: FSDP2 (`fully_shard` per block, then the root) or DDP.

FSDP2 on CPU needs an explicit CPU device mesh (gloo); Ray Train's
`prepare_model(parallel_strategy="fsdp")` is FSDP1 and refuses CPU, so sharding
is applied here directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

STRATEGIES = ("fsdp", "ddp")
FSDP_MODES = ("full", "grad-op")


def shard_blocks(unet: Any) -> list[torch.nn.Module]:
    """The UNet's blocks that get their own FSDP unit (all-gathered one at a time)."""
    blocks = list(unet.down_blocks) + [unet.mid_block] + list(unet.up_blocks)
    return [b for b in blocks if b is not None]


def wrap(unet: torch.nn.Module, strategy: str, fsdp_mode: str, device: torch.device, bf16: bool) -> torch.nn.Module:
    """Shard or replicate `unet` over the default process group; returns the module to train."""
    unet.to(device)
    if not dist.is_initialized() or dist.get_world_size() == 1 and strategy == "ddp":
        return unet
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(unet, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # grad-op keeps parameters gathered between forward and backward (ZeRO-2,
    # FSDP1's SHARD_GRAD_OP): less communication, more memory.
    reshard = fsdp_mode == "full"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    for block in shard_blocks(unet):
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(unet, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    return unet


def inner(model: torch.nn.Module) -> torch.nn.Module:
    """The UNet itself (DDP wraps it; FSDP2 shards it in place)."""
    return model.module if hasattr(model, "module") and not hasattr(model, "config") else model


def named_params(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Trainable parameters under their UNet names (no DDP `module.` prefix)."""
    return [(n, p) for n, p in inner(model).named_parameters() if p.requires_grad]


@contextlib.contextmanager
def gradient_sync(model: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Reduce gradients across ranks in this backward only if `enabled` (gradient accumulation).

    FSDP2 keeps the unsharded gradients of an unsynced backward and reduce-scatters
    the sum on the next synced one; DDP accumulates locally under `no_sync()`.
    """
    set_sync: Any = getattr(model, "set_requires_gradient_sync", None)  # FSDP2 (FSDPModule)
    no_sync: Any = getattr(model, "no_sync", None)  # DDP
    if set_sync is not None:
        set_sync(enabled)
        yield
    elif no_sync is not None and not enabled:
        with no_sync():
            yield
    else:  # one process, or a synced DDP step
        yield


def local_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters + gradients + optimizer state held by this rank (its shards only)."""

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    total = 0
    for p in model.parameters():
        total += local(p).numel() * p.element_size() * 2  # parameter + its gradient
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                total += local(v).numel() * v.element_size()
    return total
