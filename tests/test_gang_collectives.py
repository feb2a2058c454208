"""Which collective each rank is in: views of Flight Recorder dumps, merged by the wait-for graph.

Synthetic dumps in the format torch 2.13 writes, and real ones from three gloo processes.
The graph itself (many shapes) is tests/test_gang_wait_for.py; real training shapes against
torch's own analyzer, tests/test_gang_wait_for_oracle.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from doubles import free_port

from raydbg.gang import collectives, wait_chain, wait_for

NOW = 1_000_000 * 10**9


def entry(seq: int, op: str = "all_reduce", retired: bool = True, sizes: list[list[int]] | None = None,
          group: str = "0", desc: str = "default_pg", age_s: float = 1.0) -> dict[str, Any]:
    return {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": sizes or [[4]],
            "input_dtypes": ["Float"], "is_p2p": False, "p2p_seq_id": 0, "pg_id": 0,
            "process_group": [group, desc], "retired": retired, "state": "scheduled",
            "time_created_ns": NOW - int(age_s * 1e9)}


def p2p_entry(seq: int, name: str, state: str = "started", group: str = "5") -> dict[str, Any]:
    """NCCL's recorder: `nccl:send 0->1` (group ranks), `nccl:recv 1<-0`."""
    return {"collective_seq_id": 0, "p2p_seq_id": seq, "profiling_name": f"nccl:{name}", "input_sizes": [[8]],
            "input_dtypes": ["Float"], "is_p2p": True, "pg_id": 3, "process_group": [group, "pp"],
            "retired": False, "state": state, "time_created_ns": NOW - 2 * 10**9}


def dump(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"entries": list(entries), "version": "2.10", "pg_config": {}, "pg_status": {}}


def culprits(views: dict[int, dict[str, Any]]) -> list[int]:
    return list(wait_for.analyze({r: {"collectives": v} for r, v in views.items()})["culprits"])


def test_rank_view_last_started_and_completed() -> None:
    view = collectives.rank_view(dump(entry(1), entry(2, age_s=3.5, retired=False)), NOW)
    g = view["0"]
    assert g["desc"] == "default_pg"
    assert (g["started"]["seq"], g["started"]["op"], g["started"]["since_s"]) == (2, "all_reduce", 3.5)
    assert g["completed"]["seq"] == 1 and [b["seq"] for b in g["recent"]] == [1, 2]


def test_groups_are_told_apart_by_name_not_by_description() -> None:
    """gloo names every subgroup `undefined`, a DeviceMesh dimension's groups share one description."""
    view = collectives.rank_view(dump(entry(1, group="1", desc="undefined"), entry(1, group="2", desc="undefined"),
                                      entry(2, group="2", desc="undefined", retired=False)), NOW)
    assert sorted(view) == ["1", "2"] and view["2"]["started"]["seq"] == 2 and view["1"]["started"]["seq"] == 1


def test_nccls_pending_point_to_point_entries_are_kept_with_their_peer() -> None:
    view = collectives.rank_view(dump(entry(1), p2p_entry(1, "send 0->1", state="completed"),
                                      p2p_entry(2, "recv 0<-1")), NOW)
    assert view["5"]["started"]["seq"] == 0  # no collective in that group: only send/recv
    assert [(p["op"], p["peer"], p["seq"]) for p in view["5"]["p2p"]] == [("recv", 1, 2)]  # the done send left out
    assert "p2p" not in view["0"]


def test_the_rank_behind_is_named_with_the_collective_the_others_wait_in() -> None:
    views = {r: collectives.rank_view(dump(entry(1), entry(2, retired=False)), NOW) for r in (0, 1, 3)}
    views[2] = collectives.rank_view(dump(entry(1)), NOW)
    found = wait_for.analyze({r: {"collectives": v} for r, v in views.items()})
    (hop,) = found["waits"]
    assert (hop["kind"], hop["seq"], hop["op"], hop["ranks"], hop["on"]) == ("collective", 2, "all_reduce", [0, 1, 3], [2])
    assert found["culprits"] == [2]
    assert wait_chain.chain(found, lambda r: None) == ["ranks 0,1,3 wait in all_reduce #2 (world) for 2", "rank 2: no stacks"]


def test_a_rank_in_the_group_with_no_collective_yet_is_behind_in_the_world_group() -> None:
    views = {r: collectives.rank_view(dump(entry(1, retired=False)), NOW) for r in (0, 2)}
    views[1] = collectives.rank_view(dump(), NOW)  # stuck before its first collective
    assert views[1] == {}
    assert culprits(views) == [1]


