"""Goodput example: a small training loop with an injected failure, then `raydbg goodput`.

    python examples/telemetry_goodput.py            # writes spans, prints the report + PNG

A supervisor runs the trainer as a child process (as Ray Train restarts a worker
group); the first attempt crashes after its last checkpoint, the second resumes from
that checkpoint. Each phase is a raydbg span carrying `train.run.id`, `train.attempt`
and `train.step`, which is all `raydbg goodput` needs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

from raydbg import telemetry


def train(run: str, attempt: int, ckpt: str, steps: int, fail_at: int, every: int) -> None:
    telemetry.setup("worker")
    ids = {"train.run.id": run, "train.attempt": attempt}
    rng = np.random.default_rng(attempt)
    with telemetry.span("example.train.setup", ids):
        time.sleep(0.2)  # stands for process-group and model set-up
        w = np.zeros((256, 1))
    start = 0
    if os.path.exists(ckpt):
        with telemetry.span("example.train.checkpoint.restore", ids) as s:
            state = np.load(ckpt)
            w, start = state["w"], int(state["step"])
            s.set_attribute("train.step", start)
    loss_hist = telemetry.histogram("example.train.loss", "1", "Training loss")
    for step in range(start + 1, steps + 1):
        at = {**ids, "train.step": step}
        with telemetry.span("example.train.data_wait", at):
            x = rng.standard_normal((512, 256))
            y = x[:, :1] * 0.5
            time.sleep(0.01)  # stands for the loader being behind
        with telemetry.span("example.train.step", at):
            for _ in range(20):  # real compute: a few SGD steps of linear regression
                grad = x.T @ (x @ w - y) / len(x)
                w -= 0.1 * grad
            loss_hist.record(float(np.mean((x @ w - y) ** 2)))
            time.sleep(0.02)
        if step == fail_at and attempt == 0:
            raise RuntimeError(f"injected failure at step {step}")
        if step % every == 0:
            with telemetry.span("example.train.checkpoint.save", at):
                np.savez(ckpt + ".tmp.npz", w=w, step=step)
                os.replace(ckpt + ".tmp.npz", ckpt)


def supervise(run: str, steps: int, fail_at: int, every: int, restart_delay: float) -> int:
    telemetry.setup("driver")
    with (
        tempfile.TemporaryDirectory(prefix="raydbg-goodput-") as tmp,
        telemetry.span("example.train.run", {"train.run.id": run}),
    ):
        ckpt = os.path.join(tmp, "ckpt.npz")
        for attempt in range(3):
            cmd = [sys.executable, __file__, "--child", "--run", run, "--attempt", str(attempt)]
            cmd += ["--ckpt", ckpt, "--steps", str(steps), "--fail-at", str(fail_at)]
            cmd += ["--every", str(every)]
            if subprocess.run(cmd).returncode == 0:
                return 0
            time.sleep(restart_delay)  # stands for rescheduling the worker group
    return 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default=f"example-{uuid.uuid4().hex[:6]}")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--fail-at", type=int, default=13)
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--restart-delay", type=float, default=0.3)
    p.add_argument("--child", action="store_true")
    p.add_argument("--attempt", type=int, default=0)
    p.add_argument("--ckpt", default="")
    p.add_argument("--report", action="store_true", help="print `raydbg goodput` at the end")
    a = p.parse_args()
    if a.child:
        train(a.run, a.attempt, a.ckpt, a.steps, a.fail_at, a.every)
        return 0
    rc = supervise(a.run, a.steps, a.fail_at, a.every, a.restart_delay)
    telemetry.shutdown()
    print(f"run {a.run} finished (rc={rc})")
    if a.report:
        from raydbg.commands.telemetry import register

        parser = argparse.ArgumentParser(prog="raydbg")
        register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["goodput", a.run])
        return int(args.fn(args))
    return rc


if __name__ == "__main__":
    sys.exit(main())
