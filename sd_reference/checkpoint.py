"""Sharded checkpoints with torch.distributed.checkpoint (DCP): save, load, find, fingerprint.

A checkpoint directory holds the UNet, the AdamW state and the EMA weights as DCP
shards (one `__RANK_0.distcp` per rank plus `.metadata`) and `train_state.json`
(step, the data position and run facts). In a Ray Train run each rank writes its
shards to a local directory (in the background with `start_save`) and reports it;
Ray Train merges them into `step_XXXXXXXX` under the run, on any storage.
"""

from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from sd_reference import storage
from sd_reference.ema import EMA
from sd_reference.errors import UserError

STATE_FILE = "train_state.json"
DIR_PATTERN = re.compile(r"^step_(\d{8})$")


def dir_name(step: int) -> str:
    return f"step_{step:08d}"


def _state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: EMA) -> dict[str, Any]:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd, "ema": ema.state_dict()}


def save(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: EMA, train_state: dict[str, Any]) -> None:
    """Collective: every rank writes its shards under `path`; rank 0 adds train_state.json."""
    path.mkdir(parents=True, exist_ok=True)
    dcp.save(_state(model, optimizer, ema), checkpoint_id=str(path))
    write_train_state(path, train_state)


def start_save(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: EMA,
    process_group: dist.ProcessGroup | None = None,
) -> Future[Any]:
    """Collective: copy this rank's shards to CPU memory now and write them under `path` in a
    background thread (DCP async_save); the future completes when they are on disk.

    `process_group` must be a gloo group used by nothing else: DCP's background thread
    runs collectives on it while training runs its own on the default group.
    """
    path.mkdir(parents=True, exist_ok=True)
    future = dcp.async_save(_state(model, optimizer, ema), checkpoint_id=str(path), process_group=process_group)
    assert isinstance(future, Future)  # the default stager stages synchronously
    return future


def write_train_state(path: Path, train_state: dict[str, Any]) -> None:
    """Rank 0 (or a lone process) writes train_state.json beside the shards."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        (path / STATE_FILE).write_text(json.dumps(train_state, indent=1))


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: EMA) -> dict[str, Any]:
    """Collective: restore model, optimizer and EMA in place (resharding if needed); returns train_state."""
    state = _state(model, optimizer, ema)
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    ema.load_state_dict(state["ema"])
    return json.loads((path / STATE_FILE).read_text())


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def fingerprint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: EMA) -> dict[str, str]:
    """sha256 of this rank's weights, optimizer state and EMA (exact bytes, shards only)."""
    digests = {}
    parts: dict[str, list[tuple[str, torch.Tensor]]] = {
        "model": list(model.state_dict().items()),
        "ema": sorted(ema.state_dict().items()),
        "optim": [
            (f"{i}.{k}", v)
            for i, p in enumerate(model.parameters())
            for k, v in sorted(optimizer.state.get(p, {}).items())
            if isinstance(v, torch.Tensor)
        ],
    }
    for part, tensors in parts.items():
        h = hashlib.sha256()
        for name, t in tensors:
            h.update(name.encode())
            h.update(_local(t).detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        digests[part] = h.hexdigest()[:16]
    return digests


def is_complete(uri: str) -> bool:
    """DCP metadata and train_state.json are both there (a save that finished and was merged)."""
    return storage.exists(storage.join(uri, ".metadata")) and storage.exists(storage.join(uri, STATE_FILE))


def find(run_uri: str) -> list[str]:
    """Complete checkpoints of a run (any storage), oldest first."""
    names = [n for n in storage.list_dir(run_uri) if DIR_PATTERN.match(n)]
    return [storage.join(run_uri, n) for n in names if is_complete(storage.join(run_uri, n))]


def latest(run_uri: str) -> str:
    found = find(run_uri)
    if not found:
        raise UserError(f"no complete checkpoint under {run_uri}: train first (python -m sd_reference train)")
    return found[-1]


def read_train_state(uri: str) -> dict[str, Any]:
    return dict(json.loads(storage.read_text(storage.join(uri, STATE_FILE))))


def load_unet_weights(path: Path, unet: torch.nn.Module, use_ema: bool = True) -> dict[str, Any]:
    """Single process, no process group: fill a full (unsharded) UNet from a sharded checkpoint."""
    full = unet.state_dict()
    state: dict[str, Any] = {"model": dict(full)}
    if use_ema:
        names = [n for n, p in unet.named_parameters() if p.requires_grad]
        state["ema"] = {n: torch.empty_like(full[n]) for n in names}  # own storage, not aliases
    dcp.load(state, checkpoint_id=str(path))
    unet.load_state_dict(state["model"])
    if use_ema:
        unet.load_state_dict(state["ema"], strict=False)
    return json.loads((path / STATE_FILE).read_text())
