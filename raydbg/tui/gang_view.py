"""Gang view: pick a Ray job or Train run, see its stack classes and its ranks; Enter opens or attaches.

`g` on the main screen opens it. The top table lists what there is to look at (every
Train run, every job; for a run, the ranks the others wait for by Flight Recorder);
under it, for a run where ranks wait, the wait-for chain (one hop a line, the culprits'
place last); the middle one the chosen target's stack classes, odd ones first. Enter on a class
attaches to a paused rank in it (the sessions pane's attach path: an AttachRequested
message) or, when none is paused, shows its full stack. For a run, the bottom table
has one row per rank: its state, the collective it is in, its recent step times
(refreshed every STEPS_EVERY_S), stragglers marked. `p` on a class (its first member, by
rank or pid: a class id changes as the stacks do) or a rank pauses it (`raydbg pause`) and attaches; a rank blocked in C shows its
snapshot (frames and locals) instead, and Enter attaches once it is paused.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from raydbg.gang import frames, stack_classes
from raydbg.gang.ranks import rank_ranges
from raydbg.tui.messages import AttachRequested, PauseAnswered, StacksUpdated, StepsUpdated
from raydbg.tui.row_table import RowTable, set_border_title

TARGET_COLUMNS = ("target", "workers", "held by", "waiting", "behind")
CLASS_COLUMNS = ("ranks", "count", "state", "stack")
RANK_COLUMNS = ("rank", "state", "collective", "work s/step", "wait s/step", "straggler")
STEPS_EVERY_S = 2.0


class StacksGateway(Protocol):
    address: str

    async def stacks(self, job: str | None = None, run: str | None = None) -> dict[str, Any]: ...

    async def steps(self, job: str | None = None, run: str | None = None) -> dict[str, Any]: ...

    async def pause(self, target: str, job: str | None = None, wait_s: float = 5.0) -> dict[str, Any]: ...


def targets(answer: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Rows of the picker: `run:<job>:<name>` per Train run, `job:<id>` per job (pure)."""
    rows: list[tuple[str, tuple[str, ...]]] = [("all", ("everything", str(len(answer.get("workers") or [])), "", "", ""))]
    for run in answer.get("runs") or []:
        rows.append((f"run:{run['job_id']}:{run['run']}", (
            f"run {run['run']} (world size {run['world_size']})", str(len(run["ranks"])),
            rank_ranges(run["held_by"]), rank_ranges(run["waiting"]), rank_ranges(run.get("culprits") or []))))
    jobs: dict[str, int] = {}
    for w in answer.get("workers") or []:
        jobs[str(w.get("job_id") or "?")] = jobs.get(str(w.get("job_id") or "?"), 0) + 1
    for job, n in sorted(jobs.items()):
        rows.append((f"job:{job}", (f"job {job}", str(n), "", "", "")))
    return rows


def members_of(answer: dict[str, Any], target: str) -> list[dict[str, Any]]:
    workers = [w for w in answer.get("workers") or [] if w.get("threads")]
    if target.startswith("run:"):
        _, job, name = target.split(":", 2)
        return [w for w in workers if w.get("train_run") == name and str(w.get("job_id")) == job]
    if target.startswith("job:"):
        return [w for w in workers if str(w.get("job_id") or "?") == target[4:]]
    return workers


