"""Goodput: a real training loop (examples/telemetry_goodput.py) with an injected failure gives
a report whose parts add up to the wall time and that shows the time lost to the failure;
`raydbg trace` / `raydbg goodput` read the embedded files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from raydbg.commands.telemetry import register
from raydbg.telemetry import goodput, reader

EXAMPLE = Path(__file__).parents[1] / "examples" / "telemetry_goodput.py"


def _cli(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="raydbg")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.fn(args))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("goodput")
    env = {**os.environ, "RAYDBG_TELEMETRY_DIR": str(d / "telemetry")}
    cmd = [sys.executable, str(EXAMPLE), "--run", "r1", "--steps", "20", "--fail-at", "13"]
    cmd += ["--every", "5", "--restart-delay", "0.4"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "injected failure at step 13" in out.stderr  # the first attempt really crashed
    return d / "telemetry"


def _spans(run_dir: Path) -> list[dict[str, Any]]:
    return goodput.select(reader.spans([str(run_dir)]), "r1")


def test_parts_add_up_and_show_the_failure(run_dir: Path) -> None:
    spans = _spans(run_dir)
    report = goodput.compute(spans, "r1")
    wall = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    assert abs(sum(report.parts.values()) - wall) <= 0.02 * wall
    assert report.attempts == 2 and report.steps == 20 and report.steps_redone == 3

    # Independent measure of the redone work: attempt 0, from the end of the checkpointed
    # step 10 to its last span (steps 11-13 and their data waits).
    a0 = [s for s in spans if s["attributes"].get("train.attempt") == 0]
    step10 = next(
        s for s in a0 if s["name"].endswith(".step") and s["attributes"]["train.step"] == 10
    )
    lost = max(s["end"] for s in a0) - step10["end"]
    assert report.parts["lost_redo"] == pytest.approx(lost, rel=0.1, abs=0.02)
    assert report.parts["lost_redo"] > 0.05
    # The restart covers the supervisor's 0.4 s delay plus the new process's start-up.
    first_a1 = min(
        s["start"]
        for s in spans
        if s["name"].endswith(".step") and s["attributes"].get("train.attempt") == 1
    )
    assert report.parts["restart"] == pytest.approx(first_a1 - max(s["end"] for s in a0), rel=0.05)
    assert report.parts["restart"] > 0.4
    assert report.parts["compute"] > 0 and report.parts["data"] > 0
    assert report.parts["checkpoint_restore"] > 0 and report.parts["startup"] > 0.1
    assert 0 < report.goodput < 1


def test_goodput_cli_writes_table_and_png(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "t.png"
    # --no-attempts: these read files only (no cluster's gateway asked for Train attempts).
    assert _cli(["goodput", "latest", "--dir", str(run_dir), "--png", str(png), "--no-attempts"]) == 0
    out = capsys.readouterr().out
    assert "run r1" in out and "lost to failures: restart" in out and str(png) in out
    with Image.open(png) as img:
        assert img.format == "PNG" and img.size[0] == 1400
    assert _cli(["goodput", "r1", "--dir", str(run_dir), "--no-png", "--json", "--no-attempts"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["steps_redone"] == 3 and data["png"] is None
    assert _cli(["goodput", "nope", "--dir", str(run_dir), "--no-png", "--no-attempts"]) == 1
    assert "recent runs: r1" in capsys.readouterr().err


def test_goodput_cli_prints_the_runs_attempts_under_the_table(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The attempts come from the gateway (tests/e2e/test_train_restarts.py asks a real one)."""
    from raydbg.commands import telemetry as command
    from raydbg.telemetry import attempts

    detail = "[Rank 1 Error Snippet]:\nTraceback (most recent call last):\n  File \"t.py\", line 1, in f\nOSError: disk\n"
    recs = [{"run_id": "id1", "name": "r1", "job_id": "01000000", "status": "FINISHED", "start_time_ns": 10**9,
             "attempts": [{"attempt_id": "a", "status": "ERRORED", "status_detail": detail, "start_time_ns": 10**9,
                           "end_time_ns": 3 * 10**9, "workers": [{"world_rank": 1, "node_ip": "10.0.0.9"}]},
                          {"attempt_id": "b", "status": "FINISHED", "start_time_ns": 4 * 10**9,
                           "end_time_ns": 9 * 10**9, "workers": []}]}]
    asked: list[str] = []

    def fake(args: Any, run: str) -> tuple[list[dict[str, Any]], str | None]:
        asked.append(run)
        return attempts.matching(attempts.summarize(recs), run), None

    monkeypatch.setattr(command, "_train_runs", fake)
    assert _cli(["goodput", "latest", "--dir", str(run_dir), "--no-png"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert asked == ["r1"]  # 'latest' is the run the spans name
    at = out.index("Train run r1 (id id1, job 01000000): FINISHED")
    assert out[at - 1].startswith("of which lost to failures")  # under the table
    assert out[at + 1].endswith("2.0s  ERRORED  rank 1 on 10.0.0.9: OSError: disk")
    assert out[at + 2].endswith("5.0s  FINISHED")
    assert _cli(["goodput", "r1", "--dir", str(run_dir), "--no-png", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["train_runs_error"] is None and data["steps_redone"] == 3
    assert [a["status"] for a in data["train_runs"][0]["attempts"]] == ["ERRORED", "FINISHED"]


def test_trace_cli_lists_filters_and_summarises(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(["trace", "--dir", str(run_dir), "-n", "5", "--name", "*.checkpoint.*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 5 and all("checkpoint" in x for x in lines[1:])
    assert _cli(["trace", "--dir", str(run_dir), "--stats", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["example.train.step"]["count"] == 23  # 13 in the failed attempt + 10 after
    assert rows["example.train.run"]["count"] == 1
    assert rows["example.train.step"]["p95"] >= rows["example.train.step"]["p50"] > 0


def test_sweep_gives_each_instant_one_category() -> None:
    def sp(name: str, a: float, b: float, **attrs: Any) -> dict[str, Any]:
        return {"name": name, "start": a, "end": b, "attributes": attrs}

    spans = [
        sp("x.run", 0, 10),
        sp("x.step", 2, 4, **{"train.step": 1}),
        sp("x.data_wait", 2, 3, **{"train.step": 1}),
        sp("x.checkpoint.save", 4, 5, **{"train.step": 1}),
        sp("x.step", 5, 6, **{"train.step": 2}),
        sp("x.step", 8, 9, **{"train.step": 2, "train.attempt": 1}),
        sp("x.checkpoint.restore", 7, 7.5, **{"train.step": 1, "train.attempt": 1}),
    ]
    r = goodput.compute(spans, "x")
    assert r.parts == pytest.approx(
        {
            "startup": 2,
            "data": 1,
            "compute": 2,
            "checkpoint_save": 1,
            "checkpoint_restore": 0.5,
            "lost_redo": 1,  # step 2 of attempt 0 (5-6) was redone
            "restart": 1.5,  # 6-8 less the restore
            "idle": 1,  # 9-10
        }
    )
    assert r.steps_redone == 1 and r.attempts == 2


def test_sd_style_spans_infer_attempts_from_processes() -> None:
    """sd_reference's names (`step=`, `.checkpoint`, `.restore`, no attempt attribute): a new
    process for rank 0 is a new attempt, and the unnumbered save kept step 1."""

    def sp(name: str, a: float, b: float, pid: int, **attrs: Any) -> dict[str, Any]:
        return {
            "name": name,
            "start": a,
            "end": b,
            "attributes": attrs,
            "resource": {"process.pid": pid},
        }

    spans = [
        sp("sd.train.step", 1, 2, 10, step=1),
        sp("sd.train.checkpoint", 2, 2.5, 10),
        sp("sd.train.step", 2.5, 3.5, 10, step=2),
        sp("sd.train.restore", 5, 5.5, 11),
        sp("sd.train.step", 6, 7, 11, step=2),
    ]
    r = goodput.compute(spans, "job")
    assert r.attempts == 2 and r.steps_redone == 1 and r.steps == 2
    assert r.parts["lost_redo"] == pytest.approx(1.0)  # step 2 in the first process
    assert r.parts["restart"] == pytest.approx(2.0)  # 3.5-6 less the 0.5 s restore
    assert r.parts["checkpoint_save"] == pytest.approx(0.5)
    assert sum(r.parts.values()) == pytest.approx(r.wall)
