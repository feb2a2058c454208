"""sample: images from prompts with an exported pipeline (PNG), plus the run's loss curve (PNG).

The pipeline, the output directory and the log are paths or URIs (storage.py).
"""

from __future__ import annotations

import json
import re

from sd_reference import runlog, storage
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
    pipeline_dir: str,
    out_uri: str,
    prompts: list[str],
    steps: int = 25,
    guidance: float = 5.0,
    seed: int = 0,
    train_log: str | None = None,
) -> list[str]:
    """Generate one PNG per prompt and loss_curve.png; returns the names of the files written."""
    import torch
    from diffusers import StableDiffusionPipeline

    from sd_reference.models import quiet
    from sd_reference.plot import plot_loss

    if not storage.exists(storage.join(pipeline_dir, "model_index.json")):
        raise UserError(f"{pipeline_dir} is not a diffusers pipeline (no model_index.json): run export first")
    quiet()
    local_pipeline = storage.localize(pipeline_dir)
    pipe = StableDiffusionPipeline.from_pretrained(local_pipeline)
    pipe.set_progress_bar_config(disable=True)
    if torch.cuda.is_available():
        pipe = pipe.to("cuda")
    info_file = local_pipeline / "sd_reference_export.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    size = int(info.get("resolution") or pipe.unet.config.sample_size * pipe.vae_scale_factor)
    out, staged = storage.local_or_staging(out_uri)
    written = []
    for i, prompt in enumerate(prompts):
        generator = torch.Generator().manual_seed(seed + i)
        image = pipe(
            prompt, height=size, width=size, num_inference_steps=steps,
            guidance_scale=guidance, generator=generator,
        ).images[0]
        path = out / f"{i:02d}-{_slug(prompt)}.png"
        image.save(path)
        written.append(path.name)
    log = train_log or info.get("run_dir")
    if log is not None and storage.exists(log):
        records = runlog.read_file_or_run(log)
        if any("loss" in r for r in records):
            name = storage.name(log) if storage.is_dir(log) else storage.name(log.rsplit("/", 1)[0])
            written.append(plot_loss(records, out / "loss_curve.png", title=f"training loss ({name})").name)
    storage.finish_staging(out, out_uri, staged)
    return written
