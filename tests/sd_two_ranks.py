"""Two gloo ranks in spawned processes for test_sd_train_features: accumulation under FSDP2 and DDP.

Each rank trains one step of the tiny UNet on its own 4 rows twice: as one batch,
and as 2 micro-batches of 2 (grad_accum=2). It records the full gradients the
optimizer sees, the loss and grad norm, and how many gradient reductions ran, and
writes them for the test to compare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def _count_reductions(counter: dict[str, int]) -> None:
    """Count the collectives FSDP2 (reduce-scatter) and DDP (all-reduce) reduce gradients with."""
    for name in ("reduce_scatter_single", "reduce_scatter_tensor", "all_reduce"):
        original = getattr(dist, name, None)
        if original is None:
            continue

        def counting(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            counter[_name] = counter.get(_name, 0) + 1
            return _original(*args, **kwargs)

        setattr(dist, name, counting)


def one_step(strategy: str, accum: int, rank: int, world: int, tmp: Path) -> dict[str, Any]:
    from sd_reference import parallel
    from sd_reference.config import TrainConfig
    from sd_reference.metrics import Timer
    from sd_reference.models import ComponentsSpec
    from sd_reference.presets import get_preset
    from sd_reference.train_loop import Worker

    preset = get_preset("tiny")
    spec = ComponentsSpec(str(tmp), "tiny", preset.resolution, preset.unet)
    cfg = TrainConfig(strategy=strategy, grad_accum=accum, batch_size=4 // accum, grad_clip=1e9, lr=1e-3,
                      warmup_steps=0, ema_decay=0.9, caption_dropout=0.5, snr_gamma=5.0, use_gpu=False)
    worker = Worker(cfg, spec, str(tmp / "uncond.npy"), rank, world)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own rows
    batch = {"latents": torch.randn(4, 4, 8, 8, generator=gen), "text_emb": torch.randn(4, 77, 32, generator=gen)}
    grads: dict[str, torch.Tensor] = {}
    original_step = worker.optimizer.step

    def capture(*args: Any, **kwargs: Any) -> Any:
        for name, p in parallel.named_params(worker.model):
            g = p.grad
            grads[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
        return original_step(*args, **kwargs)

    worker.optimizer.step = capture  # type: ignore[method-assign]
    counter: dict[str, int] = {}
    if strategy == "ddp":  # DDP's reducer all-reduces in C++: count its buckets with a comm hook
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects non-GradBucket annotations
            state["ddp_buckets"] = state.get("ddp_buckets", 0) + 1
            return default_hooks.allreduce_hook(None, bucket)

        worker.model.register_comm_hook(counter, hook)
    saved = {n: getattr(dist, n) for n in ("reduce_scatter_single", "reduce_scatter_tensor", "all_reduce") if hasattr(dist, n)}
    _count_reductions(counter)
    try:
        stats, _ = worker.step_on_device(batch, Timer("test"))
    finally:
        for n, f in saved.items():
            setattr(dist, n, f)
    torch.save(grads, tmp / f"grads-{strategy}-{accum}-{rank}.pt")
    return {"loss": stats[0].item(), "grad_norm": stats[1].item(), "reductions": counter}


def run_rank(rank: int, world: int, tmp_dir: str) -> None:
    tmp = Path(tmp_dir)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp / 'store'}", rank=rank, world_size=world)
    try:
        if rank == 0:
            np.save(tmp / "uncond.npy", np.zeros((77, 32), np.float32))
        dist.barrier()
        out = {f"{s}-{a}": one_step(s, a, rank, world, tmp) for s in ("fsdp", "ddp") for a in (1, 2)}
        (tmp / f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()