def class_rows(cls_list: list[dict[str, Any]], workers: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    by = {(w.get("node_id"), w.get("pid")): w for w in workers}
    rows: list[tuple[str, tuple[str, ...]]] = []
    for cls in cls_list:
        ranks = [m["world_rank"] for m in cls["members"] if m.get("world_rank") is not None]
        if ranks and len(ranks) == len(cls["members"]):
            who = ("rank " if len(ranks) == 1 else "ranks ") + rank_ranges(ranks)
        else:
            who = ", ".join(f"pid {m['pid']}" for m in cls["members"][:3]) + ("…" if cls["count"] > 3 else "")
        state = "paused" if cls["paused"] else ("in collective" if cls["in_collective"] else "running")
        if any(by.get((m["node_id"], m["pid"]), {}).get("session_ids") for m in cls["members"]):
            state += " · attachable"
        rows.append((cls["id"], (who, f"{cls['count']}/{cls['total']}", state, cls["summary"])))
    return rows


def _in_collective(r: dict[str, Any]) -> str:
    groups = r.get("collectives")
    if groups is None:
        return "-"
    parts = []
    for name, g in sorted(groups.items()):
        started, done = g.get("started") or {}, g.get("completed") or {}
        if not started.get("seq"):
            continue  # a group it is in by send/recv only (NCCL), no collective there
        waiting = started.get("seq") != done.get("seq")
        label = g.get("label") or name  # "world", "group [2,3]" (raydbg/gang/wait_for.py)
        parts.append(f"{'in ' if waiting else 'after '}{started.get('op')} #{started.get('seq')}"
                     + ("" if label in ("world", "default_pg") else f" ({label})"))
    return ", ".join(parts) or "none yet"


def chain_text(run: dict[str, Any] | None) -> str:
    """The run's wait-for chain, one hop a line (raydbg/gang/wait_for.py); '' when nobody waits."""
    lines = (run or {}).get("chain") or []
    return "\n".join(lines)


def rank_rows(run: dict[str, Any] | None, steps: dict[str, Any] | None) -> list[tuple[str, tuple[str, ...]]]:
    """One row per rank of a run: the stacks answer's RunSummary, joined with its step times (pure)."""
    by_rank = {r["world_rank"]: r for r in (steps or {}).get("ranks") or []}
    rows: list[tuple[str, tuple[str, ...]]] = []
    for r in (run or {}).get("ranks") or []:
        s = by_rank.get(r["world_rank"], {})
        work, wait = s.get("busy_median_s"), s.get("wait_median_s")
        rank = str(r["world_rank"]) + (" · behind" if r["world_rank"] in (run or {}).get("culprits", []) else "")
        rows.append((f"rank{r['world_rank']}", (
            rank, r["state"], _in_collective(r), "-" if work is None else f"{work:.3f}",
            "-" if wait is None else f"{wait:.3f}", "yes" if s.get("straggler") else "")))
    return rows


def member_target(cls: dict[str, Any], workers: list[dict[str, Any]]) -> tuple[str, str | None] | None:
    """A stack class's first member as `raydbg pause` names it, and its job (pure): `RUN:RANK` for a
    Train rank, else `NODE:PID`. Never the class id, which changes as the stacks do."""
    members = cls.get("members") or []
    if not members:
        return None
    first = members[0]
    worker = next((w for w in workers if (w.get("node_id"), w.get("pid")) == (first.get("node_id"), first.get("pid"))),
                  {})
    job = str(worker["job_id"]) if worker.get("job_id") else None
    if first.get("world_rank") is not None and worker.get("train_run"):
        return f"{worker['train_run']}:{first['world_rank']}", job
    node = str(first.get("node_id") or "")
    return (f"{node[:12]}:{first['pid']}" if len(node) >= 8 else str(first["pid"])), job


def pause_target(table_id: str | None, key: str | None, run: tuple[str, str] | None,
                 shown: list[dict[str, Any]], workers: list[dict[str, Any]]) -> tuple[str, str | None] | None:
    """What `p` pauses, and in which job: the highlighted class's first member, read from the
    class as shown when the key is pressed, or the highlighted rank (pure)."""
    if key is None:
        return None
    if table_id == "gang-classes":
        cls = next((c for c in shown if c["id"] == key), None)
        return None if cls is None else member_target(cls, workers)
    if table_id == "gang-ranks" and run is not None and key.startswith("rank"):
        return f"{run[1]}:{key[4:]}", run[0]
    return None


def session_to_attach(cls: dict[str, Any], workers: list[dict[str, Any]]) -> str | None:
    by = {(w.get("node_id"), w.get("pid")): w for w in workers}
    for m in cls["members"]:
        ids = by.get((m["node_id"], m["pid"]), {}).get("session_ids") or []
        if ids:
            return str(ids[0])
    return None


class GangScreen(Screen[None]):
    DEFAULT_CSS = """
    #gang-status { height: 1; background: $primary-background; padding: 0 1; }
    #gang-targets { height: 1fr; border: round $primary; }
    #gang-classes { height: 2fr; border: round $primary; }
    #gang-ranks { height: 2fr; border: round $primary; }
    #gang-chain { height: auto; max-height: 10; border: round $warning; padding: 0 1; display: none; }
    #gang-targets:focus, #gang-classes:focus, #gang-ranks:focus { border: round $accent; }
    """
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "reload", "Refresh"),
        Binding("p", "pause", "Pause and attach"),
    ]

    def __init__(self, gateway: StacksGateway) -> None:
        super().__init__()
        self.gateway = gateway
        self.answer: dict[str, Any] = {}
        self.target = "all"
        self.shown: list[dict[str, Any]] = []
        self.shown_workers: list[dict[str, Any]] = []
        self.steps: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        yield Static("gang view · taking stacks…", id="gang-status")
        yield RowTable(TARGET_COLUMNS, id="gang-targets")
        yield Static("", id="gang-chain")
        yield RowTable(CLASS_COLUMNS, id="gang-classes")
        yield RowTable(RANK_COLUMNS, id="gang-ranks")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#gang-targets", RowTable).border_title = "Jobs and Train runs"
        self.query_one("#gang-classes", RowTable).border_title = "Stack classes"
        self.query_one("#gang-ranks", RowTable).border_title = "Ranks (pick a Train run)"
        self.query_one("#gang-targets", RowTable).focus()
        self.load()
        self.set_interval(STEPS_EVERY_S, self.load_steps)

    def _run_target(self) -> tuple[str, str] | None:
        if not self.target.startswith("run:"):
            return None
        _, job, name = self.target.split(":", 2)
        return job, name

    @work(exclusive=True, group="steps")
    async def load_steps(self) -> None:
        target = self._run_target()
        if target is None:
            return
        try:
            answer = await self.gateway.steps(*target)
        except Exception:  # a gateway of an older raydbg, or down: the stacks' status line says so
            return
        self.post_message(StepsUpdated(answer))

    def on_steps_updated(self, message: StepsUpdated) -> None:
        self.steps = message.answer
        self.show_ranks()

    def show_ranks(self) -> None:
        target = self._run_target()
        table = self.query_one("#gang-ranks", RowTable)
        chain = self.query_one("#gang-chain", Static)
        if target is None:
            table.set_rows([])
            set_border_title(table, "Ranks (pick a Train run)")
            chain.display = False
            return
        run = next((r for r in self.answer.get("runs") or [] if (r["job_id"], r["run"]) == target), None)
        text = chain_text(run)
        chain.update(text)
        chain.display = bool(text)
        chain.border_title = "Who waits for whom (culprits last)"
        steps = next((r for r in self.steps.get("runs") or [] if (r["job_id"], r["train_run"]) == target), None)
        table.set_rows(rank_rows(run, steps))
        set_border_title(table, f"Ranks of run {target[1]}")

    @work(exclusive=True, group="stacks")
    async def load(self) -> None:
        try:
            answer = await self.gateway.stacks()
        except Exception as exc:  # say it on the status line; the screen stays usable
            self.query_one("#gang-status", Static).update(f"gang view · stacks failed: {exc}")
            return
        self.post_message(StacksUpdated(answer))

    def action_reload(self) -> None:
        self.query_one("#gang-status", Static).update("gang view · taking stacks…")
        self.load()

    def action_pause(self) -> None:
        focused = self.focused
        table = focused if isinstance(focused, RowTable) else None
        picked = pause_target(table.id if table else None, table.cursor_key if table else None, self._run_target(),
                              self.shown, self.shown_workers)
        status = self.query_one("#gang-status", Static)
        if picked is None:
            status.update("gang view · p pauses the highlighted stack class or rank: pick one first")
            return
        target, job = picked
        status.update(f"gang view · pausing {target}…")
        self.pause_worker(target, job)

    @work(exclusive=True, group="pause")
    async def pause_worker(self, target: str, job: str | None) -> None:
        try:
            answer = await self.gateway.pause(target, job=job)
        except Exception as exc:  # the gateway's one line (not ours, another user's, no such rank)
            self.post_message(PauseAnswered(target, None, str(exc)))
            return
        self.post_message(PauseAnswered(target, answer))

    def on_pause_answered(self, message: PauseAnswered) -> None:
        status = self.query_one("#gang-status", Static)
        rec = (message.answer or {}).get("session")
        if message.error is not None or rec is None:
            status.update(f"gang view · pause {message.target}: "
                          + (message.error or "asked; not listed yet (see the sessions pane)"))
        elif rec.get("state") == "snapshot":
            status.update(f"gang view · {message.target} is blocked in C: snapshot {rec['id']}; "
                          "Enter attaches once it is back in Python")
            self.app.push_screen(SnapshotDetail(rec))
        else:
            self.app.pop_screen()
            self.app.post_message(AttachRequested(str(rec["id"])))

    def on_stacks_updated(self, message: StacksUpdated) -> None:
        self.answer = message.answer
        self.query_one("#gang-targets", RowTable).set_rows(targets(self.answer))
        errors = self.answer.get("errors") or []
        text = f"gang view · {len(self.answer.get('workers') or [])} workers in {self.answer.get('took_s', 0):.2f}s"
        if errors:
            text += f" · {len(errors)} error(s): {errors[0].get('error')}"
        self.query_one("#gang-status", Static).update(text)
        self.show_target(self.target)

    def show_target(self, target: str) -> None:
        self.target = target
        self.shown_workers = members_of(self.answer, target)
        self.shown = stack_classes.group(self.shown_workers)
        table = self.query_one("#gang-classes", RowTable)
        table.set_rows(class_rows(self.shown, self.shown_workers))
        set_border_title(table, f"Stack classes of {target} ({len(self.shown)})")
        self.show_ranks()
        self.load_steps()

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        event.stop()
        if event.table.id == "gang-targets":
            self.show_target(event.key)
            self.query_one("#gang-classes", RowTable).focus()
            return
        cls = next((c for c in self.shown if c["id"] == event.key), None)
        if cls is None:
            return
        sid = session_to_attach(cls, self.shown_workers) if cls["paused"] else None
        if sid is not None:
            self.app.pop_screen()
            self.app.post_message(AttachRequested(sid))
        else:
            self.app.push_screen(ClassDetail(cls))


