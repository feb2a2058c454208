"""Loss-curve PNG from a training log, drawn with matplotlib (part of the [sd] extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SIZE_IN, DPI = (8.0, 4.8), 100  # 800 x 480 pixels


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


def loss_figure(records: list[dict[str, Any]], title: str = "training loss") -> Any:
    """The matplotlib Figure: per-step loss, its moving average, the resume points (caller closes it)."""
    points, resumes = loss_points(records)
    if not points:
        raise ValueError("the training log has no loss records")
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training node
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    window = max(2, len(losses) // 20) if len(losses) >= 4 else 1
    fig = Figure(figsize=SIZE_IN, dpi=DPI)
    ax = fig.add_subplot()
    ax.plot(steps, losses, color="#9db4e6", linewidth=1, marker="." if len(steps) < 40 else None,
            label="loss per step")
    if window > 1:
        ax.plot(steps, moving_average(losses, window), color="#143c9f", linewidth=2,
                label=f"moving average ({window} steps)")
    for i, step in enumerate(sorted(set(resumes))):
        ax.axvline(step, color="#c80000", linestyle="--", linewidth=1,
                   label="resumed from checkpoint" if i == 0 else None)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(True, color="#e6e6e6", linewidth=0.8)
    ax.legend(loc="upper right", frameon=False)
    fig.tight_layout()
    return fig


def plot_loss(records: list[dict[str, Any]], out: Path, title: str = "training loss") -> Path:
    """Write the loss curve PNG (800 x 480) to `out`."""
    fig = loss_figure(records, title)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out
