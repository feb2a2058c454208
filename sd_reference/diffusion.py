"""The diffusion objective: DDPM noising, epsilon / v-prediction targets, min-SNR weights, LR, randomness.

Pure torch (no Ray, no distributed calls) so it is unit-testable and shared by the
Ray Train loop and the benchmark.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

PREDICTION_TYPES = ("epsilon", "v_prediction")


class NoiseSchedule:
    """alphas_cumprod of a diffusers DDPM-family schedule, with the training-time helpers."""

    def __init__(self, scheduler_config: dict[str, Any], prediction_type: str) -> None:
        from diffusers import DDPMScheduler

        if prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction type {prediction_type!r} not in {PREDICTION_TYPES}")
        # The signature, not __code__: diffusers wraps __init__ (register_to_config), and the
        # wrapper's variable names would drop every key, leaving DDPM's default linear betas.
        known = inspect.signature(DDPMScheduler.__init__).parameters
        config = {k: v for k, v in scheduler_config.items() if k in known}
        self.scheduler = DDPMScheduler(**dict(config, prediction_type=prediction_type))
        self.prediction_type = prediction_type
        self.num_timesteps = int(self.scheduler.config.num_train_timesteps)
        self.alphas_cumprod = self.scheduler.alphas_cumprod.float()

    def snr(self, timesteps: torch.Tensor) -> torch.Tensor:
        """Signal-to-noise ratio alpha_bar / (1 - alpha_bar) at each timestep."""
        if self.alphas_cumprod.device != timesteps.device:  # once: a host-to-device copy would sync every step
            self.alphas_cumprod = self.alphas_cumprod.to(timesteps.device)
        a = self.alphas_cumprod[timesteps]
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
        return (per_sample * self.min_snr_weight(timesteps, snr_gamma)).mean()

    def min_snr_weight(self, timesteps: torch.Tensor, snr_gamma: float) -> torch.Tensor:
        """min(SNR, gamma) / SNR for epsilon, min(SNR, gamma) / (SNR + 1) for v-prediction."""
        snr = self.snr(timesteps)
        clipped = torch.minimum(snr, torch.full_like(snr, snr_gamma))
        # v-prediction's target already carries a (snr + 1) factor relative to epsilon.
        return clipped / (snr + 1) if self.prediction_type == "v_prediction" else clipped / snr


def lr_at(step: int, base_lr: float, warmup_steps: int) -> float:
    """Linear warmup to base_lr, then constant (SD2 / the Anyscale template's schedule)."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def step_generator(seed: int, step: int, rank: int, device: torch.device | str = "cpu") -> torch.Generator:
    """Randomness of one step on one rank; a resumed run draws the same noise for the same step.

    A generator on the training device draws noise there: no host tensor, no copy.
    The CPU and CUDA generators give different numbers for the same seed.
    """
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 + step * 1_009 + rank)


def dropout_mask(n: int, prob: float, generator: torch.Generator) -> torch.Tensor | None:
    """Which of `n` captions become the empty prompt (None when dropout is off); on the generator's device."""
    if prob <= 0:
        return None
    return torch.rand(n, generator=generator, device=generator.device) < prob


def caption_dropout(text_emb: torch.Tensor, uncond: torch.Tensor, drop: torch.Tensor | None) -> torch.Tensor:
    """Each caption's embedding, or the empty prompt's where `drop` is set (for CFG); no host sync."""
    if drop is None:
        return text_emb
    uncond = uncond.to(text_emb.device, text_emb.dtype)
    return torch.where(drop.to(text_emb.device).view(-1, 1, 1), uncond.expand_as(text_emb), text_emb)
