"""EMA of the UNet weights: one foreach lerp over every parameter, on DTensor shards as on plain tensors.

Under FSDP2 the parameters are DTensors; the EMA keeps the same layout (each rank
averages its own shards), and the update runs on the local shards so a step costs
one fused `_foreach_lerp_` instead of one DTensor dispatch per parameter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch


def ema_decay_at(step: int, max_decay: float) -> float:
    """EMA warmup (diffusers' EMAModel): early steps follow the model, later ones average."""
    return min(max_decay, (1 + step) / (10 + step))


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor that holds this rank's values (a DTensor's shard, else the tensor itself)."""
    local = getattr(t, "_local_tensor", None)
    return local if local is not None else t


class EMA:
    """Exponential moving average of parameters, keyed by parameter name."""

    def __init__(self, named_params: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.shadow: dict[str, torch.Tensor] = {n: p.detach().clone() for n, p in named_params}

    def _pairs(self, named_params: Iterable[tuple[str, torch.Tensor]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        shadows, params = [], []
        for name, param in named_params:
            shadows.append(_local(self.shadow[name]))
            params.append(_local(param.detach()))
        return shadows, params

    @torch.no_grad()
    def update(self, named_params: Iterable[tuple[str, torch.Tensor]], decay: float) -> None:
        """shadow = decay * shadow + (1 - decay) * param, for all parameters in one foreach call."""
        shadows, params = self._pairs(named_params)
        if shadows:
            torch._foreach_lerp_(shadows, params, 1.0 - decay)

    @contextlib.contextmanager
    def swapped_in(self, named_params: Iterable[tuple[str, torch.Tensor]]) -> Iterator[None]:
        """Run the model with the EMA weights (sampling), then put the trained weights back."""
        shadows, params = self._pairs(named_params)
        with torch.no_grad():
            saved = [p.clone() for p in params]
            torch._foreach_copy_(params, shadows)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(params, saved)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.shadow

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, value in state.items():
            self.shadow[name].copy_(value)
