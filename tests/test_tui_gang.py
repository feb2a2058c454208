"""Pilot tests of the TUI's gang view against a scripted stacks answer: pick a run, classes, Enter."""

from __future__ import annotations

import time
from typing import Any

from test_gang_classes import ALL_REDUCE, PAUSED, SLEEPING, worker
from textual.widgets import Static
from tui_support import FakeGateway, record, until

from raydbg.client import GatewayError
from raydbg.gang import pause_target, stack_classes
from raydbg.tui.app import create_app
from raydbg.tui.gang_view import ClassDetail, GangScreen, SnapshotDetail
from raydbg.tui.row_table import RowTable


class StacksFake(FakeGateway):
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__()
        self.answer = answer
        self.stack_calls = 0
        self.steps_answer: dict[str, Any] = {"runs": [], "errors": []}

    async def stacks(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        self.stack_calls += 1
        self._check()
        return self.answer

    async def steps(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        self._check()
        return self.steps_answer


def collective(seq: int, done: int | None) -> dict[str, Any]:
    return {"default_pg": {"started": {"seq": seq, "op": "all_reduce", "sizes": [[4]]},
                           "completed": None if done is None else {"seq": done, "op": "all_reduce"}}}


def answer_of(workers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"workers": workers, "classes": stack_classes.group(workers), "runs": stack_classes.runs(workers, {}),
            "errors": [], "took_s": 0.2}


def held_run() -> list[dict[str, Any]]:
    ws = [worker(0, PAUSED, paused=True), worker(1, ALL_REDUCE), worker(2, ALL_REDUCE), worker(3, ALL_REDUCE),
          worker(None, SLEEPING, run=None, pid=77)]
    ws[0]["session_ids"] = ["sess00000001"]
    return ws


def table(app: Any, name: str) -> RowTable:
    return app.screen.query_one(f"#{name}", RowTable)


async def test_g_opens_the_gang_view_and_a_run_shows_its_classes() -> None:
    gw = StacksFake(answer_of(held_run()))
    gw.sessions_list = [record("sess00000001", time.time() - 5, train_rank=0)]
    app = create_app(gw, refresh=0.05)
    requested: list[str] = []
    app.open_debug = requested.append  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GangScreen) and len(table(app, "gang-targets").row_keys) > 1)
        keys = table(app, "gang-targets").row_keys
        assert keys == ["all", "run:01000000:train-x", "job:01000000"]
        # Move to the run and pick it: its two classes, the paused rank first.
        await pilot.press("down", "enter")
        await until(pilot, lambda: len(table(app, "gang-classes").row_keys) == 2)
        screen = app.screen
        assert isinstance(screen, GangScreen) and screen.target == "run:01000000:train-x"
        rows = [table(app, "gang-classes")._rows[k] for k in table(app, "gang-classes").row_keys]
        assert rows[0][:3] == ("rank 0", "1/4", "paused · attachable")
        assert rows[1][0] == "ranks 1-3" and rows[1][2] == "in collective"
        assert rows[1][3] == "all_reduce <- train_step train_loop.py:104"
        # Enter on the rest's class: its full stack.
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, ClassDetail))
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, GangScreen))
        # Enter on the paused class: attach to the paused rank (the sessions pane's path).
        await pilot.press("up", "enter")
        await until(pilot, lambda: requested == ["sess00000001"])
        assert not isinstance(app.screen, GangScreen)


async def test_stacks_failure_is_said_and_r_retries() -> None:
    gw = StacksFake(answer_of(held_run()))
    gw.failure = "cannot connect to the raydbg gateway"
    app = create_app(gw, refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GangScreen) and gw.stack_calls >= 1)
        status = app.screen.query_one("#gang-status")
        await until(pilot, lambda: "stacks failed" in str(status.render()))
        gw.failure = None
        await pilot.press("r")
        await until(pilot, lambda: len(table(app, "gang-classes").row_keys) == 3)  # "all": 3 classes
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, GangScreen))


async def test_a_runs_ranks_show_their_collective_and_step_times_the_culprit_and_straggler_marked() -> None:
    ws = [worker(r, SLEEPING if r == 2 else ALL_REDUCE) for r in range(4)]
    for r, w in enumerate(ws):
        w["collectives"] = collective(2, 2) if r == 2 else collective(3, 2)
    gw = StacksFake(answer_of(ws))
    steps = [{"world_rank": r, "busy_median_s": 0.4 if r == 2 else 0.1, "wait_median_s": 0.02 if r == 2 else 0.3,
              "straggler": r == 2} for r in range(4)]
    gw.steps_answer = {"runs": [{"job_id": "01000000", "train_run": "train-x", "ranks": steps}], "errors": []}
    app = create_app(gw, refresh=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GangScreen) and len(table(app, "gang-targets").row_keys) > 1)
        run_row = table(app, "gang-targets")._rows["run:01000000:train-x"]
        assert run_row[-1] == "2"  # behind, by Flight Recorder
        await pilot.press("down", "enter")
        await until(pilot, lambda: len(table(app, "gang-ranks").row_keys) == 4
                    and table(app, "gang-ranks")._rows["rank2"][3] != "-")
        rows = {k: table(app, "gang-ranks")._rows[k] for k in table(app, "gang-ranks").row_keys}
        assert rows["rank2"] == ("2 · behind", "running", "after all_reduce #2", "0.400", "0.020", "yes")
        assert rows["rank0"] == ("0", "running", "in all_reduce #3", "0.100", "0.300", "")
        # Live: new step times show without a key press.
        steps[0]["busy_median_s"] = 0.25
        await until(pilot, lambda: table(app, "gang-ranks")._rows["rank0"][3] == "0.250", timeout=10)


