"""Pilot test of the TUI's gang view: a run's wait-for chain, one hop a line, and each rank's
groups by label (tensor-parallel subgroups, rank 3 stuck)."""

from __future__ import annotations

from test_gang_wait_for import tensor_parallel
from test_tui_gang import StacksFake, answer_of, table
from textual.widgets import Static
from tui_support import until

from raydbg.tui.app import create_app
from raydbg.tui.gang_view import GangScreen


def tp_workers() -> list[dict]:
    inputs = tensor_parallel()
    out = []
    for r in range(4):
        frames = ([{"function": "all_reduce", "file": "/v/site-packages/torch/distributed/distributed_c10d.py",
                    "line": 1}] if r < 3 else []) + [{"function": "train_step", "file": "/app/train.py", "line": 40 + r}]
        out.append({"node_id": "n1", "pid": 10 + r, "job_id": "01000000", "train_run": "tp", "world_rank": r,
                    "world_size": 4, "threads": [{"name": "TrainingThread(x)", "frames": frames, "idle": False}],
                    **inputs[r]})
    return out


async def test_a_run_shows_who_waits_for_whom_and_its_ranks_groups() -> None:
    gw = StacksFake(answer_of(tp_workers()))
    app = create_app(gw, refresh=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GangScreen) and len(table(app, "gang-targets").row_keys) > 1)
        chain = app.screen.query_one("#gang-chain", Static)
        assert not chain.display  # "all" picked: no run, no chain
        assert table(app, "gang-targets")._rows["run:01000000:tp"][-1] == "3"  # the culprit alone
        await pilot.press("down", "enter")
        await until(pilot, lambda: len(table(app, "gang-ranks").row_keys) == 4)
        assert chain.display
        assert str(chain.render()).splitlines() == [
            "ranks 0,1 wait in all_reduce #2 (world) for 2,3",
            "rank 2 waits in all_reduce #1 (group [2,3]) for 3",
            "rank 3 is in train_step train.py:43"]
        rows = {k: table(app, "gang-ranks")._rows[k] for k in table(app, "gang-ranks").row_keys}
        assert rows["rank2"][2] == "after all_reduce #1, in all_reduce #1 (group [2,3])"
        assert rows["rank3"][0] == "3 · behind" and rows["rank2"][0] == "2"
