"""The later-waves e2e test's scenario, run N times: is it stable, and if not, why?

    .venv/bin/python benchmarks/later_waves.py --runs 10    # ~3.5 min on 2 cores; needs root

Each run is what `tests/e2e/test_memory_e2e.py::test_later_waves_of_a_big_function_are_held_at_start_not_killed`
runs (its scenario, its checks), in a fresh child memory cgroup. A line per run (kills,
the node's base and peak, what is wrong); for a failing run, the kill events and the
gate's log lines, and its whole report in `--keep DIR`. The issue that restored the
test's strict bound asks for 10 clean runs before calling it stable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from common import REPO  # benchmarks/, this script's directory; the repository's root on sys.path

sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "tests"))  # as pytest sees it: the e2e package and its helpers
import memory_workload  # noqa: E402
from e2e.test_memory_e2e import LATER_WAVES, later_waves_problems  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--keep", type=Path, help="write each run's report (JSON) here")
    args = p.parse_args()
    from rich.console import Console
    from rich.progress import Progress

    console = Console()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    bad = 0
    with Progress(console=console) as progress:
        task = progress.add_task("later-waves runs", total=args.runs)
        for k in range(args.runs):
            log = str(args.keep / f"run{k}.monitor.log") if args.keep else None
            r = memory_workload.run("raydbg", LATER_WAVES, timeout=140, monitor_log=log)
            problems = later_waves_problems(r, LATER_WAVES)
            bad += bool(problems)
            if args.keep:
                (args.keep / f"run{k}.json").write_text(json.dumps(r, indent=1))
            console.print(
                f"run {k}: kills {r.get('raydbg_kills')}, base {r.get('base_mb')} MiB, "
                f"peak {r.get('peak_mb')} MiB, load {os.getloadavg()[0]:.2f}: "
                f"{'; '.join(problems) or 'ok'}"
            )
            if problems:
                for e in sorted(r.get("events", []), key=lambda e: e["ts"]):
                    console.print("   kill:", e["message"], markup=False)
                for line in r.get("raydbg_lines", []):
                    console.print("   log:", line, markup=False)
            progress.advance(task)
    console.print(f"{args.runs - bad} of {args.runs} runs as they should be")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
