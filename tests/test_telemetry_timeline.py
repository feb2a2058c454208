"""The goodput timeline PNG (matplotlib), and the text-only path when matplotlib is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PIL import Image

from raydbg.telemetry import timeline
from raydbg.telemetry.goodput import LABELS, Report


def _report() -> Report:
    parts = dict.fromkeys(LABELS, 0.0)
    parts.update(startup=1.0, compute=2.0, checkpoint_save=0.0009, restart=1.0)
    segments = [(100.0, 101.0, "startup"), (101.0, 103.0, "compute"), (103.0, 103.0009, "checkpoint_save"),
                (103.0009, 104.0009, "restart")]
    return Report(run="r9", start=100.0, end=104.0009, parts=parts, segments=segments, attempts=2)


def test_png_has_one_lane_per_category_and_shows_tiny_segments(tmp_path: Path) -> None:
    fig = timeline._figure(_report(), 1400)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1] == "all (summary)" and len(labels) == len(LABELS) + 1
    assert any(lab.startswith("productive step compute  2.00 s (50.0%)") for lab in labels)
    assert "goodput 50.0%" in ax.get_title(loc="left") and "attempts 2" in ax.get_title(loc="left")
    out = timeline.render(_report(), str(tmp_path / "t.png"))
    assert out is not None
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] == 1400
        rgb = img.convert("RGB")
        blue = (0x1E, 0x88, 0xE5)  # the 0.9 ms checkpoint save is still drawn
        assert any(rgb.getpixel((x, y)) == blue for x in range(img.size[0]) for y in range(img.size[1]))


def test_without_matplotlib_one_line_and_no_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert timeline.render(_report(), str(tmp_path / "t.png")) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "raydbg[plot]" in err and not (tmp_path / "t.png").exists()
