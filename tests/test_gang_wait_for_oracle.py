"""raydbg's wait-for graph against torch's own Flight Recorder analyzer, on real gloo ranks.

Four stuck training shapes (tests/fr_scenarios.py: tensor-parallel subgroups, HSDP on a 2x2
mesh, a deadlock of two groups entered in opposite orders, a 4-stage send/recv pipeline),
4 processes each, no Ray. Each rank writes its full Flight Recorder dump and what raydbg's
stacks thread sends (its process-group table, its send/recv peers), read in-process through
raydbg/_torch_internals/.

The oracle is torch's analyzer driven as a library
(`torch.distributed.flight_recorder.components.builder.build_db`, what `fr_trace` runs)
over the same dumps. gloo leaves the dumps' `pg_config` empty, so it is filled from the
ranks' own tables (the analyzer needs membership to pair entries; which rank is missing
from which collective is its own reading). Its verdict per collective is `missing_ranks`:
the ranks that joined wait for the missing ones, and its culprits are the missing ranks
that joined no unfinished collective themselves; its cycles are deadlocks. gloo records no
send/recv, so the analyzer sees nothing of the pipeline: that one is checked against the
pipeline's schedule instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import needs_torch

from raydbg.gang import collectives, wait_chain, wait_for

pytestmark = [needs_torch, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).with_name("fr_scenarios.py")
SCENARIOS = ("tensor_parallel", "hsdp", "deadlock", "pipeline")
WORLD = 4


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[int, dict[str, Any]]]]:
    """scenario -> rank -> dump; the four scenarios run side by side (16 processes)."""
    base = tmp_path_factory.mktemp("fr")
    procs: list[subprocess.Popen[bytes]] = []
    for name in SCENARIOS:
        (base / name).mkdir()
        for r in range(WORLD):
            with open(base / name / f"rank{r}.err", "wb") as err:
                procs.append(subprocess.Popen([sys.executable, str(SCRIPT), name, str(r), str(base / name)], stderr=err))
    try:
        deadline = time.monotonic() + 300
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                errors = {f"{e.parent.name} {e.stem}": e.read_text()[-800:] for e in sorted(base.glob("*/rank*.err"))}
                raise AssertionError(f"a scenario did not end ({p.args[2:4]}); the ranks' stderr: {errors}") from None
    finally:
        for p in procs:
            p.kill()
            p.wait()
    yield {name: {r: json.loads((base / name / f"rank{r}.json").read_text()) for r in range(WORLD)}
           for name in SCENARIOS}


def raydbg_reading(dumps: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """What the gateway computes from what the ranks' stacks threads send."""
    now = time.time_ns()
    return wait_for.analyze({r: {"collectives": collectives.rank_view(d, now), "process_groups": d["process_groups"],
                                 "p2p_waits": d["p2p_waits"]} for r, d in dumps.items()}, WORLD)


def torch_reading(dumps: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """torch's analyzer over the same dumps: edges (joined -> missing), culprits, cycles."""
    from torch.distributed.flight_recorder.components.builder import build_db

    details = {}
    for r, d in dumps.items():
        d = dict(d, entries=d.get("entries") or [])  # a rank that never started a collective has no list
        d["pg_config"] = {name: {"name": name, "desc": g["desc"], "ranks": json.dumps(wait_for.expand_ranks(g["ranks"]))}
                          for name, g in d["process_groups"].items()}
        details[f"rank{r}.json"] = d
    args = argparse.Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=True, mismatch_cap=10)
    logging.disable(logging.CRITICAL)  # the analyzer logs every collective it cannot pair
    try:
        db = build_db(details, args, details["rank0.json"]["version"])
    finally:
        logging.disable(logging.NOTSET)
    edges = {(j, m) for c in db.collectives if c.missing_ranks
             for j in set(c.expected_ranks) - set(c.missing_ranks) for m in c.missing_ranks}
    waiting, waited = {j for j, _ in edges}, {m for _, m in edges}
    return {"edges": edges, "culprits": sorted(waited - waiting), "in_cycles": _in_cycles(edges)}


def _in_cycles(edges: set[tuple[int, int]]) -> list[int]:
    """Ranks that can reach themselves (small graphs: a search from each)."""
    out_of: dict[int, set[int]] = {}
    for a, b in edges:
        out_of.setdefault(a, set()).add(b)
    found = []
    for start in out_of:
        seen, todo = set(), list(out_of[start])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += out_of.get(n, ())
        if start in seen:
            found.append(start)
    return sorted(found)


