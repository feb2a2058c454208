"""The wait-for graph on synthetic ranks (pure): groups from the ranks' own tables, send/recv,
culprits as roots, cycles as deadlocks, mismatches, the chain one hop a line."""

from __future__ import annotations

from typing import Any

import pytest

from raydbg.gang import stack_classes, wait_chain, wait_for

WORLD = "0"


def g(seq: int, done: int | None, op: str = "all_reduce", sizes: Any = None, desc: str = "undefined") -> dict[str, Any]:
    """One group of a rank's Flight Recorder view: last started #seq, last completed #done."""
    return {"desc": desc, "started": {"seq": seq, "op": op, "sizes": sizes or [[4]]},
            "completed": None if done is None else {"seq": done, "op": op}, "recent": []}


def w(seq: int, done: int | None, **kw: Any) -> dict[str, Any]:
    return g(seq, done, desc="default_pg", **kw)


def table(n: int, *groups: tuple[str, list[int], str]) -> dict[str, Any]:
    """A rank's process-group table: the world of `n` and the named groups it is in."""
    out = {WORLD: {"desc": "default_pg", "ranks": {"start": 0, "step": 1, "count": n}}}
    out.update({name: {"desc": desc, "ranks": ranks} for name, ranks, desc in groups})
    return out


def ranks_of(views: dict[int, dict[str, Any] | None], tables: dict[int, dict[str, Any]] | None = None,
             p2p: dict[int, list[dict[str, Any]]] | None = None) -> dict[int, dict[str, Any]]:
    return {r: {"collectives": v, "process_groups": (tables or {}).get(r), "p2p_waits": (p2p or {}).get(r)}
            for r, v in views.items()}


def where(r: int) -> str:
    return f"step train.py:{80 + r}"


def per_group_reading(found: dict[str, Any]) -> list[int]:
    """What raydbg said before the graph: every rank some group waits for (breaking the graph
    on purpose means going back to this)."""
    return sorted({k for h in found["waits"] for k in h["on"]})


def tensor_parallel(table_of_rank3: bool = True) -> dict[int, dict[str, Any]]:
    """Subgroups {0,1} ("1") and {2,3} ("2"); rank 3 stuck before its subgroup's all_reduce #1."""
    tp = {0: ("1", [0, 1], "undefined"), 1: ("1", [0, 1], "undefined"), 2: ("2", [2, 3], "undefined"),
          3: ("2", [2, 3], "undefined")}
    tables = {r: table(4, tp[r]) for r in range(4)}
    if not table_of_rank3:
        del tables[3]
        tables[2] = table(4)  # nobody says rank 3 is in group 2
    views = {0: {WORLD: w(2, 1), "1": g(1, 1)}, 1: {WORLD: w(2, 1), "1": g(1, 1)},
             2: {WORLD: w(1, 1), "2": g(1, None)}, 3: {WORLD: w(1, 1)}}
    return ranks_of(views, tables)


def test_tensor_parallel_subgroups_name_the_one_rank_and_the_chain() -> None:
    found = wait_for.analyze(tensor_parallel(), 4)
    assert found["culprits"] == [3]
    assert found["deadlocks"] == [] and found["mismatches"] == []
    assert wait_chain.chain(found, where) == [
        "ranks 0,1 wait in all_reduce #2 (world) for 2,3",
        "rank 2 waits in all_reduce #1 (group [2,3]) for 3",
        "rank 3 is in step train.py:83",
    ]
    assert per_group_reading(found) == [2, 3]  # the reading the graph replaces named rank 2 too
    assert found["groups"] == {"0": "world", "1": "group [0,1]", "2": "group [2,3]"}


def test_a_member_that_never_started_in_a_group_is_behind_there_only_by_its_table() -> None:
    """Rank 3 has no entry in group 2: its table (or its peer's) says it is a member."""
    found = wait_for.analyze(tensor_parallel(table_of_rank3=False), 4)
    assert found["culprits"] == [2, 3]  # without membership group 2 is invisible: rank 2 looks free
    assert [h["group"] for h in found["waits"]] == [WORLD]


