"""Cost of armed breakpoints to a hot task, through raydbg's own layer in a real Ray worker.

One actor (one raydbg-activated worker) times two hot loops in the worker itself:
  call   a loop calling a small function (call-heavy)
  frame  a single-frame loop
in four states, interleaved round by round in random order:
  none     nothing armed (the poll thread runs)
  other    a breakpoint armed in a function the loop never calls
  same     a breakpoint armed in the hot function, on a line never reached
  none2    nothing armed again: the A/A control
Ratios are median(state) / median(none). The poll thread's own cost is timed apart.

  python benchmarks/armed_breakpoints.py [--rounds 9] [--quick]
  (Python 3.11 arms only with RAYDBG_BREAK_PY311=1: the settrace fallback; set here.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
RESULTS = HERE.parent / "results"
STATES = ("none", "other", "same", "none2")


def line_of(marker: str) -> int:
    for n, text in enumerate(HERE.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return n
    raise KeyError(marker)


def leaf(x: int) -> int:
    return x + 1


def call_loop(n: int) -> int:
    t = 0
    for _ in range(n):
        t = leaf(t)
        if t < 0:
            t = 0  # NEVER_CALL
    return t


def frame_loop(n: int) -> int:
    t = 0
    for i in range(n):
        t += i & 7
        if t < 0:
            t = 0  # NEVER_FRAME
    return t


def elsewhere(x: int) -> int:
    return x * 2  # OTHER


class Bench:
    def timed(self, which: str, n: int) -> float:
        fn = call_loop if which == "call" else frame_loop
        start = time.perf_counter()
        fn(n)
        return time.perf_counter() - start

    def armed(self) -> int:
        from raydbg.breakpoints import worker

        w = worker._worker
        return len(w.arming.armed) if w is not None else -1

    def layer(self) -> str:
        from raydbg.breakpoints import worker

        w = worker._worker
        return type(w.layer).__name__ if w is not None and w.layer is not None else "none"

    def poll_tick_s(self, ticks: int) -> float:
        from raydbg.breakpoints import worker

        w = worker._worker
        assert w is not None
        start = time.perf_counter()
        for _ in range(ticks):
            w.tick()
        return (time.perf_counter() - start) / ticks


def set_state(actor: Any, state: str, ids: list[str]) -> list[str]:
    import ray

    from raydbg.breakpoints import model, store

    for bp_id in ids:
        store.remove(bp_id)
    ids = []
    marker = {"other": "OTHER", "same": None}.get(state, "")
    if state == "same":
        ids = [store.add(model.checked({"file": str(HERE), "line": line_of(m)})).id
               for m in ("NEVER_CALL", "NEVER_FRAME")]
    elif marker:
        ids = [store.add(model.checked({"file": str(HERE), "line": line_of(marker)})).id]
    deadline = time.monotonic() + 10
    while ray.get(actor.armed.remote()) != len(ids):
        if time.monotonic() > deadline:
            raise SystemExit(f"the worker did not arm {len(ids)} breakpoint(s) within 10 s")
        time.sleep(0.05)
    return ids


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from rich.progress import Progress

    import raydbg

    os.environ.setdefault("RAY_DEBUG", "1")
    os.environ["RAYDBG_BREAK_PY311"] = "1"
    os.environ.setdefault("RAYDBG_MEMORY_BUDGETS", "0")
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR",
             runtime_env=raydbg.runtime_env())
    load_before = os.getloadavg()
    actor = ray.remote(Bench).remote()
    sizes = {"call": args.n_call, "frame": args.n_frame}
    for which, n in sizes.items():  # warm: code objects specialised, the worker settled
        ray.get(actor.timed.remote(which, n))
    times: dict[str, dict[str, list[float]]] = {w: {s: [] for s in STATES} for w in sizes}
    ids: list[str] = []
    order = list(STATES)
    with Progress() as progress:
        task = progress.add_task("rounds", total=args.rounds)
        for _ in range(args.rounds):
            random.shuffle(order)
            for state in order:
                ids = set_state(actor, state, ids)
                for which, n in sizes.items():
                    times[which][state].append(ray.get(actor.timed.remote(which, n)))
            progress.advance(task)
    set_state(actor, "none", ids)
    tick = ray.get(actor.poll_tick_s.remote(50))
    layer = ray.get(actor.layer.remote())
    ray.shutdown()
    load_after = os.getloadavg()
    out: dict[str, Any] = {
        "python": sys.version.split()[0], "layer": layer, "rounds": args.rounds, "sizes": sizes,
        "load_before": load_before, "load_after": load_after,
        "poll_tick_ms": tick * 1000, "poll_core_fraction": tick / 0.5,
        "median_s": {w: {s: statistics.median(v) for s, v in st.items()} for w, st in times.items()},
        "times_s": times, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out["ratio"] = {w: {s: m[s] / m["none"] for s in STATES} for w, m in out["median_s"].items()}
    return out


def report(res: dict[str, Any]) -> None:
    print(f"python {res['python']}, layer {res['layer']}, {res['rounds']} rounds, "
          f"load {res['load_before'][0]:.2f} -> {res['load_after'][0]:.2f}")
    print(f"{'':8}{'other fn':>10}{'same fn':>10}{'A/A':>8}   (median time / nothing armed)")
    for which, r in res["ratio"].items():
        print(f"{which:8}{r['other']:>9.3f}x{r['same']:>9.3f}x{r['none2']:>7.3f}x")
    print(f"poll thread: {res['poll_tick_ms']:.3f} ms a tick, every 0.5 s "
          f"({res['poll_core_fraction'] * 100:.3f}% of a core)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--n-call", type=int, default=2_000_000)
    p.add_argument("--n-frame", type=int, default=4_000_000)
    p.add_argument("--quick", action="store_true", help="2 rounds, small loops (a smoke test)")
    p.add_argument("--out", help="JSON result file (default benchmarks/results/armed_breakpoints-pyXY.json)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.n_call, args.n_frame = 2, 200_000, 400_000
    res = run(args)
    report(res)
    if not args.quick:
        tag = "".join(res["python"].split(".")[:2])
        path = Path(args.out or RESULTS / f"armed_breakpoints-py{tag}.json")
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(res, indent=1) + "\n")
        print(f"written {path}")


if __name__ == "__main__":
    main()
