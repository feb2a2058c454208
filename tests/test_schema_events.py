"""The typed event details and gang answers (raydbg/schema.py): hang, straggler and memory.kill
details, the RunSummary of a stacks answer, the StepsRun of a steps answer. Each round-trips
what its real writer produced; a malformed one is refused in one line (no Ray)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from doubles import FakeGcs
from test_gang_stragglers import FAST, SLOW, beats, rec, with_data
from test_gang_wait_for import WORLD, g, table, tensor_parallel, w
from test_memory_monitor import GiB, MiB, make, task

from raydbg import registry, schema, validate
from raydbg.gang import cluster_view, hang, hang_service, stack_classes, stragglers
from raydbg.memory import service
from raydbg.memory.policy import IDLE, Candidate


def round_trips(cls: type[schema.Record], value: dict[str, Any]) -> None:
    """`value` decodes as a `cls` and encodes back to itself, field for field."""
    built = msgspec.convert(value, cls)
    assert json.loads(msgspec.json.encode(built)) == json.loads(json.dumps(value))
    assert validate.check(cls, value, fill=False) is value


def refused(cls: type[schema.Record], value: dict[str, Any], where: str) -> None:
    with pytest.raises(validate.Malformed) as err:
        validate.check(cls, value)
    assert "\n" not in str(err.value) and where in str(err.value), err.value


def workers_of(inputs: dict[int, dict[str, Any]], run: str = "tp") -> list[dict[str, Any]]:
    """WorkerStacks of a run: ranks in an all_reduce but the last, which is at its own work."""
    out = []
    for r in sorted(inputs):
        frames = ([{"function": "all_reduce", "file": "/x/site-packages/torch/distributed/distributed_c10d.py",
                    "line": 1}] if r < len(inputs) - 1 else []) + [
            {"function": "train_step", "file": "/app/train.py", "line": 40 + r}]
        out.append({"node_id": "n", "pid": 100 + r, "job_id": "01", "train_run": run, "world_rank": r,
                    "world_size": len(inputs), "threads": [{"name": "TrainingThread(x)", "frames": frames}],
                    **inputs[r]})
    return out


def summaries(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The RunSummaries cluster_view.cluster_stacks writes for `workers` (no Train state: no attempts)."""
    runs = stack_classes.runs(workers, {("01", "tp", 0): 1.0}, now=5.0)
    for r in runs:
        r["attempts"] = []
    return runs


