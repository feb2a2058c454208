"""Worker identity joins (pure): progress records, session records, Train state-actor labels."""

from __future__ import annotations

from types import SimpleNamespace

from raydbg import ray_processes
from raydbg.gang import worker_labels


def ids() -> dict[int, dict]:
    return {pid: worker_labels.base_identity(pid, title, "n1", "10.0.0.1")
            for pid, title in ((10, "RayTrainWorker.run"), (11, "IDLE"), (12, "f"))}


def test_title_names() -> None:
    assert ray_processes.title_name("ray::Actor.method") == "Actor.method"
    assert ray_processes.title_name("ray::IDLE") == "IDLE"
    w = ids()
    assert w[11]["task_name"] is None and w[11]["idle_worker"] and w[12]["task_name"] == "f"


def test_actors_progress_and_sessions() -> None:
    w = ids()
    worker_labels.apply_actors(w, [SimpleNamespace(pid=10, actor_id="a1", name="", class_name="RayTrainWorker",
                                                   job_id="01000000")])
    assert w[10]["actor_id"] == "a1" and w[10]["actor_name"] == "RayTrainWorker" and w[10]["job_id"] == "01000000"
    recs = [
        {"pid": 10, "node_id": "n1", "ts": 2.0, "train_run": "run-b", "world_rank": 3, "local_rank": 1,
         "world_size": 4, "job_id": "01000000"},
        {"pid": 10, "node_id": "n1", "ts": 1.0, "train_run": "run-a", "world_rank": 0, "local_rank": 0,
         "world_size": 2, "job_id": "01000000"},
        {"pid": 12, "node_id": "other-node", "ts": 1.0, "train_run": "x", "world_rank": 0},  # not this node
        {"pid": 12, "node_id": "n1", "ts": 1.0, "train_run": None},  # a non-Train beat
    ]
    worker_labels.apply_progress(w, recs, "n1")
    assert (w[10]["train_run"], w[10]["world_rank"], w[10]["local_rank"], w[10]["world_size"]) == ("run-b", 3, 1, 4)
    assert w[12]["train_run"] is None
    sessions = [{"id": "s1", "pid": 12, "node_id": "n1", "thread_id": 7, "job_id": "02000000", "train_rank": None},
                {"id": "s2", "pid": 12, "node_id": "n2", "thread_id": 8}]
    worker_labels.apply_sessions(w, sessions, "n1")
    assert w[12]["paused"] and w[12]["session_ids"] == ["s1"] and w[12]["paused_threads"] == [7]
    assert w[12]["job_id"] == "02000000" and not w[10]["paused"]


def test_train_state_actor_labels() -> None:
    runs = [{"run_id": "r1", "name": "train-x", "job_id": "01000000", "status": "RUNNING", "world_size": 2,
             "workers": [{"world_rank": 0, "local_rank": 0, "node_id": "n1", "pid": 10, "actor_id": "a0"},
                         {"world_rank": 1, "local_rank": 0, "node_id": "n2", "pid": 10, "actor_id": "a1"}]}]
    labels = worker_labels.train_labels(runs)
    assert labels[("n2", 10)]["world_rank"] == 1 and labels[("n1", 10)]["train_run"] == "train-x"
    w = worker_labels.base_identity(10, "RayTrainWorker", "n2", "")
    worker_labels.apply_labels(w, labels[("n2", 10)])
    assert w["train_run_id"] == "r1" and w["world_size"] == 2 and w["actor_id"] == "a1"
