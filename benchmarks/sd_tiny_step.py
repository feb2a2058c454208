"""The SD reference app's tiny preset UNet training step (noise, forward, MSE, backward, AdamW),
for the benchmarks that time a training step (stacks.py, flight_recorder_cost.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_step(wrap: Callable[[Any], Any] = lambda model: model) -> Callable[[], None]:
    """One step of the tiny preset; `wrap` the model first (DDP for a distributed step)."""
    import torch
    from diffusers import UNet2DConditionModel

    from sd_reference.presets import tiny

    preset = tiny()
    model = wrap(UNet2DConditionModel(**preset.unet))
    opt = torch.optim.AdamW(model.parameters(), preset.lr)
    size = preset.unet["sample_size"]
    latents = torch.randn(preset.batch_size, 4, size, size)
    text = torch.randn(preset.batch_size, 4, preset.unet["cross_attention_dim"])

    def step() -> None:
        noise = torch.randn_like(latents)
        t = torch.randint(0, 1000, (preset.batch_size,))
        loss = torch.nn.functional.mse_loss(model(latents + noise, t, encoder_hidden_states=text).sample, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step