def test_hsdp_mesh_groups_with_one_description_stay_apart() -> None:
    """2x2 mesh: replicate {0,2} ("1"), {1,3} ("2"); shard {0,1} ("3"), {2,3} ("4"); rank 3 stuck
    before its shard reduce-scatter."""
    rep = {0: ("1", [0, 2]), 2: ("1", [0, 2]), 1: ("2", [1, 3]), 3: ("2", [1, 3])}
    shard = {0: ("3", [0, 1]), 1: ("3", [0, 1]), 2: ("4", [2, 3]), 3: ("4", [2, 3])}
    tables = {r: table(4, (*rep[r], "mesh_replicate"), (*shard[r], "mesh_shard")) for r in range(4)}
    views = {0: {"3": g(1, 1, desc="mesh_shard"), "1": g(1, None, desc="mesh_replicate")},
             1: {"3": g(1, 1, desc="mesh_shard"), "2": g(1, None, desc="mesh_replicate")},
             2: {"4": g(1, None, op="reduce_scatter", desc="mesh_shard")},
             3: {}}
    found = wait_for.analyze(ranks_of(views, tables), 4)
    assert found["culprits"] == [3]
    assert wait_chain.chain(found, where) == [
        "rank 0 waits in all_reduce #1 (group mesh_replicate [0,2]) for 2",
        "rank 1 waits in all_reduce #1 (group mesh_replicate [1,3]) for 3",
        "rank 2 waits in reduce_scatter #1 (group mesh_shard [2,3]) for 3",
        "rank 3 is in step train.py:83",
    ]


def test_a_pipeline_chain_through_send_and_recv_frames() -> None:
    """4 stages, gloo (no p2p in Flight Recorder): the peers from the waiting frames."""
    p2p = {0: [{"op": "recv", "peer": 1, "group": WORLD}], 1: [{"op": "send", "peer": 2, "group": WORLD}],
           2: [], 3: [{"op": "recv", "peer": 2, "group": WORLD}]}
    views = {r: {WORLD: w(1, 1)} for r in range(4)}
    found = wait_for.analyze(ranks_of(views, {r: table(4) for r in range(4)}, p2p), 4)
    assert found["culprits"] == [2]
    assert wait_chain.chain(found, where) == [
        "rank 0 waits in recv (world) for 1",
        "rank 1 waits in send (world) for 2",
        "rank 3 waits in recv (world) for 2",
        "rank 2 is in step train.py:82",
    ]
    assert [h["kind"] for h in found["waits"]] == ["p2p"] * 3


def test_a_send_whose_peer_receives_is_under_way_not_a_wait() -> None:
    p2p = {0: [{"op": "send", "peer": 1, "group": WORLD}], 1: [{"op": "recv", "peer": 0, "group": WORLD}]}
    found = wait_for.analyze(ranks_of({0: None, 1: None}, None, p2p), 2)
    assert found["waits"] == [] and found["culprits"] == []


def test_two_ranks_sending_to_each_other_deadlock() -> None:
    p2p = {0: [{"op": "send", "peer": 1, "group": WORLD}], 1: [{"op": "send", "peer": 0, "group": WORLD}]}
    found = wait_for.analyze(ranks_of({0: None, 1: None}, None, p2p), 2)
    assert found["culprits"] == []
    assert [d["ranks"] for d in found["deadlocks"]] == [[0, 1]]


def test_nccls_point_to_point_entries_map_group_ranks_to_global_ones() -> None:
    """Pipeline group "5" = global [4, 6] (group ranks 0, 1): rank 6 waits in recv from group rank 0."""
    tables = {4: table(8, ("5", [4, 6], "pp")), 6: table(8, ("5", [4, 6], "pp"))}
    pending = {"desc": "pp", **g(0, None), "p2p": [{"seq": 3, "op": "recv", "peer": 0, "sizes": [[8]]}]}
    found = wait_for.analyze(ranks_of({4: {}, 6: {"5": pending}}, tables), 8)
    (hop,) = found["waits"]
    assert (hop["ranks"], hop["op"], hop["on"], hop["group_label"]) == ([6], "recv", [4], "group pp [4,6]")
    assert found["culprits"] == [4]


