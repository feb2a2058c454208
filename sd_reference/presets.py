"""Model presets: tiny (CPU tests), small, sd2-base (real SD2 shapes), built from config.

Each preset names a resolution, the three model configs (UNet, VAE, CLIP text
encoder, as diffusers/transformers config dicts) and training defaults. `sd2_scaled`
divides every width of SD2-base by one factor so the three models keep SD2's
proportions (parameters and FLOPs all scale with width squared).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sd_reference.errors import UserError

# SD2's noise schedule; shared by every preset so checkpoints stay comparable.
SCHEDULER_CONFIG: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "clip_sample": False,
    "set_alpha_to_one": False,
    "steps_offset": 1,
}
MAX_TOKENS = 77
VAE_SCALING_FACTOR = 0.18215


@dataclass(frozen=True)
class Preset:
    """Model shapes and training defaults for one named size."""

    name: str
    resolution: int
    unet: dict[str, Any]
    vae: dict[str, Any]
    text_encoder: dict[str, Any]
    batch_size: int = 8
    lr: float = 1e-4
    warmup_steps: int = 100
    ema_decay: float = 0.9999
    steps: int = 1000
    extra: dict[str, Any] = field(default_factory=dict)

    def with_resolution(self, resolution: int) -> Preset:
        """Same models at another image resolution (latents are resolution / 8)."""
        if resolution % 8 != 0 or resolution < 16:
            raise UserError(f"resolution {resolution} must be a multiple of 8 and at least 16")
        unet = dict(self.unet, sample_size=resolution // 8)
        vae = dict(self.vae, sample_size=resolution)
        return replace(self, resolution=resolution, unet=unet, vae=vae)


def _vae(channels: list[int], groups: int, layers: int, resolution: int) -> dict[str, Any]:
    # Four blocks = three downsamplings = the real 8x latent reduction.
    return {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": channels,
        "layers_per_block": layers,
        "latent_channels": 4,
        "norm_num_groups": groups,
        "sample_size": resolution,
        "scaling_factor": VAE_SCALING_FACTOR,
    }


def _text_encoder(hidden: int, layers: int, heads: int, vocab_size: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": hidden * 4,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "max_position_embeddings": MAX_TOKENS,
        "hidden_act": "gelu",
        "projection_dim": max(hidden // 2, 8),
        # Token ids of sd_reference.models.char_tokenizer.
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
    }


def sd2_scaled(div: int, resolution: int, name: str | None = None) -> Preset:
    """SD2-base with every width divided by `div` (1 = the real SD2-base shapes)."""
    if div not in (1, 2, 4, 8, 16):
        raise UserError(f"width divisor {div} must be one of 1, 2, 4, 8, 16")
    groups = 32 // div  # keeps SD2's channels per norm group
    unet = {
        "sample_size": resolution // 8,
        "in_channels": 4,
        "out_channels": 4,
        "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
        "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3,
        "block_out_channels": [320 // div, 640 // div, 1280 // div, 1280 // div],
        "layers_per_block": 2,
        # diffusers' legacy name: these are SD2's head counts (head dim 64 / div).
        "attention_head_dim": [5, 10, 20, 20],
        "cross_attention_dim": 1024 // div,
        "norm_num_groups": groups,
        "use_linear_projection": True,
    }
    return Preset(
        name=name or f"sd2-div{div}",
        resolution=resolution,
        unet=unet,
        vae=_vae([128 // div, 256 // div, 512 // div, 512 // div], groups, 2, resolution),
        text_encoder=_text_encoder(1024 // div, 23, 16, 49408),
        batch_size=4 if div <= 2 else 8,
        lr=1e-4,
        warmup_steps=500 if div == 1 else 100,
    )


def tiny() -> Preset:
    """diffusers-test-sized models at 64 px: a CPU training step takes well under a second."""
    resolution = 64
    unet = {
        "sample_size": resolution // 8,
        "in_channels": 4,
        "out_channels": 4,
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
        "block_out_channels": [32, 64],
        "layers_per_block": 1,
        "attention_head_dim": 4,
        "cross_attention_dim": 32,
        "norm_num_groups": 8,
    }
    return Preset(
        name="tiny",
        resolution=resolution,
        unet=unet,
        vae=_vae([8, 16, 32, 32], 8, 1, resolution),
        text_encoder=_text_encoder(32, 2, 4, 128),
        batch_size=8,
        lr=1e-3,
        warmup_steps=10,
        ema_decay=0.999,
        steps=200,
    )


PRESETS = {
    "tiny": tiny,
    "small": lambda: sd2_scaled(4, 256, name="small"),
    "sd2-base": lambda: sd2_scaled(1, 512, name="sd2-base"),
}


def get_preset(name: str, resolution: int | None = None) -> Preset:
    """The named preset, optionally at another resolution; UserError for unknown names."""
    if name not in PRESETS:
        raise UserError(f"unknown preset '{name}' (choose from {', '.join(PRESETS)})")
    preset = PRESETS[name]()
    return preset.with_resolution(resolution) if resolution else preset