class FramesDetail(ModalScreen[None]):
    """A stack in a modal, innermost first: the user's frames bold, the rest dim; a frame's
    locals under it where it carries them (a snapshot's)."""

    DEFAULT_CSS = """
    FramesDetail { align: center middle; }
    FramesDetail > VerticalScroll { width: 90%; max-width: 120; height: 80%; border: round $accent;
                                    background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, head: Text, stack: list[dict[str, Any]], tail: str = "") -> None:
        super().__init__()
        self.head, self.stack, self.tail = head, stack, tail

    def compose(self) -> ComposeResult:
        text = self.head.copy()
        for f in self.stack:
            style = "dim" if frames.is_internal(f) else "bold"
            text.append(f"{f.get('function')}  ", style=style)
            text.append(f"{os.path.basename(str(f.get('file')))}:{f.get('line')}\n", style="dim")
            for name, value in (f.get("locals") or {}).items():
                text.append(f"    {name} = {value}\n", style="" if style == "bold" else "dim")
        text.append(self.tail)
        with VerticalScroll():
            yield Static(text)


class ClassDetail(FramesDetail):
    """One class's whole stack (the thread that decided it) and its members."""

    def __init__(self, cls: dict[str, Any]) -> None:
        members = ", ".join(f"rank {m['world_rank']}" if m.get("world_rank") is not None else f"pid {m['pid']}"
                            for m in cls["members"])
        super().__init__(Text.assemble((cls["summary"], "bold"), f"\nthread {cls.get('thread')}\n\n"),
                         cls["frames"], f"\nmembers: {members}")


class SnapshotDetail(FramesDetail):
    """A thread `raydbg pause` could not stop yet (blocked in C), with its frames' locals (safe
    reprs); it becomes a session once back in Python."""

    def __init__(self, rec: dict[str, Any]) -> None:
        super().__init__(Text.assemble((f"snapshot {rec['id']}: thread {rec.get('thread_name')} is blocked in C", "bold"),
                                       "\n(it becomes a session, attachable, when it returns to Python)\n\n"),
                         rec.get("frames") or [])