def test_two_groups_entered_in_opposite_orders_are_a_deadlock_with_its_cycle() -> None:
    """Rank 0 in all_reduce of {0,1} ("1"), rank 1 in the world's, rank 2 in the world's too."""
    tables = {0: table(3, ("1", [0, 1], "undefined")), 1: table(3, ("1", [0, 1], "undefined")), 2: table(3)}
    views = {0: {WORLD: w(1, 1), "1": g(1, None)}, 1: {WORLD: w(2, 1)}, 2: {WORLD: w(2, 1)}}
    found = wait_for.analyze(ranks_of(views, tables), 3)
    assert found["culprits"] == []
    (cycle,) = found["deadlocks"]
    assert cycle["ranks"] == [0, 1] and cycle["all"] == [0, 1]
    assert [found["waits"][i]["group"] for i in cycle["hops"]] == ["1", WORLD]  # 0 waits in "1", 1 in the world
    assert wait_chain.chain(found, where) == [
        "rank 0 waits in all_reduce #1 (group [0,1]) for 1",
        "ranks 1,2 wait in all_reduce #2 (world) for 0",
        "deadlock: ranks 0 -> 1 -> 0 wait on each other (a cycle: none of them can go on)",
    ]
    assert per_group_reading(found) == [0, 1]  # the per-group reading called them culprits


def test_a_cycle_of_three_groups() -> None:
    """Rings {0,1} ("a"), {1,2} ("b"), {2,0} ("c"): each rank entered one and waits for the next."""
    groups = {"a": [0, 1], "b": [1, 2], "c": [0, 2]}
    tables = {r: table(3, *((n, m, "undefined") for n, m in groups.items() if r in m)) for r in range(3)}
    views = {0: {"a": g(1, None)}, 1: {"b": g(1, None)}, 2: {"c": g(1, None)}}
    found = wait_for.analyze(ranks_of(views, tables), 3)
    assert [d["ranks"] for d in found["deadlocks"]] == [[0, 1, 2]] and found["culprits"] == []


def test_async_ranks_wait_at_different_sequence_ids() -> None:
    """NCCL-style: rank 0 launched #5, rank 1 #4, rank 2 is at #3; each waits for those below it."""
    views = {0: {WORLD: w(5, 3)}, 1: {WORLD: w(4, 3)}, 2: {WORLD: w(3, 3)}}
    found = wait_for.analyze(ranks_of(views), 3)
    assert [(h["ranks"], h["seq"], h["on"]) for h in found["waits"]] == [([1], 4, [2]), ([0], 5, [1, 2])]
    assert found["culprits"] == [2]
    assert wait_chain.chain(found, where)[0] == "rank 0 waits in all_reduce #5 (world) for 1,2"


def test_a_tie_of_mismatched_collectives_names_both() -> None:
    views = {0: {WORLD: w(2, 1)}, 1: {WORLD: w(2, 1, op="broadcast", sizes=[[8]])}}
    found = wait_for.analyze(ranks_of(views), 2)
    assert found["waits"] == [] and found["culprits"] == [0, 1]
    lines = wait_chain.chain(found, where)
    assert lines[0] == "mismatch at #2 (world): rank 0: all_reduce [[4]]; rank 1: broadcast [[8]]"


def test_a_mismatch_decided_by_the_majority_reads_as_a_wait() -> None:
    views = {r: {WORLD: w(2, 1)} for r in (0, 2, 3)}
    views[1] = {WORLD: w(2, 1, sizes=[[8]])}
    found = wait_for.analyze(ranks_of(views), 4)
    assert wait_chain.chain(found, where)[0] == (
        "ranks 0,2,3 wait in all_reduce #2 (world) for 1 (which entered all_reduce [[8]] there instead)")
    assert found["culprits"] == [1]


def test_ranks_without_stacks_are_what_the_others_wait_for_when_nobody_else_is_behind() -> None:
    views = {r: {WORLD: w(2, 1)} for r in (0, 1, 2)}  # rank 3's stacks could not be taken
    found = wait_for.analyze(ranks_of(views, {r: table(4) for r in range(3)}), 4)
    (hop,) = found["waits"]
    assert (hop["kind"], hop["on"], hop["note"]) == ("unknown", [3], "no stacks there")
    assert wait_chain.chain(found, lambda r: None if r == 3 else where(r)) == [
        "ranks 0-2 wait in all_reduce #2 (world) for 3 (no stacks there)", "rank 3: no stacks"]


def test_a_healthy_run_has_no_waits() -> None:
    views = {r: {WORLD: w(7, 6)} for r in range(4)}  # all inside the same all_reduce
    found = wait_for.analyze(ranks_of(views, {r: table(4) for r in range(4)}), 4)
    assert (found["waits"], found["culprits"], found["deadlocks"]) == ([], [], [])
    assert wait_chain.chain(found, where) == []


