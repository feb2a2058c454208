"""The size of a job's record per hour of a simulated 64-rank Train run, through the real writer.

An hour as the gateway's recorder writes it: each rank's downsampled step times every 10 s,
4 nodes' memory every 10 s, rank 0's step spans at 1 step/s (goodput), 2 attempts, 12 pause
lifecycle events, a straggler and a hang (with 64 ranks' stack classes). Prints the bytes on
disk, bytes per entry kind, the writer's time, and the time `raydbg history show` and
`report` take to read and render it.

    python benchmarks/history_cost.py [--ranks 64] [--hours 1]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
import time
from pathlib import Path

from raydbg.history import html, reader, store, view, writer

JOB = "0a000000"


def simulate(w: writer.HistoryWriter, ranks: int, hours: float, t0: float) -> dict[str, int]:
    counts: dict[str, int] = {}

    def add(kind: str, data: dict[str, object], ts: float) -> None:
        w.add(JOB, kind, data, ts)
        counts[kind] = counts.get(kind, 0) + 1

    run = "sd2-base-64"
    add("job", {"raydbg": "0.1.0", "ray": "2.60.0", "python": "3.12.1", "gateway_node": "a" * 56}, t0)
    for n in range(ranks // 16):
        add("node", {"node_id": f"{n:056x}", "node_ip": f"10.0.0.{n}", "is_head": n == 0, "ray": "2.60.0"}, t0)
    seconds = int(hours * 3600)
    for s in range(seconds):
        ts = t0 + s
        add("span", {"type": "span", "name": "sd.train.step", "trace_id": secrets.token_hex(16),
                     "span_id": secrets.token_hex(8), "parent_id": secrets.token_hex(8), "start": ts, "end": ts + 0.9,
                     "duration": 0.9, "status": "OK",
                     "attributes": {"train.run.id": run, "train.step": s, "train.attempt": 1,
                                    "ray.train.world_rank": 0, "ray.job_id": JOB},
                     "resource": {"service.name": "raydbg", "raydbg.process": "worker", "process.pid": 4242}}, ts)
        if s % 10 == 0:
            for r in range(ranks):
                add("steps", {"train_run": run, "world_rank": r, "node_id": f"{r // 16:056x}", "pid": 1000 + r,
                              "step": s, "steps": 10, "busy_s": 0.9 + (0.3 if r == 37 else 0.0), "max_s": 1.3}, ts)
            for n in range(ranks // 16):
                add("memory", {"node_id": f"{n:056x}", "node_ip": f"10.0.0.{n}", "used": 200 << 30,
                               "limit": 512 << 30}, ts)
        if s % 300 == 0:
            add("event", {"id": secrets.token_hex(4), "ts": ts, "kind": "session.paused", "node_id": "",
                          "message": "train_loop [rank 3/64] paused at train.py:120 in step (breakpoint)",
                          "details": {"session": secrets.token_hex(6), "job_id": JOB, "file": "train.py"}}, ts)
    classes = [{"id": secrets.token_hex(5), "summary": "all_reduce train.py:88", "count": 63, "total": ranks,
                "members": [{"world_rank": r, "pid": 1000 + r} for r in range(ranks) if r != 37],
                "frames": [{"function": f"f{i}", "file": "train.py", "line": i} for i in range(30)]}]
    add("event", {"id": secrets.token_hex(4), "ts": t0 + 600, "kind": "straggler", "node_id": "",
                  "message": "Train run sd2-base-64: rank 37 worked 1.2s per step, the others 0.9s",
                  "details": {"world_rank": 37, "busy_s": [1.2] * 8}}, t0 + 600)
    add("event", {"id": secrets.token_hex(4), "ts": t0 + seconds - 5, "kind": "hang", "node_id": "",
                  "message": "Train run sd2-base-64 made no progress for 300s",
                  "details": {"classes": classes, "chain": ["ranks 0-36,38-63 wait in all_reduce #9000 (world) for 37"],
                              "culprits": [{"world_rank": 37, "stack_class": classes[0]}]}}, t0 + seconds - 5)
    for number, status in ((1, "ERRORED"), (2, "FINISHED")):
        add("attempt", {"run": run, "run_id": "r", "number": number, "status": status, "started": t0,
                        "ended": t0 + seconds, "duration_s": seconds, "failed": [], "error": None, "workers": []},
            t0 + seconds)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--hours", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        s = store.open_store(str(Path(d) / "h"))
        w = writer.HistoryWriter(s, max_pending=10**7)
        t0 = time.time() - args.hours * 3600
        start = time.perf_counter()
        counts = simulate(w, args.ranks, args.hours, t0)
        added = time.perf_counter() - start
        assert w.flush(), w.state()
        flushed = time.perf_counter() - start
        job_dir = Path(d) / "h" / JOB
        size = sum(p.stat().st_size for p in job_dir.iterdir())
        per_kind: dict[str, int] = {}
        for p in job_dir.glob("seg-*.jsonl"):
            for line in p.read_bytes().splitlines():
                kind = json.loads(line)["kind"]
                per_kind[kind] = per_kind.get(kind, 0) + len(line) + 1
        start = time.perf_counter()
        v = view.build(reader.load(s, JOB))
        text = view.render(v)
        shown = time.perf_counter() - start
        page = html.render(v)
        reported = time.perf_counter() - start
        print(f"{args.ranks} ranks, {args.hours:g} h: {sum(counts.values())} entries, {size / 2**20:.2f} MiB on disk "
              f"({size / 2**20 / args.hours:.2f} MiB per hour; {len(os.listdir(job_dir))} files)")
        for kind in sorted(per_kind, key=lambda k: -per_kind[k]):
            print(f"  {kind:<8} {counts[kind]:>8} entries  {per_kind[kind] / 2**20:8.2f} MiB")
        print(f"writer: add() {added / sum(counts.values()) * 1e6:.1f} us per entry, all flushed in {flushed:.1f}s")
        print(f"history show: {shown:.1f}s ({len(text) // 1024} KiB of text); report: {reported:.1f}s "
              f"({len(page) // 1024} KiB of HTML)")


if __name__ == "__main__":
    main()
