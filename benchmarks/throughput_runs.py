"""Reads several `debugger.py` result files as one measurement of raydbg's task throughput.

One run of `debugger.py --skip-debug` cannot settle a 2 % target on a noisy 2-core host
(single rounds of the same pair of drivers differ by tens of percent). This puts the runs
side by side, says which count (load at the start below 1, A/A control within the margin
by both measures), and pools the counted runs' rounds: the median of every round's
raydbg/plain ratio with its 95 % bootstrap interval.

    python benchmarks/throughput_runs.py benchmarks/results/debugger_2026-12-04_no_runtime_env_*.json \
        [--plot benchmarks/results/throughput_runs.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from paired_stats import paired, paired_ci  # benchmarks/, this script's directory

TARGET = 0.98
AA_MARGIN = 0.02  # the A/A control's distance from 1.00 that still resolves TARGET
QUIET_LOAD = 1.0


class BadResult(ValueError):
    """A file that is not a `debugger.py` throughput result."""


def load(path: Path) -> dict[str, Any]:
    try:
        res = json.loads(path.read_text())
        samples = res["samples"]
        for key in ("throughput.raydbg", "throughput.plain", "throughput.control"):
            if not samples.get(key):
                raise KeyError(key)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadResult(f"{path}: not a debugger.py throughput result with an A/A control ({e})") from e
    return res


def why_not_counted(res: dict[str, Any]) -> str:
    """"" when the run counts; else the reason, for the table."""
    load_at_start = res["machine"]["load_before"][0]
    if load_at_start >= QUIET_LOAD:
        return f"load {load_at_start:.2f} at the start"
    r = res["ratios"]
    for key in ("throughput.control", "throughput.control.paired"):
        if not abs(1 - r[key]) <= AA_MARGIN:
            return f"A/A {r[key]:.3f}"
    return ""


def pooled(runs: list[dict[str, Any]], num: str, den: str = "throughput.plain") -> tuple[float, float, float]:
    """Median of all these runs' per-round ratios num/den, and its 95 % interval."""
    a = [x for r in runs for x in r["samples"][num][: len(r["samples"][den])]]
    b = [x for r in runs for x in r["samples"][den][: len(r["samples"][num])]]
    return (paired(a, b), *paired_ci(a, b))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    counted = [r for r in runs if not why_not_counted(r)]
    out: dict[str, Any] = {"runs": len(runs), "counted": len(counted)}
    if counted:
        out["raydbg"] = pooled(counted, "throughput.raydbg")
        out["control"] = pooled(counted, "throughput.control")
        out["met_by"] = {
            "ratio_of_medians": sum(r["ratios"]["throughput"] >= TARGET for r in counted),
            "paired": sum(r["ratios"]["throughput.paired"] >= TARGET for r in counted),
            "both": sum(min(r["ratios"]["throughput"], r["ratios"]["throughput.paired"]) >= TARGET
                        for r in counted),
        }
    return out


def print_report(runs: list[dict[str, Any]], summ: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"raydbg / plain Ray, no-op task throughput (target >= {TARGET})")
    for col in ("run", "load", "ratio of medians", "paired (95 %)", "A/A", "CPU/task", "counts"):
        table.add_column(col)
    for r in runs:
        q = r["ratios"]
        table.add_row(
            r["date"][5:16], f"{r['machine']['load_before'][0]:.2f}", f"{q['throughput']:.3f}",
            f"{q['throughput.paired']:.3f} ({q['throughput.paired.ci_lo']:.3f}-{q['throughput.paired.ci_hi']:.3f})",
            f"{q['throughput.control']:.3f}, {q['throughput.control.paired']:.3f}", f"{q['task_cpu']:.3f}",
            why_not_counted(r) or "yes",
        )
    console = Console(width=max(Console().width, 110))
    console.print(table)
    if not summ["counted"]:
        console.print("no run counts: none started at load < 1 with its A/A control within 2 %")
        return
    (m, lo, hi), (cm, clo, chi) = summ["raydbg"], summ["control"]
    n = summ["counted"]
    met = summ["met_by"]
    console.print(
        f"pooled over the {n} counted runs' rounds: raydbg/plain {m:.3f} (95 % {lo:.3f}-{hi:.3f}), "
        f"A/A {cm:.3f} ({clo:.3f}-{chi:.3f})\n"
        f"runs meeting {TARGET}: {met['ratio_of_medians']}/{n} by the ratio of medians, "
        f"{met['paired']}/{n} paired, {met['both']}/{n} by both"
    )


def plot(runs: list[dict[str, Any]], summ: dict[str, Any], path: Path) -> None:
    """Each run's paired ratio with its interval (grey: not counted), its A/A control, the
    target and the pooled interval of the counted runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, r in enumerate(runs):
        q = r["ratios"]
        counted = not why_not_counted(r)
        mid, lo, hi = q["throughput.paired"], q["throughput.paired.ci_lo"], q["throughput.paired.ci_hi"]
        ax.errorbar(i, mid, yerr=[[mid - lo], [hi - mid]], fmt="o", capsize=3,
                    color="tab:blue" if counted else "lightgrey")
        ax.plot(i + 0.2, q["throughput.control.paired"], "x", color="tab:orange" if counted else "lightgrey")
    if summ["counted"]:
        m, lo, hi = summ["raydbg"]
        ax.axhspan(lo, hi, color="tab:blue", alpha=0.12, label=f"pooled, counted runs: {m:.3f} ({lo:.3f}-{hi:.3f})")
    ax.axhline(TARGET, color="grey", linestyle="--", linewidth=1, label=f"target {TARGET}")
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.plot([], [], "o", color="tab:blue", label="raydbg / plain, paired, 95 % interval")
    ax.plot([], [], "x", color="tab:orange", label="A/A control / plain")
    ax.plot([], [], "o", color="lightgrey", label="not counted (load >= 1 or A/A outside 2 %)")
    ax.set_xticks(range(len(runs)), [r["date"][5:16] for r in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("throughput / plain Ray")
    ax.set_title("No-op task throughput of a raydbg job against plain Ray, run by run")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"written {path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path, help="debugger.py result files (JSON)")
    p.add_argument("--plot", type=Path, metavar="PNG", help="also draw the runs into PNG (matplotlib)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    try:
        runs = sorted((load(f) for f in args.results), key=lambda r: r["date"])
    except BadResult as e:
        print(f"throughput_runs: {e}", file=sys.stderr)
        return 2
    summ = summary(runs)
    if args.json:
        print(json.dumps(summ))
    else:
        print_report(runs, summ)
    if args.plot:
        plot(runs, summ, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
