"""How long a checkpoint save stalls sd_reference's step loop: background (DCP async_save) vs synchronous.

Real Ray Train runs on a local Ray (FSDP2, 2 workers, gloo, the tiny preset): the same
run with background saves (the default) and with `--sync-save`, interleaved round by
round so machine load hits both alike. Each checkpoint record in the run log says how
long the loop stood still for it (`seconds`: staging the shards in memory plus the
`ray.train.report` call; for a synchronous save, the whole DCP write and the upload)
and how long the write took from start to report (`write_s`). The figure per mode is
the median stall over every save of every round (split into staging or writing,
`stage_s`, and the `ray.train.report` call, `report_s`), next to the median step time.

  python benchmarks/sd_checkpoint_stall.py [--rounds 2] [--steps 16] [--every 2] [--preset tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sd_reference import runlog  # noqa: E402
from sd_reference.cli import main  # noqa: E402
from sd_reference.cluster import ensure_ray  # noqa: E402


def _run(work: Path, name: str, args: argparse.Namespace, sync: bool) -> dict[str, Any]:
    argv = ["--no-progress", "train", "--data", str(work / "latents"), "--storage-path", str(work / "runs"),
            "--name", name, "--workers", "2", "--steps", str(args.steps), "--checkpoint-every", str(args.every),
            "--batch-size", "4", "--keep-checkpoints", "2", "--no-export", *(["--sync-save"] if sync else [])]
    if main(argv) != 0:
        raise SystemExit(f"train {name} failed")
    records = runlog.read(str(work / "runs" / name))
    saves = [r for r in records if r.get("event") == "checkpoint"]
    steps = [r["step_s"] for r in records if r.get("event") is None and "step_s" in r]
    return {"stall_s": [r["seconds"] for r in saves], "stage_s": [r["stage_s"] for r in saves],
            "report_s": [r["report_s"] for r in saves], "write_s": [r["write_s"] for r in saves], "step_s": steps}


def main_bench() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--every", type=int, default=2, help="checkpoint every N steps")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sd_checkpoint_stall.json"))
    args = p.parse_args()
    ensure_ray()
    keys = ("stall_s", "stage_s", "report_s", "write_s", "step_s")
    results: dict[str, dict[str, list[float]]] = {m: {k: [] for k in keys} for m in ("background", "synchronous")}
    with tempfile.TemporaryDirectory(prefix="sd-stall-") as tmp:
        work = Path(tmp)
        assert main(["--no-progress", "make-data", "--out", str(work / "data"), "--num", "64",
                     "--formats", "parquet"]) == 0
        assert main(["--no-progress", "preprocess", "--input", str(work / "data" / "laion"), "--out",
                     str(work / "latents"), "--preset", args.preset]) == 0
        for i in range(args.rounds):
            for mode in (("background", "synchronous") if i % 2 == 0 else ("synchronous", "background")):
                got = _run(work, f"{mode}-{i}", args, sync=mode == "synchronous")
                for k, v in got.items():
                    results[mode][k] += v
    summary = {m: {k: round(statistics.median(v), 4) for k, v in r.items()} | {"saves": len(r["stall_s"])}
               for m, r in results.items()}
    print(f"{'mode':<12} {'saves':>5}" + "".join(f" {k + ' (median)':>18}" for k in keys))
    for mode, s in summary.items():
        print(f"{mode:<12} {s['saves']:>5}" + "".join(f" {s[k]:>18}" for k in keys))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "raw": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_bench())
