"""Cost of armed breakpoints to a hot task, through raydbg's own layer in a real Ray worker.

One actor (one raydbg-activated worker) times two hot loops in the worker itself:
  call   a loop calling a small function (call-heavy)
  frame  a single-frame loop
in four states, interleaved round by round in random order:
  none     nothing armed (the poll thread runs)
  other    a breakpoint armed in a function the loop never calls
  same     a breakpoint armed in the hot function, on a line never reached
  none2    nothing armed again: the A/A control
Each state is timed --repeats times in a row and its fastest kept (run times here are
bimodal: interference only ever adds time). A round's ratio is state / none; the figure
is the median over rounds. The poll thread's own cost is timed apart.

  python benchmarks/armed_breakpoints.py [--rounds 9] [--repeats 3] [--quick]
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
                    best = min(ray.get(actor.timed.remote(which, n)) for _ in range(args.repeats))
                    times[which][state].append(best)
            progress.advance(task)
    set_state(actor, "none", ids)
    tick = ray.get(actor.poll_tick_s.remote(50))
    layer = ray.get(actor.layer.remote())
    ray.shutdown()
    load_after = os.getloadavg()
    out: dict[str, Any] = {
        "python": sys.version.split()[0], "layer": layer, "rounds": args.rounds,
        "repeats": args.repeats, "sizes": sizes,
        "load_before": load_before, "load_after": load_after,
        "poll_tick_ms": tick * 1000, "poll_core_fraction": tick / 0.5,
        "median_s": {w: {s: statistics.median(v) for s, v in st.items()} for w, st in times.items()},
        "times_s": times, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out["ratio"] = {w: {s: statistics.median(a / b for a, b in zip(st[s], st["none"], strict=True))
                        for s in STATES} for w, st in times.items()}
    return out


def report(res: dict[str, Any]) -> None:
    print(f"python {res['python']}, layer {res['layer']}, {res['rounds']} rounds, "
          f"load {res['load_before'][0]:.2f} -> {res['load_after'][0]:.2f}")
    print(f"{'':8}{'other fn':>10}{'same fn':>10}{'A/A':>8}   (median over rounds of state / nothing armed)")
    for which, r in res["ratio"].items():
        print(f"{which:8}{r['other']:>9.3f}x{r['same']:>9.3f}x{r['none2']:>7.3f}x")
    print(f"poll thread: {res['poll_tick_ms']:.3f} ms a tick, every 0.5 s "
          f"({res['poll_core_fraction'] * 100:.3f}% of a core)")


def plot(path: Path) -> None:
    """Bars of every result file's ratios (log scale), one group per Python and loop."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(f.read_text()) for f in sorted(RESULTS.glob("armed_breakpoints-py*.json"))]
    groups = [(f"{r['python']} {w}", r["ratio"][w]) for r in results for w in ("call", "frame")]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.26
    for k, (state, label) in enumerate((("other", "armed in another function"),
                                        ("same", "armed in the hot function (line never reached)"),
                                        ("none2", "nothing armed (A/A control)"))):
        xs = [i + (k - 1) * width for i in range(len(groups))]
        ax.bar(xs, [g[1][state] for g in groups], width, label=label)
    ax.axhline(1.05, color="grey", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), [g[0] for g in groups])
    ax.set_ylabel("time / nothing armed")
    ax.set_title("Armed breakpoints: cost to a hot task in a Ray worker (dashed: 1.05x)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"written {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--repeats", type=int, default=3, help="timings per state and round; the fastest counts")
    p.add_argument("--n-call", type=int, default=2_000_000)
    p.add_argument("--n-frame", type=int, default=4_000_000)
    p.add_argument("--quick", action="store_true", help="2 rounds, small loops (a smoke test)")
    p.add_argument("--out", help="JSON result file (default benchmarks/results/armed_breakpoints-pyXY.json)")
    p.add_argument("--plot", metavar="PNG", help="only draw the result files' ratios into PNG (matplotlib)")
    args = p.parse_args()
    if args.plot:
        plot(Path(args.plot))
        return
    if args.quick:
        args.rounds, args.repeats, args.n_call, args.n_frame = 2, 1, 200_000, 400_000
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
