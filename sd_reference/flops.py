"""Model FLOPs utilisation: the UNet's FLOPs per image, counted once, over the device's bf16 peak.

FLOPs are counted by torch's FlopCounterMode on one sample of the UNet built on the
meta device (no memory, no compute: ~2 s for SD2-base on a CPU): forward and
forward + backward, matmuls, convolutions and attention, the usual MFU convention.
Gradient checkpointing's recomputation is not counted (model FLOPs, not hardware
FLOPs). Peaks are the dense (no sparsity) bf16 tensor-core figures of the vendor's
datasheets; a device not in the table gets no MFU ("n/a"), and so does a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# Matched in order against torch.cuda.get_device_name(): the more specific names first.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


@dataclass(frozen=True)
class UNetFlops:
    """FLOPs of one image (one sample) through the UNet."""

    forward: int
    train: int  # forward + backward


def unet_flops_per_image(unet_config: dict[str, Any], text_tokens: int = 77) -> UNetFlops:
    """Count the UNet's FLOPs for one sample at the config's latent size (meta device: no memory)."""
    from diffusers import UNet2DConditionModel
    from torch.utils.flop_counter import FlopCounterMode

    size = int(unet_config["sample_size"])
    with torch.device("meta"):
        unet = UNet2DConditionModel(**unet_config)
        latents = torch.zeros(1, int(unet_config.get("in_channels", 4)), size, size)
        text = torch.zeros(1, text_tokens, int(unet_config["cross_attention_dim"]))
        timestep = torch.tensor([500])
    with FlopCounterMode(display=False) as forward:
        unet(latents, timestep, encoder_hidden_states=text)
    with FlopCounterMode(display=False) as train:
        unet(latents, timestep, encoder_hidden_states=text).sample.sum().backward()
    return UNetFlops(forward=forward.get_total_flops(), train=train.get_total_flops())


def peak_flops(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of a GPU by its name; None for CPUs and devices not in the table."""
    for key, peak in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return peak
    return None


def mfu(train_flops_per_image: int, images_per_s_per_device: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation in [0, 1] (None when the peak is unknown)."""
    if peak is None or peak <= 0:
        return None
    return train_flops_per_image * images_per_s_per_device / peak
