"""Draws a goodput report as a PNG timeline (Pillow): one lane per category, plus a summary bar."""

from __future__ import annotations

from PIL import Image, ImageDraw, ImageFont

from raydbg.telemetry.goodput import LABELS, Report

COLORS = {
    "startup": (120, 144, 156),
    "data": (255, 179, 0),
    "compute": (67, 160, 71),
    "checkpoint_save": (30, 136, 229),
    "checkpoint_restore": (94, 53, 177),
    "lost_redo": (229, 57, 53),
    "restart": (173, 20, 87),
    "idle": (224, 224, 224),
}
SHORT = {
    "startup": "start-up / provisioning",
    "data": "data loading / waiting",
    "compute": "productive step compute",
    "checkpoint_save": "checkpoint save",
    "checkpoint_restore": "checkpoint restore",
    "lost_redo": "lost: work redone",
    "restart": "lost: restart",
    "idle": "idle / unaccounted",
}
ORDER = tuple(LABELS)  # the report's order


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size only
        return ImageFont.load_default()


def _tick_step(wall: float) -> float:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600):
        if wall / step <= 12:
            return step
    return 7200.0


def render(report: Report, path: str, width: int = 1400) -> str:
    """Write the timeline PNG to `path` and return it."""
    left, right, top, lane_h, gap = 360, 30, 70, 26, 8
    lanes = len(ORDER) + 1
    height = top + lanes * (lane_h + gap) + 60
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font, small = _font(16), _font(13)
    span_w = width - left - right
    wall = report.wall or 1.0

    def x(t: float) -> float:
        return left + (t - report.start) / wall * span_w

    lost = report.parts["lost_redo"] + report.parts["restart"]
    draw.text(
        (20, 15),
        f"run {report.run}: wall {report.wall:.1f} s, goodput {report.goodput:.1%}, "
        f"lost to failures {lost:.1f} s ({lost / wall:.1%}), attempts {report.attempts}",
        fill="black",
        font=font,
    )
    y = top
    draw.text((20, y + 5), "all (summary)", fill="black", font=small)
    for lo, hi, cat in report.segments:
        draw.rectangle([x(lo), y, max(x(hi), x(lo) + 1), y + lane_h], fill=COLORS[cat])
    for cat in ORDER:
        y += lane_h + gap
        secs = report.parts.get(cat, 0.0)
        draw.text(
            (20, y + 5), f"{SHORT[cat]}  {secs:.2f} s ({secs / wall:.1%})", fill="black", font=small
        )
        draw.rectangle([left, y, left + span_w, y + lane_h], outline=(238, 238, 238))
        for lo, hi, c in report.segments:
            if c == cat:
                draw.rectangle([x(lo), y, max(x(hi), x(lo) + 1), y + lane_h], fill=COLORS[cat])
    axis_y = y + lane_h + 10
    draw.line([left, axis_y, left + span_w, axis_y], fill="black")
    step = _tick_step(wall)
    t = 0.0
    while t <= wall + 1e-9:
        tx = left + t / wall * span_w
        draw.line([tx, axis_y, tx, axis_y + 5], fill="black")
        draw.text((tx - 10, axis_y + 8), f"{t:g}s", fill="black", font=small)
        t += step
    img.save(path, "PNG")
    return path
