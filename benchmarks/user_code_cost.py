"""Benchmark: what the user-code roots cost a worker (raydbg/user_code.py, raydbg/worker/user_roots.py).

    .venv/bin/python benchmarks/user_code_cost.py [--threads 8] [--depth 30] [--repeats 2000] [--out FILE]

In one process, no Ray cluster: a training thread started by Ray Train's own ThreadRunner
(its loop function in a package installed in a temporary site-packages directory) and
`--threads` other threads each `--depth` frames deep. Times, median and p95 in microseconds:
a stacks snapshot of every thread (`own_threads.threads`, what the stacks thread answers)
with the roots against the same with none (alternated, the roots' share); the roots when
nothing changed (`user_roots.current`, the cache hit every snapshot and pause pays) and
computed anew (what a newly loaded function costs once); the pause's per-line test
(`Roots.is_user` on a file seen before). Results to benchmarks/results/user_code_cost.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raydbg import user_code
from raydbg.gang import own_threads
from raydbg.worker import user_roots

LOOP = '''
import threading
STOP = threading.Event()
def train_func():
    while not STOP.wait(0.01):
        pass
'''


def _deep(n: int, stop: threading.Event) -> None:
    if n:
        _deep(n - 1, stop)
    else:
        stop.wait()


def _times(fn: Callable[[], Any], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_us": round(statistics.median(ordered), 2), "p95_us": round(ordered[int(len(ordered) * 0.95)], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "user_code_cost.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    from ray.train.v2._internal.execution.worker_group.thread_runner import ThreadRunner

    site = Path(tempfile.mkdtemp()) / "site-packages"
    (site / "team_trainer").mkdir(parents=True)
    (site / "team_trainer" / "__init__.py").write_text("")
    (site / "team_trainer" / "loop.py").write_text(LOOP)
    sys.path.insert(0, str(site))
    import team_trainer.loop as loop

    stop = threading.Event()
    for _ in range(args.threads):
        threading.Thread(target=_deep, args=(args.depth, stop), daemon=True).start()
    runner = ThreadRunner()
    runner.run(loop.train_func)
    time.sleep(0.2)
    roots = user_roots.current()
    assert roots.is_user(str(loop.__file__)), roots

    real = user_roots.current
    with_roots: list[float] = []
    without: list[float] = []
    for i in range(args.repeats):  # alternated: the machine's drift falls on both alike
        for mode in ((0, 1) if i % 2 else (1, 0)):
            user_roots.current = real if mode else (lambda: user_code.EMPTY)  # type: ignore[assignment]
            start = time.perf_counter()
            own_threads.threads()
            (with_roots if mode else without).append((time.perf_counter() - start) * 1e6)
    user_roots.current = real  # type: ignore[assignment]

    def cold() -> None:
        user_roots._cached = None
        user_roots.current()

    frames = sum(len(t["frames"]) for t in own_threads.threads())
    results = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": round(load_before, 1), "load_after": round(os.getloadavg()[0], 1),
        "threads": args.threads + 2, "frames": frames, "repeats": args.repeats,
        "snapshot_with_roots": _summary(with_roots),
        "snapshot_without_roots": _summary(without),
        "roots_cached": _summary(_times(user_roots.current, args.repeats)),
        "roots_computed": _summary(_times(cold, min(args.repeats, 500))),
        "pause_line_test": _summary(_times(lambda: roots.is_user(str(loop.__file__)), args.repeats)),
    }
    loop.STOP.set()
    stop.set()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
