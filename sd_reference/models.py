"""Builds and loads the SD components: tokenizer, text encoder, VAE, UNet, scheduler.

Frozen components (VAE, text encoder, tokenizer, scheduler) live in one
diffusers-layout directory: either `--pretrained DIR` as is, or one materialized
from a preset with a fixed seed. Preprocessing, online training, export and
sampling all load that same directory, so randomly initialised encoders agree
everywhere. The directory is a path or a URI; each node that loads it from object
storage copies it once into its local cache (`storage.localize`).
"""

from __future__ import annotations

import json
import string
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from sd_reference import storage
from sd_reference.errors import UserError
from sd_reference.presets import MAX_TOKENS, SCHEDULER_CONFIG, Preset

SPEC_FILE = "sd_reference_components.json"
_CHARS = string.ascii_lowercase + string.digits + " .,;:!?'\"-()&/"


@dataclass
class ComponentsSpec:
    """Where the frozen components are and which UNet goes with them."""

    path: str
    preset: str
    resolution: int
    unet: dict[str, Any]
    pretrained_unet: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ComponentsSpec:
        return cls(**data)


def quiet() -> None:
    """Silence per-load chatter (accelerate hints, weight-loading bars) in every process."""
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def char_tokenizer() -> Any:
    """A character-level CLIPTokenizer built in memory (no vocab files, no download)."""
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in _CHARS:
        vocab[ch] = len(vocab)
        vocab[ch + "</w>"] = len(vocab)  # CLIP's end-of-word form
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=MAX_TOKENS)


def tokenize(tokenizer: Any, captions: list[str]) -> torch.Tensor:
    """Token ids padded/truncated to the tokenizer's length, as the SD pipeline does."""
    out = tokenizer(
        captions,
        padding="max_length",
        max_length=tokenizer.model_max_length,
        truncation=True,
        return_tensors="pt",
    )
    return out.input_ids


def _absolute(uri: str | Path) -> str:
    return str(uri) if storage.has_scheme(uri) else str(Path(uri).expanduser().resolve())


def prepare_components(
    preset: Preset, pretrained: str | Path | None, out_uri: str | Path, seed: int = 0
) -> ComponentsSpec:
    """Return the components to use: `pretrained` as is, else a seeded preset build saved to out_uri."""
    if pretrained:
        return _pretrained_spec(preset, _absolute(pretrained))
    from diffusers import AutoencoderKL, DDIMScheduler
    from transformers import CLIPTextConfig, CLIPTextModel

    quiet()
    spec = ComponentsSpec(_absolute(out_uri), preset.name, preset.resolution, preset.unet)
    existing = storage.join(spec.path, SPEC_FILE)
    if storage.exists(existing) and json.loads(storage.read_text(existing)) == spec.to_json():
        return spec  # same preset already materialized: keep the exact same weights
    out_dir, staged = storage.local_or_staging(spec.path)
    torch.manual_seed(seed)
    AutoencoderKL(**preset.vae).save_pretrained(out_dir / "vae")
    text_encoder = CLIPTextModel(CLIPTextConfig(**preset.text_encoder))
    text_encoder.save_pretrained(out_dir / "text_encoder")
    char_tokenizer().save_pretrained(out_dir / "tokenizer")
    DDIMScheduler(**SCHEDULER_CONFIG).save_pretrained(out_dir / "scheduler")
    (out_dir / SPEC_FILE).write_text(json.dumps(spec.to_json(), indent=1))
    storage.finish_staging(out_dir, spec.path, staged)
    return spec


def _pretrained_spec(preset: Preset, path: str) -> ComponentsSpec:
    if not storage.is_dir(path):
        raise UserError(f"--pretrained {path}: no such directory")
    missing = [d for d in ("vae", "text_encoder", "tokenizer") if not storage.is_dir(storage.join(path, d))]
    if missing:
        raise UserError(
            f"--pretrained {path} is not a diffusers model directory (missing {', '.join(missing)}/)"
        )
    te_config = json.loads(storage.read_text(storage.join(path, "text_encoder", "config.json")))
    unet_config_file = storage.join(path, "unet", "config.json")
    if storage.exists(unet_config_file):
        raw = json.loads(storage.read_text(unet_config_file))
        unet = {k: v for k, v in raw.items() if not k.startswith("_")}
    else:  # preset UNet wired to the pretrained text encoder's width
        unet = dict(preset.unet, cross_attention_dim=te_config["hidden_size"])
    unet["sample_size"] = preset.resolution // 8
    return ComponentsSpec(path, preset.name, preset.resolution, unet)


def local_dir(spec: ComponentsSpec) -> Path:
    """The components as a local directory on this node (a cached copy when they are remote)."""
    return storage.localize(spec.path)


def load_tokenizer(spec: ComponentsSpec) -> Any:
    from transformers import CLIPTokenizer

    return CLIPTokenizer.from_pretrained(local_dir(spec) / "tokenizer")


def load_encoders(spec: ComponentsSpec, device: str = "cpu") -> tuple[Any, Any]:
    """The frozen VAE and text encoder, in eval mode, gradients off."""
    from diffusers import AutoencoderKL
    from transformers import CLIPTextModel

    quiet()
    root = local_dir(spec)
    vae = AutoencoderKL.from_pretrained(root / "vae").to(device).eval()
    text_encoder = CLIPTextModel.from_pretrained(root / "text_encoder").to(device).eval()
    vae.requires_grad_(False)
    text_encoder.requires_grad_(False)
    return vae, text_encoder


def load_scheduler_config(spec: ComponentsSpec) -> dict[str, Any]:
    """The noise schedule of the components (SD2's for presets)."""
    path = storage.join(spec.path, "scheduler", "scheduler_config.json")
    if not storage.exists(path):
        return dict(SCHEDULER_CONFIG)
    raw = json.loads(storage.read_text(path))
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def build_unet(spec: ComponentsSpec, seed: int = 0) -> Any:
    """The UNet to train: pretrained weights when asked for, else initialised from config."""
    from diffusers import UNet2DConditionModel
    from diffusers.models.attention_processor import AttnProcessor2_0

    quiet()
    if spec.pretrained_unet:
        unet = UNet2DConditionModel.from_pretrained(local_dir(spec) / "unet")
    else:
        torch.manual_seed(seed)  # every rank must start from identical weights
        unet = UNet2DConditionModel(**spec.unet)
    unet.set_attn_processor(AttnProcessor2_0())  # torch SDPA attention
    return unet


@torch.no_grad()
def encode_images(vae: Any, pixels_uint8: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """uint8 (B,3,H,W) images -> scaled VAE latents (B,4,H/8,W/8)."""
    device = next(vae.parameters()).device
    x = pixels_uint8.to(device=device, dtype=torch.float32) / 127.5 - 1.0
    dist = vae.encode(x).latent_dist
    # Drawn where the generator lives (the training device for train's step generators), then moved.
    noise = torch.randn(dist.mean.shape, generator=generator, device=generator.device if generator else "cpu").to(device)
    return (dist.mean + dist.std * noise) * vae.config.scaling_factor


@torch.no_grad()
def encode_text(text_encoder: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Token ids -> last hidden states, the conditioning the SD pipeline also uses."""
    device = next(text_encoder.parameters()).device
    return text_encoder(input_ids.to(device))[0]