def stacks_answer(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """What cluster_view.cluster_stacks answers for `workers` (its runs, classes and errors)."""
    return {"classes": stack_classes.group(workers), "runs": summaries(workers),
            "errors": [{"node_id": "n", "pid": 7, "error": "x"}]}


def test_run_summaries_round_trip_with_culprits_deadlocks_and_mismatches() -> None:
    (tp,) = summaries(workers_of(tensor_parallel()))
    assert tp["culprits"] == [3] and tp["waits"] and tp["ranks"][0]["collectives"]
    round_trips(schema.RunSummary, tp)
    tables = {0: table(3, ("1", [0, 1], "undefined")), 1: table(3, ("1", [0, 1], "undefined")), 2: table(3)}
    views = {0: {WORLD: w(1, 1), "1": g(1, None)}, 1: {WORLD: w(2, 1)}, 2: {WORLD: w(2, 1)}}
    inputs = {r: {"collectives": views[r], "process_groups": tables[r], "p2p_waits": None} for r in range(3)}
    (cycle,) = summaries(workers_of(inputs))
    assert cycle["deadlocks"]
    round_trips(schema.RunSummary, cycle)
    views = {0: {WORLD: w(2, 1)}, 1: {WORLD: w(2, 1, op="broadcast", sizes=[[8]])}}
    inputs = {r: {"collectives": views[r], "process_groups": None, "p2p_waits": None} for r in range(2)}
    (odd,) = summaries(workers_of(inputs))
    assert odd["mismatches"]
    round_trips(schema.RunSummary, odd)
    refused(schema.RunSummary, {**tp, "ranks": [{"world_rank": "0"}]}, "$.ranks[0].world_rank")
    refused(schema.RunSummary, {**tp, "waits": [{"on": "3"}]}, "$.waits[0].on")


def test_a_hang_event_is_written_and_read_as_hang_details(kv: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1000.0
    beats_ = [{"job_id": "01", "train_run": "tp", "world_rank": r, "world_size": 4, "pid": 100 + r, "node_id": "n",
               "step": 9, "ts": now - 400} for r in range(4)]
    (found,) = hang.HangDecider(300.0).update(beats_, [], now)
    answer = stacks_answer(workers_of(tensor_parallel()))

    async def stacks(**kw: Any) -> dict[str, Any]:
        return answer

    monkeypatch.setattr(cluster_view, "cluster_stacks", stacks)
    server = type("Server", (), {"token": "t", "node_id": "n"})()
    event = asyncio.run(hang_service.record(server, found))  # type: ignore[arg-type]
    details = event["details"]
    assert details["culprits"][0]["world_rank"] == 3 and details["culprits"][0]["stack_class"]["frames"]
    round_trips(schema.HangDetails, details)
    [back] = registry.events()  # the reader checks the details against their kind's struct
    assert back["details"] == details
    refused(schema.HangDetails, {**details, "stalled_for_s": "long"}, "$.stalled_for_s")
    with pytest.raises(validate.Malformed, match=r"^hang details: .*\$\.culprits\[0\]\.stack_class"):
        registry.record_event("hang", "m", **{**details, "culprits": [{"stack_class": 3}]})


def test_a_straggler_event_is_written_and_read_as_straggler_details(kv: FakeGcs,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    slow = [with_data(rec(0, [SLOW] * 6), [0.3] * 6)] + [with_data(rec(r, [FAST] * 6), [0.0] * 6) for r in (1, 2)]
    (found,) = stragglers.StragglerDecider(stragglers.Settings()).update(slow, [])
    klass = {"id": "c0", "summary": "step train.py:1", "members": [{"node_id": "n0", "pid": 100, "world_rank": 0}],
             "count": 1, "total": 3, "paused": False, "in_collective": False, "thread": "MainThread",
             "frames": [{"function": "step", "file": "/app/train.py", "line": 1}]}

    async def stacks(**kw: Any) -> dict[str, Any]:
        return {"classes": [klass], "runs": [], "errors": []}

    monkeypatch.setattr(cluster_view, "cluster_stacks", stacks)
    server = type("Server", (), {"token": "t", "node_id": "n"})()
    event = asyncio.run(hang_service.record_straggler(server, found))  # type: ignore[arg-type]
    details = event["details"]
    assert details["stack_class"]["id"] == "c0" and details["data"]["data_wait_s"] == 0.3
    round_trips(schema.StragglerDetails, details)
    [back] = registry.events()
    assert back["details"] == details
    refused(schema.StragglerDetails, {**details, "data": {"compute_s": "x"}}, "$.data.compute_s")


def test_a_memory_kill_event_is_written_and_read_as_memory_kill_details(tmp_path: Path) -> None:
    cands = [task(1, 2 * GiB, 5, retries=0, name="precious"), task(2, 600 * MiB, 1), task(3, 500 * MiB, 9),
             Candidate(pid=4, memory=10 * MiB, kind=IDLE)]
    mon, killed, events, _, _ = make(tmp_path, [int(3.8 * GiB)], cands)
    mon.poll()
    (event,) = events
    assert killed == [3] and event["kind"] == "memory.kill"
    round_trips(schema.MemoryKillDetails, event["details"])
    round_trips(schema.KillVictim, event["details"]["victim"])

    class Reg:
        EVENT = "event/"
        puts: dict[str, Any] = {}

        def put(self, key: str, value: dict[str, Any]) -> None:
            self.puts[key] = value

    reg = Reg()
    service.Recorder(reg, None).record_event(event)  # the writer checks the details
    (stored,) = reg.puts.values()
    assert validate.record("event", None, json.dumps(stored).encode())["details"] == event["details"]
    bad = {**event, "details": {**event["details"], "victim": {"pid": "3"}}}
    with pytest.raises(validate.Malformed, match=r"^memory.kill details: .*\$\.victim\.pid"):
        service.Recorder(reg, None).record_event(bad)
    with pytest.raises(validate.Malformed, match=r"^memory.kill details: .*\$\.victim\.pid"):
        validate.record("event", None, json.dumps(bad).encode())


def test_a_steps_answer_is_steps_runs() -> None:
    slow = [with_data(rec(0, [SLOW] * 6), [0.3] * 6)] + [with_data(rec(r, [FAST] * 6), [0.0] * 6) for r in (1, 2)]
    (run,) = stragglers.steps_view(slow, now=10.0)
    assert run["stragglers"] == [0] and run["ranks"][0]["busy_s"]
    round_trips(schema.StepsRun, run)
    round_trips(schema.StepsRank, run["ranks"][0])
    refused(schema.StepsRun, {**run, "ranks": [{"world_rank": 0, "busy_s": ["x"]}]}, "$.ranks[0].busy_s[0]")
    (plain,) = stragglers.steps_view(beats([SLOW] * 6, [FAST] * 6), now=10.0)
    round_trips(schema.StepsRun, plain)


def test_the_client_drops_a_malformed_run_into_errors_and_passes_good_answers_as_they_came() -> None:
    from raydbg.client import checked_runs

    (run,) = stragglers.steps_view(beats([SLOW] * 6, [FAST] * 6), now=10.0)
    good = {"runs": [run], "errors": []}
    assert checked_runs(good, "StepsRun") is good
    bad = checked_runs({"runs": [run, {"train_run": 3}]}, "StepsRun")
    assert bad["runs"] == [run]
    (err,) = bad["errors"]
    assert err["error"].startswith("malformed StepsRun from the gateway: ") and "$.train_run" in err["error"]
    stacks = stacks_answer(workers_of(tensor_parallel()))
    assert checked_runs(stacks, "RunSummary") is stacks


def test_a_cut_event_is_checked_at_its_top_level_only() -> None:
    """record_fit's markers stand in a cut record's lists: its details cannot be typed then."""
    from raydbg import record_fit

    ranks = [{"world_rank": r, "pid": 100 + r, "node_id": "n" * 56} for r in range(20_000)]
    event = {"id": "0badf00d", "ts": 1.0, "kind": "hang", "message": "m", "details": {"ranks": ranks}}
    cut = record_fit.fit(event)
    assert record_fit.NOTE.encode() in cut
    assert validate.record("event", None, cut)["kind"] == "hang"
