"""The diffusion objective: DDPM noising, epsilon / v-prediction targets, min-SNR weights, EMA, LR.

Pure torch (no Ray, no distributed calls) so it is unit-testable and shared by the
Ray Train loop and the benchmark.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

PREDICTION_TYPES = ("epsilon", "v_prediction")


class NoiseSchedule:
    """alphas_cumprod of a diffusers DDPM-family schedule, with the training-time helpers."""

    def __init__(self, scheduler_config: dict[str, Any], prediction_type: str) -> None:
        from diffusers import DDPMScheduler

        if prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction type {prediction_type!r} not in {PREDICTION_TYPES}")
        known = DDPMScheduler.__init__.__code__.co_varnames
        config = {k: v for k, v in scheduler_config.items() if k in known}
        self.scheduler = DDPMScheduler(**dict(config, prediction_type=prediction_type))
        self.prediction_type = prediction_type
        self.num_timesteps = int(self.scheduler.config.num_train_timesteps)
        self.alphas_cumprod = self.scheduler.alphas_cumprod.float()

    def snr(self, timesteps: torch.Tensor) -> torch.Tensor:
        a = self.alphas_cumprod.to(timesteps.device)[timesteps]
        return a / (1 - a)

    def noisy_and_target(
        self, latents: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        noisy = self.scheduler.add_noise(latents, noise, timesteps)
        if self.prediction_type == "epsilon":
            return noisy, noise
        return noisy, self.scheduler.get_velocity(latents, noise, timesteps)

    def loss(
        self, pred: torch.Tensor, target: torch.Tensor, timesteps: torch.Tensor, snr_gamma: float
    ) -> torch.Tensor:
        """MSE, optionally min-SNR-gamma weighted (Hang et al. 2023) per sample."""
        per_sample = (pred.float() - target.float()).pow(2).mean(dim=tuple(range(1, pred.ndim)))
        if snr_gamma <= 0:
            return per_sample.mean()
        snr = self.snr(timesteps)
        clipped = torch.minimum(snr, torch.full_like(snr, snr_gamma))
        # v-prediction's target already carries a (snr + 1) factor relative to epsilon.
        weight = clipped / (snr + 1) if self.prediction_type == "v_prediction" else clipped / snr
        return (per_sample * weight).mean()


def lr_at(step: int, base_lr: float, warmup_steps: int) -> float:
    """Linear warmup to base_lr, then constant (SD2 / the Anyscale template's schedule)."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def ema_decay_at(step: int, max_decay: float) -> float:
    """EMA warmup (diffusers' EMAModel): early steps follow the model, later ones average."""
    return min(max_decay, (1 + step) / (10 + step))


class EMA:
    """Exponential moving average of parameters; works on DTensor shards as on plain tensors."""

    def __init__(self, named_params: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.shadow: dict[str, torch.Tensor] = {n: p.detach().clone() for n, p in named_params}

    @torch.no_grad()
    def update(self, named_params: Iterable[tuple[str, torch.Tensor]], decay: float) -> None:
        for name, param in named_params:
            self.shadow[name].lerp_(param.detach(), 1.0 - decay)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.shadow

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, value in state.items():
            self.shadow[name].copy_(value)


def step_generator(seed: int, step: int, rank: int) -> torch.Generator:
    """Randomness of one step on one rank; a resumed run draws the same noise for the same step."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)


def caption_dropout(
    text_emb: torch.Tensor, uncond: torch.Tensor, prob: float, generator: torch.Generator
) -> torch.Tensor:
    """Replace each caption's embedding by the empty prompt's with probability `prob` (for CFG)."""
    if prob <= 0:
        return text_emb
    drop = torch.rand(text_emb.shape[0], generator=generator) < prob
    if not drop.any():
        return text_emb
    out = text_emb.clone()
    out[drop.to(text_emb.device)] = uncond.to(text_emb.device, text_emb.dtype)
    return out