class PauseFake(StacksFake):
    """Answers `p` as the gateway's POST /api/v1/pause does."""

    def __init__(self, answer: dict[str, Any], session: dict[str, Any] | None) -> None:
        super().__init__(answer)
        self.session = session
        self.paused: list[tuple[str, str | None]] = []

    async def pause(self, target: str, job: str | None = None, wait_s: float = 5.0) -> dict[str, Any]:
        self._check()
        self.paused.append((target, job))
        parsed = pause_target.parse(target)
        if parsed.kind == "class":  # the gateway takes the stacks anew: on a running program the id is gone
            raise GatewayError(pause_target.not_found(parsed))
        return {"target": target, "node_id": "n1", "pid": 11, "thread": "TrainingThread(x)", "session": self.session}


async def open_gang_view(pilot: Any, app: Any, pick_run: bool = False) -> None:
    """`g`, then (pick_run) Enter on the Train run: its 2 classes and 3 ranks shown."""
    await pilot.press("g")
    await until(pilot, lambda: isinstance(app.screen, GangScreen) and len(table(app, "gang-targets").row_keys) > 1)
    if pick_run:
        await pilot.press("down", "enter")
        await until(pilot, lambda: len(table(app, "gang-classes").row_keys) == 2
                    and len(table(app, "gang-ranks").row_keys) == 3)


def running_run() -> list[dict[str, Any]]:
    return [worker(r, ALL_REDUCE if r else SLEEPING) for r in range(3)]


async def test_p_on_a_class_pauses_its_first_member_by_rank_never_by_class_id() -> None:
    gw = PauseFake(answer_of(running_run()), record("sess0000000p", time.time(), train_rank=1, reason="pause"))
    app = create_app(gw, refresh=0.05)
    requested: list[str] = []
    app.open_debug = requested.append  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30)) as pilot:
        await open_gang_view(pilot, app, pick_run=True)  # the run's classes, the odd one (rank 0) first
        assert table(app, "gang-classes")._rows[table(app, "gang-classes").row_keys[1]][0] == "ranks 1-2"
        await pilot.press("down", "p")  # the class of ranks 1-2: its first member, rank 1
        await until(pilot, lambda: requested == ["sess0000000p"])
        assert gw.paused == [("train-x:1", "01000000")]


async def test_p_on_a_class_of_plain_workers_pauses_its_first_member_by_pid() -> None:
    gw = PauseFake(answer_of(held_run()), record("sess0000000q", time.time(), pid=77, reason="pause"))
    app = create_app(gw, refresh=0.05)
    requested: list[str] = []
    app.open_debug = requested.append  # type: ignore[method-assign]
    async with app.run_test(size=(100, 30)) as pilot:
        await open_gang_view(pilot, app)
        await pilot.press("down", "down", "enter")  # job 01000000: its classes, the sleeping task's among them
        await until(pilot, lambda: len(table(app, "gang-classes").row_keys) == 3)
        classes_table = table(app, "gang-classes")
        row = next(i for i, k in enumerate(classes_table.row_keys) if classes_table._rows[k][0] == "pid 77")
        classes_table.move_cursor(row)
        await pilot.press("p")
        await until(pilot, lambda: requested == ["sess0000000q"])
        assert gw.paused == [("77", "01000000")]  # node "n1" is no node id prefix: the pid alone


def test_a_class_member_is_named_by_rank_or_node_and_pid() -> None:
    from raydbg.tui.gang_view import member_target

    node = "ab" * 28
    w = worker(None, SLEEPING, run=None, pid=77, node=node)
    cls = stack_classes.group([w])[0]
    assert member_target(cls, [w]) == (f"{node[:12]}:77", "01000000")
    assert pause_target.parse(f"{node[:12]}:77").kind == "pid"  # what the gateway reads it as
    r = worker(3, SLEEPING)
    assert member_target(stack_classes.group([r])[0], [r]) == ("train-x:3", "01000000")
    assert member_target({"members": []}, []) is None


async def test_p_on_a_rank_blocked_in_c_shows_its_snapshot_with_locals() -> None:
    snap = record("sess0000000s", time.time(), train_rank=1, reason="pause", state="snapshot",
                  frames=[{"function": "train_step", "file": "/job/train_loop.py", "line": 104,
                           "locals": {"step": "3", "grads": "<torch.Tensor shape=(4, 2)>"}}])
    gw = PauseFake(answer_of(running_run()), snap)
    app = create_app(gw, refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_gang_view(pilot, app, pick_run=True)
        table(app, "gang-ranks").focus()
        table(app, "gang-ranks").move_cursor(1)
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, SnapshotDetail))
        assert gw.paused == [("train-x:1", "01000000")]
        shown = str(app.screen.query_one(Static).render())
        assert "blocked in C" in shown and "step = 3" in shown and "grads = <torch.Tensor shape=(4, 2)>" in shown
        await pilot.press("escape")
        status = app.screen.query_one("#gang-status")
        await until(pilot, lambda: "snapshot sess0000000s" in str(status.render()))


async def test_p_says_what_went_wrong_in_the_status_line() -> None:
    gw = PauseFake(answer_of(running_run()), None)
    app = create_app(gw, refresh=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_gang_view(pilot, app)
        status = app.screen.query_one("#gang-status")
        await pilot.press("p")  # on the targets table: nothing to pause there
        await until(pilot, lambda: "pick one first" in str(status.render()))
        await pilot.press("down", "enter")
        await until(pilot, lambda: len(table(app, "gang-classes").row_keys) == 2)
        gw.failure = "pid 11 runs as nobody: raydbg pauses only its own user's workers (root)"
        await pilot.press("p")
        await until(pilot, lambda: "runs as nobody" in str(status.render()))