def collective_edges(found: dict[str, Any]) -> set[tuple[int, int]]:
    return {(r, k) for h in found["waits"] if h["kind"] == "collective" for r in h["ranks"] for k in h["on"]}


def where(r: int) -> str:
    return "stuck fr_scenarios.py"


def test_tensor_parallel_subgroups_agree_with_torchs_analyzer(dumps: dict[str, Any]) -> None:
    ours, torch_says = raydbg_reading(dumps["tensor_parallel"]), torch_reading(dumps["tensor_parallel"])
    assert torch_says["culprits"] == [3] and ours["culprits"] == torch_says["culprits"]
    assert collective_edges(ours) == torch_says["edges"] == {(0, 2), (0, 3), (1, 2), (1, 3), (2, 3)}
    assert wait_chain.chain(ours, where) == ["ranks 0,1 wait in all_reduce #2 (world) for 2,3",
                                           "rank 2 waits in all_reduce #1 (group [2,3]) for 3",
                                           "rank 3 is in stuck fr_scenarios.py"]


def test_hsdp_on_a_2x2_mesh_agrees_with_torchs_analyzer(dumps: dict[str, Any]) -> None:
    ours, torch_says = raydbg_reading(dumps["hsdp"]), torch_reading(dumps["hsdp"])
    assert torch_says["culprits"] == [3] and ours["culprits"] == [3]
    assert collective_edges(ours) == torch_says["edges"] == {(0, 2), (1, 3), (2, 3)}
    labels = sorted(h["group_label"] for h in ours["waits"])
    assert labels == ["group mesh_replicate [0,2]", "group mesh_replicate [1,3]", "group mesh_shard [2,3]"]


def test_two_groups_in_opposite_orders_are_the_same_deadlock_for_both(dumps: dict[str, Any]) -> None:
    ours, torch_says = raydbg_reading(dumps["deadlock"]), torch_reading(dumps["deadlock"])
    assert collective_edges(ours) == torch_says["edges"] == {(0, 1), (1, 0), (2, 0), (3, 0)}
    assert torch_says["culprits"] == ours["culprits"] == []
    assert [d["all"] for d in ours["deadlocks"]] == [torch_says["in_cycles"]] == [[0, 1]]
    assert wait_chain.chain(ours, where)[-1].startswith("deadlock: ranks 0 -> 1 -> 0")


def test_a_pipeline_stuck_at_stage_2_chains_through_the_stages(dumps: dict[str, Any]) -> None:
    """gloo records no send/recv: torch's analyzer sees no wait at all; raydbg reads the peers
    from the waiting frames. Checked against the schedule: stage 1 sends to 2, stage 3
    receives from 2, stage 0 receives stage 1's gradient."""
    ours, torch_says = raydbg_reading(dumps["pipeline"]), torch_reading(dumps["pipeline"])
    assert torch_says["edges"] == set()
    assert {r: d["p2p_waits"] for r, d in dumps["pipeline"].items()} == {
        0: [{"op": "recv", "peer": 1, "group": "0"}], 1: [{"op": "send", "peer": 2, "group": "0"}],
        2: [], 3: [{"op": "recv", "peer": 2, "group": "0"}]}
    assert ours["culprits"] == [2]
    assert wait_chain.chain(ours, where) == ["rank 0 waits in recv (world) for 1", "rank 1 waits in send (world) for 2",
                                           "rank 3 waits in recv (world) for 2", "rank 2 is in stuck fr_scenarios.py"]


def test_each_rank_reads_its_own_process_group_table(dumps: dict[str, Any]) -> None:
    """What raydbg/_torch_internals/groups.py reads in-process: the groups this rank is in, by
    name, with torch's description; the world in a few bytes."""
    tables = {r: d["process_groups"] for r, d in dumps["hsdp"].items()}
    assert tables[2]["0"] == {"desc": "default_pg", "ranks": {"start": 0, "step": 1, "count": 4}}
    by_desc = {g["desc"]: g["ranks"] for g in tables[2].values()}
    assert by_desc == {"default_pg": {"start": 0, "step": 1, "count": 4}, "mesh_replicate": [0, 2],
                       "mesh_shard": [2, 3]}
    assert len(json.dumps(tables[2])) < 300
    assert all(d.get("pg_config") in ({}, {"": {"desc": "", "name": "", "ranks": "[]"}})
               for d in dumps["hsdp"].values())  # gloo's dump has no membership of its own
