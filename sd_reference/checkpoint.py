"""Sharded checkpoints with torch.distributed.checkpoint (DCP): save, load, find, fingerprint.

A checkpoint directory holds the UNet, the AdamW state and the EMA weights as DCP
shards (one `__RANK_0.distcp` per rank plus `.metadata`) and `train_state.json`
(step and run facts). In a Ray Train run each rank writes its shards to a local
directory and reports it; Ray Train merges them into `step_XXXXXXXX` under the run.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

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


def find(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run (DCP metadata and train_state present), oldest first."""
    if not run_dir.is_dir():
        return []
    found = [
        p
        for p in run_dir.iterdir()
        if DIR_PATTERN.match(p.name) and (p / ".metadata").exists() and (p / STATE_FILE).exists()
    ]
    return sorted(found, key=lambda p: p.name)


def latest(run_dir: Path) -> Path:
    found = find(run_dir)
    if not found:
        raise UserError(f"no complete checkpoint under {run_dir}: train first (python -m sd_reference train)")
    return found[-1]


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
