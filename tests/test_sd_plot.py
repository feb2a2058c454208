"""The loss curve (matplotlib): round ticks, labelled axes, a legend naming exactly the lines drawn."""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image

from sd_reference.plot import loss_figure, plot_loss


def _log(n: int, resume: int | None = None) -> list[dict[str, float | int | str]]:
    recs: list[dict[str, float | int | str]] = [
        {"step": s, "loss": 0.2 + 0.9 * math.exp(-s / 40) + 0.03 * math.sin(s)} for s in range(1, n + 1)]
    if resume:
        recs.append({"event": "resume", "step": resume})
        recs += [{"step": s, "loss": 0.25} for s in range(resume + 1, resume + 5)]
    return recs


def test_legend_matches_the_lines_and_ticks_are_round() -> None:
    fig = loss_figure(_log(200, resume=100), "training loss (r1)")
    ax = fig.axes[0]
    drawn = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == drawn == ["loss per step", "moving average (10 steps)", "resumed from checkpoint"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "loss"
    for tick in [*ax.get_yticks(), *ax.get_xticks()]:
        assert abs(tick * 10 - round(tick * 10)) < 1e-9  # 0.2, 0.4 ... not 0.8898
    resume_line = [ln for ln in ax.get_lines() if ln.get_label() == "resumed from checkpoint"][0]
    assert list(resume_line.get_xdata()) == [100, 100]


def test_no_resume_no_resume_entry_and_png_size(tmp_path: Path) -> None:
    fig = loss_figure(_log(3))
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["loss per step"]
    out = plot_loss(_log(50, resume=20), tmp_path / "sub" / "loss.png")
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size == (800, 480)
