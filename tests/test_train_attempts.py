"""The attempts summary of Ray Train runs (raydbg/telemetry/attempts.py): pure, no Ray."""

from __future__ import annotations

from typing import Any

from raydbg.gang import report
from raydbg.telemetry import attempts

# What Ray 2.60's Train leaves for an attempt whose rank 1 raised (WorkerGroupPollStatus.get_error_string).
RANK1_DETAIL = """[Rank 1 Error Snippet]:
Traceback (most recent call last):
  File "/work/tests/e2e/restart_targets.py", line 19, in fail_once
    raise RuntimeError(FAILURE)
RuntimeError: planted failure on rank 1
"""
CHAINED = """[Rank 0,2 Error Snippet]:
Traceback (most recent call last):
  File "a.py", line 1, in f
    g()
KeyError: 'x'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "a.py", line 3, in h
    raise ValueError("bad batch")
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: bad batch
second line of the message
[Rank 3 Error Snippet]:
Worker health check failed: the actor died unexpectedly
"""


def _worker(rank: int, node: str) -> dict[str, Any]:
    return {"world_rank": rank, "local_rank": 0, "node_id": node, "node_ip": f"10.0.0.{rank}", "pid": 100 + rank,
            "actor_id": f"a{rank}", "status": "DEAD"}


def _records() -> list[dict[str, Any]]:
    s = 1_000_000_000
    return [{
        "run_id": "rid", "name": "train-x", "job_id": "02000000", "status": "RUNNING", "status_detail": None,
        "start_time_ns": 100 * s, "end_time_ns": None,
        "attempts": [
            {"attempt_id": "a1", "status": "ERRORED", "status_detail": RANK1_DETAIL, "start_time_ns": 100 * s,
             "end_time_ns": 108 * s, "workers": [_worker(0, "n0"), _worker(1, "n1")]},
            {"attempt_id": "a2", "status": "RUNNING", "status_detail": None, "start_time_ns": 110 * s,
             "end_time_ns": None, "workers": [_worker(0, "n0"), _worker(1, "n2")]},
        ]}]


def test_failed_attempt_names_rank_node_and_error() -> None:
    (run,) = attempts.summarize(_records(), now=130.0)
    first, second = run["attempts"]
    assert (first["number"], first["status"], first["started"], first["ended"], first["duration_s"]) == (
        1, "ERRORED", 100.0, 108.0, 8.0)
    assert first["failed"] == [{"world_rank": 1, "node_id": "n1", "node_ip": "10.0.0.1", "pid": 101,
                                "error": "RuntimeError: planted failure on rank 1"}]
    assert first["error"] == "RuntimeError: planted failure on rank 1"
    # The running attempt: no end, its duration so far, nothing failed.
    assert (second["number"], second["status"], second["ended"], second["duration_s"], second["failed"]) == (
        2, "RUNNING", None, 20.0, [])
    line = attempts.attempt_line(first)
    assert line.endswith("ERRORED  rank 1 on 10.0.0.1 (node n1): RuntimeError: planted failure on rank 1")
    assert "-now " in attempts.attempt_line(second) and attempts.attempt_line(second).endswith("20.0s  RUNNING")


def test_several_rank_groups_and_chained_tracebacks() -> None:
    groups = attempts.rank_errors(CHAINED)
    assert groups == [([0, 2], "ValueError: bad batch"), ([3], "Worker health check failed: the actor died unexpectedly")]
    assert attempts.rank_errors(None) == [] and attempts.rank_errors("no snippet headers") == []


def test_error_line_without_traceback_and_bounded() -> None:
    assert attempts.error_line("\n\nTraining failed: the controller died\nmore") == "Training failed: the controller died"
    assert attempts.error_line(None) is None and attempts.error_line("  \n") is None
    long = attempts.error_line("E" * 1000)
    assert long is not None and len(long) == attempts.MAX_ERROR_CHARS and long.endswith("...")


def test_aborted_attempt_without_rank_sections_keeps_its_reason() -> None:
    recs = _records()
    recs[0]["attempts"][1].update(status="ABORTED", status_detail="Aborted: controller gone", end_time_ns=111 * 10**9)
    second = attempts.summarize(recs)[0]["attempts"][1]
    assert second["failed"] == [] and second["error"] == "Aborted: controller gone" and second["duration_s"] == 1.0


def test_which_runs_a_name_picks() -> None:
    older = {**_records()[0], "run_id": "old", "start_time_ns": 1, "status": "ERRORED"}
    summaries = attempts.summarize([*_records(), older])
    assert [s["run_id"] for s in summaries] == ["old", "rid"]  # oldest first
    assert [s["run_id"] for s in attempts.matching(summaries, "train-x")] == ["old", "rid"]
    assert [s["run_id"] for s in attempts.matching(summaries, "rid")] == ["rid"]
    assert [s["run_id"] for s in attempts.matching(summaries, "0200")] == ["old", "rid"]
    assert [s["run_id"] for s in attempts.matching(summaries, "latest")] == ["rid"]
    assert attempts.matching(summaries, "other") == []
    assert [a["attempt_id"] for a in attempts.attempts_of(summaries, "train-x", "02000000")] == ["a1", "a2"]
    assert attempts.attempts_of(summaries, "train-x", "03000000") == []


def test_goodput_and_stacks_print_one_line_per_attempt() -> None:
    (run,) = attempts.summarize(_records(), now=130.0)
    lines = attempts.run_lines(run)
    assert lines[0] == "Train run train-x (id rid, job 02000000): RUNNING"
    assert [ln.split()[:2] for ln in lines[1:]] == [["attempt", "1"], ["attempt", "2"]]
    summary = {"run": "train-x", "job_id": "02000000", "world_size": 2, "ranks": [], "held_by": [], "waiting": [],
               "not_waiting": [], "attempts": run["attempts"]}
    text = report.run_lines(summary, [])
    assert text[1].startswith("  attempt 1 ") and "rank 1 on 10.0.0.1" in text[1]
    assert text[2].startswith("  attempt 2 ") and text[2].endswith("RUNNING")
    # A run Train's state does not know (tracking off): the report as before.
    assert not any("attempt" in ln for ln in report.run_lines({**summary, "attempts": []}, []))


def test_adapter_reads_what_this_ray_has_and_live_runs_keep_their_shape() -> None:
    from enum import Enum
    from types import SimpleNamespace

    from raydbg._ray_internals import live_runs, train

    class Status(str, Enum):
        ERRORED = "ERRORED"

    old_worker = SimpleNamespace(world_rank=1, local_rank=0, node_id="n1", pid=7, actor_id="a")  # no node_ip, status
    rec = train._attempt_record(SimpleNamespace(attempt_id="x", status=Status.ERRORED, start_time_ns=1,
                                                workers=[old_worker]))
    assert rec["status"] == "ERRORED" and rec["status_detail"] is None and rec["end_time_ns"] is None
    assert rec["workers"] == [{"world_rank": 1, "local_rank": 0, "node_id": "n1", "node_ip": None, "pid": 7,
                               "actor_id": "a", "status": None}]
    (live,) = live_runs(_records())  # the labels' input: the current attempt's workers
    assert live["run_id"] == "rid" and live["world_size"] == 2 and live["workers"][1]["node_id"] == "n2"
    assert live_runs([{**_records()[0], "status": "FINISHED"}]) == []
