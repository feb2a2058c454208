"""Loss-curve PNG from a training log, drawn with Pillow (no plotting library needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 800, 480, 70, 20, 40, 50


def loss_points(records: list[dict[str, Any]]) -> tuple[list[tuple[int, float]], list[int]]:
    """(step, loss) per step (the latest record wins after a resume redoes steps), resume steps."""
    by_step: dict[int, float] = {}
    resumes = []
    for r in records:
        if r.get("event") == "resume":
            resumes.append(int(r["step"]))
        elif r.get("event") is None and "loss" in r:
            by_step[int(r["step"])] = float(r["loss"])
    return sorted(by_step.items()), resumes


def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_loss(records: list[dict[str, Any]], out: Path, title: str = "training loss") -> Path:
    points, resumes = loss_points(records)
    if not points:
        raise ValueError("the training log has no loss records")
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    lo, hi = min(losses), max(losses)
    hi = hi if hi > lo else lo + 1e-6

    def xy(step: float, loss: float) -> tuple[float, float]:
        x = PAD_L + (step - x0) / (x1 - x0) * (W - PAD_L - PAD_R)
        y = PAD_T + (hi - loss) / (hi - lo) * (H - PAD_T - PAD_B)
        return x, y

    d.rectangle([PAD_L, PAD_T, W - PAD_R, H - PAD_B], outline="black")
    for i in range(5):  # y ticks
        v = lo + (hi - lo) * i / 4
        _, y = xy(x0, v)
        d.line([PAD_L - 5, y, PAD_L, y], fill="black")
        d.text((5, y - 6), f"{v:.4f}", fill="black")
    for i in range(5):  # x ticks
        s = round(x0 + (x1 - x0) * i / 4)
        x, _ = xy(s, lo)
        d.line([x, H - PAD_B, x, H - PAD_B + 5], fill="black")
        d.text((x - 10, H - PAD_B + 8), f"{int(s)}", fill="black")
    for step in resumes:
        x, _ = xy(step, lo)
        for y in range(PAD_T, H - PAD_B, 8):
            d.line([x, y, x, y + 4], fill=(200, 0, 0))
    d.line([xy(s, v) for s, v in points], fill=(150, 180, 230), width=1)
    smooth = moving_average(losses, max(1, len(losses) // 20))
    d.line([xy(s, v) for s, v in zip(steps, smooth, strict=True)], fill=(20, 60, 160), width=2)
    d.text((PAD_L, 12), f"{title}  (light: per step, dark: moving average, red: resumed)", fill="black")
    d.text((W // 2 - 15, H - 20), "step", fill="black")
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return out
