"""Stack classes, run summaries, the frame filter, the parsers and the report: pure, no Ray."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import raydbg
from raydbg.gang import cooperative_agent, frames, pyspy, report, stack_classes
from raydbg.gang.ranks import rank_ranges

SITE = "/venv/lib/python3.11/site-packages"
USER = "/home/u/train_loop.py"


def fr(function: str, file: str, line: int) -> dict[str, Any]:
    return {"function": function, "file": file, "line": line}


ALL_REDUCE = [
    fr("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 2900),
    fr("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 81),
    fr("train_step", USER, 104),
    fr("train_loop", USER, 120),
    fr("run", "/usr/lib/python3.11/threading.py", 982),
]
SLEEPING = [fr("train_step", USER, 99), fr("train_loop", USER, 120), fr("run", "/usr/lib/python3.11/threading.py", 982)]
PAUSED = [
    fr("do_wait_suspend", f"{SITE}/debugpy/_vendored/pydevd/pydevd.py", 2100),
    fr("suspend", "/work/raydbg/raydbg/worker/debugpy_control.py", 190),
    fr("breakpointhook", f"{SITE}/raydbg/worker/hook.py", 24),
    fr("train_step", USER, 108),
    fr("train_loop", USER, 120),
]
RAY_LOOP = [fr("main_loop", f"{SITE}/ray/_private/worker.py", 990), fr("<module>", f"{SITE}/ray/_private/workers/default_worker.py", 330)]


def worker(rank: int | None, stack: list[dict[str, Any]], *, paused: bool = False, run: str | None = "train-x",
           pid: int | None = None, size: int = 4, node: str = "n1") -> dict[str, Any]:
    return {
        "node_id": node, "node_ip": "10.0.0.1", "pid": pid or 1000 + (rank or 0), "job_id": "01000000",
        "actor_id": f"a{rank}", "actor_name": "RayTrainWorker", "task_name": "RayTrainWorker.run",
        "train_run": run, "world_rank": rank, "local_rank": rank, "world_size": size if run else None,
        "paused": paused, "session_ids": ["s1"] if paused else [], "source": "py-spy",
        "threads": [
            {"thread_id": 1, "name": "MainThread", "idle": True, "frames": RAY_LOOP},
            {"thread_id": 2, "name": "TrainingThread(train_fn)", "idle": False, "paused": paused, "frames": stack},
            {"thread_id": 3, "name": "raydbg-trace-watcher", "idle": True, "frames": SLEEPING},
        ],
    }


def test_filter_folds_library_frames_and_keeps_user_code() -> None:
    assert frames.user_frames(ALL_REDUCE) == ALL_REDUCE[2:4]
    assert frames.is_internal(fr("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0))
    assert frames.is_internal(fr("f", "<frozen importlib._bootstrap>", 1))
    # Issue 39: generated code (`exec`: a dataclass's `__init__`, a namedtuple) is never the user's.
    assert frames.is_internal(fr("f", "<string>", 3))
    assert frames.is_internal(fr("suspend", os.path.dirname(raydbg.__file__) + "/worker/debugpy_control.py", 10))


def test_collective_detection() -> None:
    assert frames.collective_frame(ALL_REDUCE) == ALL_REDUCE[0]
    assert frames.collective_frame(SLEEPING) is None
    # A user function named like a collective is not one.
    assert frames.collective_frame([fr("barrier", USER, 3)]) is None
    # py-spy --native: gloo's frames count.
    native = [fr("gloo::transport::tcp::UnboundBuffer::waitRecv", "/x/libtorch_cpu.so", 0), *SLEEPING]
    assert frames.collective_frame(native) is not None
    # FSDP2's all-gather (as seen in the SD app's held rank, 6fd9be4).
    fsdp = [fr("all_gather_single", f"{SITE}/torch/distributed/distributed_c10d.py", 4330), *SLEEPING]
    assert frames.collective_frame(fsdp) == fsdp[0]
    assert frames.summary(fsdp) == "all_gather_single <- train_step train_loop.py:99"


def test_summaries() -> None:
    assert frames.summary(ALL_REDUCE) == "all_reduce <- train_step train_loop.py:104"
    assert frames.summary(SLEEPING) == "train_step train_loop.py:99"
    assert frames.summary(PAUSED, paused=True) == "paused at breakpoint  train_loop.py:108 train_step"
    assert frames.summary(RAY_LOOP) == "main_loop worker.py:990 (library)"
    assert frames.summary([]) == "(no Python frames)"


def test_main_thread_prefers_paused_then_training_then_user_frames() -> None:
    w = worker(0, ALL_REDUCE)
    assert stack_classes.main_thread(w)["name"].startswith("TrainingThread(")
    w["threads"][0]["paused"] = True
    assert stack_classes.main_thread(w)["name"] == "MainThread"
    plain = {"threads": [{"name": "MainThread", "frames": RAY_LOOP}, {"name": "Thread-1", "frames": SLEEPING}]}
    assert stack_classes.main_thread(plain)["name"] == "Thread-1"
    assert stack_classes.main_thread({"threads": []}) is None


def test_a_ray_workers_main_thread_between_tasks_is_idle() -> None:
    """Worker.main_loop waits in C for the next task: `raydbg pause` answers "nothing to pause"
    there (it armed that thread once, early in a Train run, and listed a snapshot that never
    became a session), and the report calls the thread idle."""
    assert frames.looks_idle(RAY_LOOP)
    assert not frames.looks_idle([fr("main_loop", USER, 12)])  # a user's own main_loop is work


def test_ray_trains_monitoring_thread_is_idle_so_early_in_a_run_there_is_nothing_to_pause() -> None:
    """Before Train starts its TrainingThread a worker has its main loop and Train's
    MonitoringThread, blocked in C on a queue: `raydbg pause` chose that one (not idle) and
    its snapshot never became a session (ci13). Both idle: the worker answers "nothing to pause"."""
    monitor = [fr("_monitor_target", f"{SITE}/ray/train/v2/_internal/execution/worker_group/thread_runner.py", 72),
               fr("run", "/usr/lib/python3.11/threading.py", 982)]
    assert frames.looks_idle(monitor)
    threads = [{"thread_id": 1, "name": "MainThread", "idle": frames.looks_idle(RAY_LOOP), "frames": RAY_LOOP},
               {"thread_id": 2, "name": "MonitoringThread(train_fn)", "idle": frames.looks_idle(monitor),
                "frames": monitor}]
    chosen = stack_classes.main_thread({"threads": threads})
    assert chosen is not None and chosen["idle"] and not frames.user_frames(chosen["frames"])


def test_group_paused_rank_first_then_odd_then_rest() -> None:
    ws = [worker(0, PAUSED, paused=True), worker(1, ALL_REDUCE), worker(2, ALL_REDUCE), worker(3, ALL_REDUCE)]
    out = stack_classes.group(ws)
    assert [c["count"] for c in out] == [1, 3]
    assert out[0]["paused"] and out[0]["summary"] == "paused at breakpoint  train_loop.py:108 train_step"
    assert [m["world_rank"] for m in out[1]["members"]] == [1, 2, 3]
    assert out[1]["in_collective"] and not out[0]["in_collective"] and out[1]["total"] == 4

    ws = [worker(r, ALL_REDUCE) for r in (3, 0, 1)] + [worker(2, SLEEPING)]
    odd, rest = stack_classes.group(ws)
    assert odd["members"] == [{"node_id": "n1", "pid": 1002, "world_rank": 2}]
    assert [m["world_rank"] for m in rest["members"]] == [0, 1, 3]


def test_paused_on_one_line_is_one_class_wherever_the_pause_path_was_sampled() -> None:
    """Seen in CI under load: one worker sampled in raydbg's wait loop, the other still
    importing OpenTelemetry for its pause metrics, both stopped at the same user line."""
    waiting = [fr("wait_for_client", "/work/raydbg/raydbg/worker/resume.py", 127),
               fr("pause", "/work/raydbg/raydbg/worker/session.py", 107)] + PAUSED[2:]
    importing = [fr("_set_new_attribute", "/usr/lib/python3.11/dataclasses.py", 833),
                 fr("<module>", f"{SITE}/opentelemetry/sdk/metrics/_internal/point.py", 18),
                 fr("_find_and_load", "<frozen importlib._bootstrap>", 1176),
                 fr("__getattr__", "/work/raydbg/raydbg/telemetry/__init__.py", 56),
                 fr("pause", "/work/raydbg/raydbg/worker/session.py", 102)] + PAUSED[2:]
    out = stack_classes.group([worker(0, PAUSED, paused=True), worker(1, waiting, paused=True),
                         worker(2, importing, paused=True)])
    assert [c["count"] for c in out] == [3]
    assert out[0]["summary"] == "paused at breakpoint  train_loop.py:108 train_step"
    # Running threads keep every frame: where the library call is differs in kind.
    assert len(stack_classes.group([worker(0, waiting), worker(1, importing)])) == 2
    # A pause inside library code keeps the library frame the user stopped in.
    lib = [fr("breakpointhook", f"{SITE}/raydbg/worker/hook.py", 24),
           fr("forward", f"{SITE}/torch/nn/modules/linear.py", 125)] + PAUSED[3:]
    assert frames.paused_at(lib)[0]["function"] == "forward"


def test_py_spy_and_faulthandler_names_land_in_one_class() -> None:
    a = worker(0, [fr("Thread.run", "/usr/lib/python3.11/threading.py", 982)])
    b = worker(1, [fr("run", "/usr/lib/python3.11/threading.py", 982)])
    assert len(stack_classes.group([a, b])) == 1


def test_runs_summary() -> None:
    ws = [worker(0, PAUSED, paused=True), worker(1, ALL_REDUCE), worker(2, SLEEPING), worker(3, ALL_REDUCE),
          worker(None, SLEEPING, run=None, pid=77)]
    (run,) = stack_classes.runs(ws, {("01000000", "train-x", 1): 90.0, 1002: 95.0}, now=100.0)
    assert run["run"] == "train-x" and run["world_size"] == 4 and run["job_id"] == "01000000"
    assert run["held_by"] == [0] and run["waiting"] == [1, 3] and run["not_waiting"] == [0, 2]
    states = {r["world_rank"]: r["state"] for r in run["ranks"]}
    assert states == {0: "paused", 1: "held", 2: "held", 3: "held"}
    ages = {r["world_rank"]: r["last_progress_s"] for r in run["ranks"]}
    assert ages == {0: None, 1: 10.0, 2: 5.0, 3: None}
    ids = {c["id"] for c in stack_classes.group(ws)}
    assert {r["class_id"] for r in run["ranks"]} <= ids
    (free,) = stack_classes.runs([worker(r, ALL_REDUCE) for r in range(2)], {})
    assert {r["state"] for r in free["ranks"]} == {"running"} and free["held_by"] == []


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=60))
def test_rank_ranges_round_trip(ranks: list[int]) -> None:
    text = rank_ranges(ranks)
    back: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        back |= set(range(int(lo), int(hi or lo) + 1))
    assert back == set(ranks)


stacks = st.sampled_from([ALL_REDUCE, SLEEPING, PAUSED, RAY_LOOP])


@settings(max_examples=60)
@given(st.lists(st.tuples(stacks, st.booleans()), min_size=1, max_size=40))
def test_group_is_a_partition_ordered_odd_first(spec: list[tuple[list[dict[str, Any]], bool]]) -> None:
    ws = [worker(i, s, paused=p, pid=2000 + i) for i, (s, p) in enumerate(spec)]
    out = stack_classes.group(ws)
    pids = sorted(m["pid"] for c in out for m in c["members"])
    assert pids == sorted(w["pid"] for w in ws)  # every worker in exactly one class
    assert all(c["total"] == len(ws) and c["count"] == len(c["members"]) for c in out)
    order = [(not c["paused"], c["count"]) for c in out]
    assert order == sorted(order)
    assert len({c["id"] for c in out}) == len(out)


def test_parse_py_spy_json() -> None:
    raw = [{"pid": 5, "thread_id": 140, "thread_name": "MainThread", "os_thread_id": 5, "active": False,
            "owns_gil": False, "frames": [{"name": "w", "filename": "/a.py", "line": 4, "module": None,
                                            "short_filename": "a.py", "locals": None}]}]
    assert pyspy.parse_dump(raw) == [{"thread_id": 140, "native_id": 5, "name": "MainThread", "idle": True,
                                      "frames": [{"function": "w", "file": "/a.py", "line": 4}]}]
    assert pyspy.parse_dump({"not": "a list"}) == []


FAULTHANDLER = """Thread 0x00007f0000000001 (most recent call first):
  File "/home/u/train_loop.py", line 99 in train_step
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/ray/_private/worker.py", line 990 in main_loop
"""


def test_parse_faulthandler_text() -> None:
    threads = cooperative_agent.parse_faulthandler(FAULTHANDLER)
    assert [t["thread_id"] for t in threads] == [0x7F0000000001, 0x7F0000000002]
    assert threads[0]["frames"][0] == {"function": "train_step", "file": USER, "line": 99}
    assert threads[1]["frames"] == [fr("main_loop", f"{SITE}/ray/_private/worker.py", 990)]
    assert cooperative_agent.parse_faulthandler("") == []


@given(st.text(max_size=400))
def test_parse_faulthandler_never_raises(text: str) -> None:
    assert isinstance(cooperative_agent.parse_faulthandler(text), list)


def test_report_of_a_run() -> None:
    ws = [worker(0, PAUSED, paused=True), worker(1, ALL_REDUCE), worker(2, ALL_REDUCE), worker(3, ALL_REDUCE),
          worker(None, SLEEPING, run=None, pid=77)]
    answer = {"workers": ws, "classes": stack_classes.group(ws), "runs": stack_classes.runs(ws, {}), "errors": [
        {"node_id": "n2" * 8, "error": "timeout"}], "took_s": 0.25}
    json.dumps(answer)  # the shape is JSON
    text = report.render(answer)
    lines = text.splitlines()
    assert lines[0] == "run train-x  world size 4  (job 01000000)"
    assert lines[1] == "  rank 0 (1/4): paused at breakpoint  train_loop.py:108 train_step"
    assert lines[2] == "  ranks 1-3 (3/4): all_reduce <- train_step train_loop.py:104  [in a collective]"
    assert "held by paused rank 0" in text and "other workers (1)" in text
    assert "pid 77 RayTrainWorker" in text and "error: node n2n2n2n2n2n2: timeout" in text
    full = report.render(answer, all_threads=True)
    assert "thread TrainingThread(train_fn) paused" in full and "> train_step (train_loop.py:108)" in full
    assert report.render({"workers": [], "runs": [], "errors": [], "took_s": 0}).startswith("no Ray workers")
    ws[1].update(source="cooperative", pyspy_error="py-spy failed on pid 1001: Permission Denied")
    assert "note: py-spy could not read 1 worker(s), stacks from raydbg's cooperative handler instead" \
        " (py-spy failed on pid 1001: Permission Denied)" in report.render(answer)
    assert "note: py-spy" not in text