def test_agreeing_ranks_and_groups_apart() -> None:
    same = {r: collectives.rank_view(dump(entry(1), entry(2), entry(1, group="tp", desc="tp")), NOW) for r in range(4)}
    assert wait_for.analyze({r: {"collectives": v} for r, v in same.items()})["waits"] == []
    # Only the "tp" group disagrees: ranks 1 and 2 are behind there.
    same[3] = collectives.rank_view(dump(entry(1), entry(2)), NOW)
    same[0] = collectives.rank_view(dump(entry(1), entry(2), entry(1, group="tp", desc="tp"),
                                         entry(2, group="tp", desc="tp", retired=False)), NOW)
    found = wait_for.analyze({r: {"collectives": v} for r, v in same.items()})
    assert [(h["group"], h["seq"], h["ranks"], h["on"]) for h in found["waits"]] == [("tp", 2, [0], [1, 2])]


def test_mismatched_collective_at_the_same_sequence_id() -> None:
    views = {r: collectives.rank_view(dump(entry(1), entry(2, retired=False)), NOW) for r in (0, 1, 2)}
    views[1] = collectives.rank_view(dump(entry(1), entry(2, op="broadcast", retired=False)), NOW)
    found = wait_for.analyze({r: {"collectives": v} for r, v in views.items()})
    (hop,) = found["waits"]
    assert (hop["kind"], hop["seq"], hop["ranks"], hop["on"]) == ("mismatch", 2, [0, 2], [1])
    assert found["culprits"] == [1] and found["mismatches"][0]["odd"] == [1]
    views[1] = collectives.rank_view(dump(entry(1), entry(2, sizes=[[8]], retired=False)), NOW)
    assert culprits(views) == [1]  # same op, other sizes


RANK = textwrap.dedent("""
    import json, os, sys, threading, time
    os.environ["TORCH_FR_BUFFER_SIZE"] = "200"
    import torch, torch.distributed as dist
    rank, out = int(sys.argv[1]), sys.argv[2]
    # A file rendezvous: no port to be taken by another process before rank 0 binds it.
    dist.init_process_group("gloo", init_method="file://" + os.environ["STORE"], rank=rank, world_size=3)
    t = torch.ones(4)
    dist.all_reduce(t)
    def dump():
        time.sleep(2.0)  # the others are then inside the 2nd all_reduce, which releases the GIL
        with open(out + ".part", "wb") as f:
            f.write(torch._C._distributed_c10d._dump_fr_trace_json(True, True))
        os.rename(out + ".part", out)
        # Leave only when every rank has dumped: an exit closes the others' gloo connections.
        while not all(os.path.exists(out[:-6] + f"{r}.json") for r in range(3)):
            time.sleep(0.05)
        os._exit(0)
    threading.Thread(target=dump).start()
    if rank != 2:  # rank 2 skips the 2nd collective
        dist.all_reduce(t)
""")


def test_real_gloo_ranks_one_skips_a_collective(tmp_path: Path) -> None:
    env = {**os.environ, "STORE": str(tmp_path / "store")}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(tmp_path / f"rank{r}.json")], env=env)
             for r in range(3)]
    try:
        for p in procs:
            assert p.wait(timeout=120) == 0
    finally:
        for p in procs:
            p.kill()
    now = time.time_ns()
    views = {r: collectives.rank_view(json.loads((tmp_path / f"rank{r}.json").read_text()), now) for r in range(3)}
    found = wait_for.analyze({r: {"collectives": v} for r, v in views.items()})
    (hop,) = found["waits"]
    assert (hop["on"], hop["seq"], hop["op"]) == ([2], 2, "all_reduce")
    assert hop["ranks"] == [0, 1]  # entered, not completed: gloo's entries stay `scheduled`
    assert found["culprits"] == [2] and views[2]["0"]["completed"]["seq"] == 1


LISTENING_RANK = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from raydbg.worker.train import enable_flight_recorder
    enable_flight_recorder()  # as in a Train worker, before the group exists
    import torch, torch.distributed as dist
    from raydbg.gang import cooperative_worker
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(3)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    cooperative_worker.listen()
    print("ready", flush=True)
    time.sleep(300)
""")


def test_a_ranks_stacks_thread_answers_with_its_collectives(tmp_path: Path) -> None:
    import asyncio

    from raydbg.gang import cooperative_agent

    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "RAYDBG_STACKS_DIR": str(tmp_path)}
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    proc = subprocess.Popen([sys.executable, "-c", LISTENING_RANK.format(repo=repo)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        os.environ["RAYDBG_STACKS_DIR"] = str(tmp_path)
        try:
            snap = asyncio.run(cooperative_agent.ask_snapshot(proc.pid, timeout=30))
        finally:
            del os.environ["RAYDBG_STACKS_DIR"]
    finally:
        proc.kill()
        proc.wait()
    g = snap["collectives"]["0"]
    assert snap["process_groups"] == {"0": {"desc": "default_pg", "ranks": [0]}}  # its own table
    assert snap["p2p_waits"] == []
    assert (g["started"]["seq"], g["started"]["op"], g["started"]["sizes"]) == (2, "broadcast", [[3]])
    assert g["completed"]["seq"] == 2 and [b["op"] for b in g["recent"]] == ["all_reduce", "broadcast"]
