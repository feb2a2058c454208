"""Draws a goodput report as a PNG timeline (matplotlib): one lane per category, plus a summary lane.

matplotlib is optional (`pip install "raydbg[plot]"`, also in `[sd]`): the light install
keeps `raydbg goodput`'s text report, and `render` then says in one line why no PNG.
"""

from __future__ import annotations

import sys
from typing import Any

from raydbg.telemetry.goodput import LABELS, Report

COLORS = {
    "startup": "#78909c",
    "data": "#ffb300",
    "compute": "#43a047",
    "checkpoint_save": "#1e88e5",
    "checkpoint_restore": "#5e35b1",
    "lost_redo": "#e53935",
    "restart": "#ad1457",
    "idle": "#e0e0e0",
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
DPI = 100
NO_MATPLOTLIB = 'no timeline PNG: matplotlib is not installed (pip install "raydbg[plot]")'


def _bars(report: Report, cat: str) -> list[tuple[float, float]]:
    """(start, width) from the run's start of the segments of `cat`."""
    return [(lo - report.start, hi - lo)
            for lo, hi, c in report.segments if c == cat]


def _figure(report: Report, width: int) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    lanes = ["all (summary)"] + [
        f"{SHORT[c]}  {report.parts.get(c, 0.0):.2f} s ({report.parts.get(c, 0.0) / (report.wall or 1.0):.1%})"
        for c in ORDER]
    fig = Figure(figsize=(width / DPI, 0.34 * len(lanes) + 1.2), dpi=DPI)
    ax = fig.add_subplot()
    for lane, cat in enumerate((None, *ORDER)):
        y = len(lanes) - 1 - lane  # the summary on top
        for c in ORDER if cat is None else (cat,):
            # An edge as wide as a pixel keeps a sub-millisecond save visible.
            ax.broken_barh(_bars(report, c), (y - 0.4, 0.8), facecolors=COLORS[c],
                           edgecolors=COLORS[c], linewidth=0.8)
    ax.set_yticks(range(len(lanes)), labels=list(reversed(lanes)))
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlim(0, report.wall or 1.0)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, steps=[1, 2, 2.5, 5, 10]))
    ax.set_xlabel("seconds since the run started")
    ax.grid(True, axis="x", color="#eeeeee", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    lost = report.parts.get("lost_redo", 0.0) + report.parts.get("restart", 0.0)
    ax.set_title(f"run {report.run}: wall {report.wall:.1f} s, goodput {report.goodput:.1%}, "
                 f"lost to failures {lost:.1f} s ({lost / (report.wall or 1.0):.1%}), "
                 f"attempts {report.attempts}", loc="left")
    fig.tight_layout()
    return fig


def render(report: Report, path: str, width: int = 1400) -> str | None:
    """Write the timeline PNG (`width` pixels wide) to `path` and return it; None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(f"raydbg goodput: {NO_MATPLOTLIB}", file=sys.stderr)
        return None
    matplotlib.use("Agg")  # files only
    _figure(report, width).savefig(path, dpi=DPI, format="png")
    return path