def test_views_from_before_group_names_still_read() -> None:
    """An older rank's view, keyed by description ("default_pg"), no table."""
    views = {0: {"default_pg": {"started": {"seq": 2, "op": "all_reduce", "sizes": [[4]]},
                                "completed": {"seq": 1}}},
             1: {"default_pg": {"started": {"seq": 1, "op": "all_reduce", "sizes": [[4]]},
                                "completed": {"seq": 1}}}}
    found = wait_for.analyze(ranks_of(views), 2)
    assert found["culprits"] == [1] and found["waits"][0]["group_label"] == "world"


def test_a_long_chain_is_cut_with_a_count() -> None:
    n = 40  # rank i waits in send to i + 1; the last one is free
    p2p = {r: [{"op": "send", "peer": r + 1, "group": WORLD}] for r in range(n - 1)}
    found = wait_for.analyze(ranks_of(dict.fromkeys(range(n)), {r: table(n) for r in range(n)}, p2p), n)
    lines = wait_chain.chain(found, where)
    assert found["culprits"] == [n - 1]
    assert lines[0] == "rank 0 waits in send (world) for 1"  # outermost first
    assert lines[wait_chain.MAX_CHAIN_LINES] == f"... and {n - 1 - wait_chain.MAX_CHAIN_LINES} more waits (--json: waits)"
    assert lines[-1] == f"rank {n - 1} is in step train.py:{80 + n - 1}"


@pytest.mark.parametrize(("ranks", "text"), [
    ([1], "1"), ([0, 1], "0,1"), ([0, 1, 2, 3], "0-3"), ([3, 1], "1,3"),
    (list(range(0, 4096, 32)), "0,32,...,4064 (128 ranks)"), ([1, 2, 5, 9, 11, 12, 20, 30, 40], "1,2,5,9,11,12,... (9 ranks)"),
])
def test_ranks_text(ranks: list[int], text: str) -> None:
    assert wait_chain.ranks_text(ranks) == text


def test_compact_members_expand() -> None:
    assert wait_for.expand_ranks({"start": 3, "step": 8, "count": 3}) == [3, 11, 19]
    assert wait_for.expand_ranks([2, 0]) == [2, 0]  # group-rank order kept
    assert wait_for.expand_ranks({"start": 0}) is None and wait_for.expand_ranks("0-3") is None
    assert wait_for.expand_ranks({"start": 0, "step": 1, "count": 10**12}) is None  # not a list of 10^12


def test_run_summaries_carry_the_graph_and_each_ranks_groups_by_label() -> None:
    """stack_classes.runs: the graph's fields in the RunSummary, the culprit's place from its stack."""
    inputs = tensor_parallel()
    workers = []
    for r in range(4):
        frames = ([{"function": "all_reduce", "file": "/x/site-packages/torch/distributed/distributed_c10d.py",
                    "line": 1}] if r < 3 else []) + [{"function": "train_step", "file": "/app/train.py", "line": 40 + r}]
        workers.append({"node_id": "n", "pid": 100 + r, "job_id": "01", "train_run": "tp", "world_rank": r,
                        "world_size": 4, "threads": [{"name": "TrainingThread(x)", "frames": frames}], **inputs[r]})
    (run,) = stack_classes.runs(workers, {})
    assert run["culprits"] == [3] and run["collectives_seen"] == [0, 1, 2, 3]
    assert run["chain"][-1] == "rank 3 is in train_step train.py:43"
    assert run["ranks"][2]["collectives"]["2"]["label"] == "group [2,3]"
    assert run["ranks"][0]["collectives"]["0"]["label"] == "world"


def test_malformed_views_are_read_as_no_collective_not_an_error() -> None:
    """Views come from other processes (another raydbg version, a record cut to size)."""
    views = {0: {WORLD: w(2, 1)}, 1: {WORLD: {"desc": "default_pg", "started": None, "completed": "x"}},
             2: {WORLD: "cut", "5": {"p2p": ["x"]}}, 3: {WORLD: {"started": {"seq": "two"}}}, 4: "cut"}
    found = wait_for.analyze(ranks_of(views, {r: table(4) for r in range(4)}), 4)
    assert found["culprits"] == [1, 2, 3]
