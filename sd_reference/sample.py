"""sample: images from prompts with an exported pipeline (PNG), plus the run's loss curve (PNG)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sd_reference.errors import UserError

DEFAULT_PROMPTS = (
    "a large red circle on a blue background",
    "a small yellow square on a black background",
    "a large green triangle on a white background",
    "a large purple diamond on a orange background",
)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "empty"


def sample(
    pipeline_dir: Path,
    out: Path,
    prompts: list[str],
    steps: int = 25,
    guidance: float = 5.0,
    seed: int = 0,
    train_log: Path | None = None,
) -> list[Path]:
    """Generate one PNG per prompt and loss_curve.png; returns the files written."""
    import torch
    from diffusers import StableDiffusionPipeline

    from sd_reference.models import quiet
    from sd_reference.plot import plot_loss
    from sd_reference.train import read_log

    if not (pipeline_dir / "model_index.json").exists():
        raise UserError(f"{pipeline_dir} is not a diffusers pipeline (no model_index.json): run export first")
    quiet()
    pipe = StableDiffusionPipeline.from_pretrained(pipeline_dir)
    pipe.set_progress_bar_config(disable=True)
    if torch.cuda.is_available():
        pipe = pipe.to("cuda")
    info_file = pipeline_dir / "sd_reference_export.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    size = int(info.get("resolution") or pipe.unet.config.sample_size * pipe.vae_scale_factor)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, prompt in enumerate(prompts):
        generator = torch.Generator().manual_seed(seed + i)
        image = pipe(
            prompt, height=size, width=size, num_inference_steps=steps,
            guidance_scale=guidance, generator=generator,
        ).images[0]
        path = out / f"{i:02d}-{_slug(prompt)}.png"
        image.save(path)
        written.append(path)
    log = train_log or (Path(info["train_log"]) if info.get("train_log") else None)
    if log is not None and log.exists():
        records = read_log(log)
        if any("loss" in r for r in records):
            written.append(plot_loss(records, out / "loss_curve.png", title=f"training loss ({log.parent.name})"))
    return written
