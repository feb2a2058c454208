"""Paired ratios over benchmark rounds: each round runs both sides side by side, so the
per-round ratio cancels what the machine did during that round."""

from __future__ import annotations

import random
import statistics


def pairs(num: list[float], den: list[float]) -> list[float]:
    return [a / b for a, b in zip(num, den, strict=False) if b]


def paired(num: list[float], den: list[float]) -> float:
    """Median of the per-round ratios num/den."""
    ratios = pairs(num, den)
    return statistics.median(ratios) if ratios else float("nan")


def paired_ci(num: list[float], den: list[float], draws: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of `paired` (rounds resampled): whether a target is inside
    what the noise allows, rather than one median's luck."""
    ratios = pairs(num, den)
    if len(ratios) < 4:
        return float("nan"), float("nan")
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]
