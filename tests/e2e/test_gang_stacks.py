"""`raydbg stacks` on a real Ray Train run (4 workers, gloo, CPU): the odd rank named, the rest in the collective.

Rank 2 loops in a sleep while a marker file exists; ranks 0, 1 and 3 have entered an
`all_reduce` that waits for it. Then the same with py-spy off: the cooperative
fallback (faulthandler in the worker) must give Python stacks with the same labels.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import ENV, Cluster

pytestmark = pytest.mark.timeout(600)

RUN = "gang-stacks-e2e"
ODD = 2
WORKERS = 4


def train_func(config: dict[str, Any]) -> None:
    import os
    import time

    import ray.train
    import torch
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    t = torch.ones(1)
    while rank == config["odd"] and os.path.exists(config["marker"]):
        time.sleep(0.05)  # the odd one: not in the collective
    dist.all_reduce(t)  # the others wait here for it
    with open(os.path.join(os.path.dirname(config["marker"]), f"sum-{rank}"), "w") as out:
        out.write(str(float(t.item())))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # 8 logical CPUs on 2 cores: 4 Train workers + the controller + the agent must fit.
    with Cluster(num_cpus=8, env=dict(ENV), by_value=(sys.modules[__name__],)) as c:
        c.up()
        yield c


@pytest.fixture(scope="module")
def stuck_run(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    tmp = tmp_path_factory.mktemp("gang")
    marker = tmp / "hold"
    marker.write_text("hold")
    trainer = TorchTrainer(
        train_func, train_loop_config={"odd": ODD, "marker": str(marker)},
        scaling_config=ScalingConfig(num_workers=WORKERS),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=RUN, storage_path=str(tmp / "storage")),
    )
    result: dict[str, Any] = {}

    def fit() -> None:
        try:
            result["result"] = trainer.fit()
        except Exception as exc:  # reported by the test below
            result["error"] = exc

    th = threading.Thread(target=fit, daemon=True)
    th.start()
    info = {"marker": marker, "result": result, "thread": th}
    yield info
    marker.unlink(missing_ok=True)
    th.join(180)


def stacks(cluster: Cluster, *args: str) -> dict[str, Any]:
    out = cluster.cli("stacks", "--json", "--run", RUN, *args, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def settled(answer: dict[str, Any]) -> bool:
    """All four ranks dumped, the odd one in train_func, the others inside the collective."""
    runs = answer["runs"]
    if len(runs) != 1 or len([r for r in runs[0]["ranks"]]) != WORKERS:
        return False
    return sorted(runs[0]["waiting"]) == [r for r in range(WORKERS) if r != ODD]


def wait_settled(cluster: Cluster, *args: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    answer: dict[str, Any] = {}
    while time.monotonic() < deadline:
        answer = stacks(cluster, *args)
        if settled(answer):
            return answer
        time.sleep(1.0)
    raise AssertionError(f"the run never showed 3 ranks in the collective: {json.dumps(answer)[:3000]}")


def check_answer(answer: dict[str, Any], source: str) -> None:
    here = Path(__file__).name
    run = answer["runs"][0]
    assert run["run"] == RUN and run["world_size"] == WORKERS
    assert run["not_waiting"] == [ODD]
    assert run["held_by"] == []  # nobody is paused by raydbg
    workers = answer["workers"]
    assert sorted(w["world_rank"] for w in workers) == list(range(WORKERS))
    for w in workers:
        assert w["train_run"] == RUN and w["world_size"] == WORKERS and w["local_rank"] == w["world_rank"]
        assert w["source"] == source, w.get("error")
        assert w["actor_id"] and w["job_id"] and w["node_id"] and w["paused"] is False
        names = {f["function"] for t in w["threads"] for f in t["frames"]}
        assert "train_func" in names  # the user's frame is in the Python stacks
    classes = answer["classes"]
    assert len(classes) == 2
    odd, rest = classes  # odd ones first
    assert [m["world_rank"] for m in odd["members"]] == [ODD] and odd["count"] == 1 and odd["total"] == WORKERS
    assert odd["in_collective"] is False and odd["summary"].startswith("train_func ")
    assert [m["world_rank"] for m in rest["members"]] == [0, 1, 3] and rest["in_collective"] is True
    assert rest["summary"].startswith("all_reduce <- train_func ") and here in rest["summary"]
    assert answer["errors"] == []


def test_stacks_name_the_odd_rank(cluster: Cluster, stuck_run: dict[str, Any]) -> None:
    answer = wait_settled(cluster)
    check_answer(answer, "py-spy")
    # The readable report says the same in two lines.
    out = cluster.cli("stacks", "--run", RUN, timeout=120)
    assert out.returncode == 0, out.stderr
    print(out.stdout)  # the example in docs/hangs.md
    assert f"run {RUN}  world size {WORKERS}" in out.stdout
    assert "rank 2 (1/4): train_func " in out.stdout
    assert "ranks 0-1,3 (3/4): all_reduce <- train_func " in out.stdout


def test_fallback_without_pyspy_gives_the_same_labels(cluster: Cluster, stuck_run: dict[str, Any]) -> None:
    answer = wait_settled(cluster, "--no-pyspy")
    check_answer(answer, "cooperative")
    # Ray's task loop holds the main thread in C: the dump comes from faulthandler, not Python.
    formats = {w.get("cooperative_format") for w in answer["workers"]}
    assert formats <= {"faulthandler", "json"} and formats
    print("cooperative formats:", formats, "took", answer["took_s"])


def test_run_finishes_after_the_odd_rank_goes_on(cluster: Cluster, stuck_run: dict[str, Any]) -> None:
    stuck_run["marker"].unlink()
    stuck_run["thread"].join(180)
    assert "error" not in stuck_run["result"], stuck_run["result"].get("error")
    assert stuck_run["result"]["result"].error is None
    sums = [(stuck_run["marker"].parent / f"sum-{r}").read_text() for r in range(WORKERS)]
    assert sums == [str(float(WORKERS))] * WORKERS  # every rank got the all_reduce of all four
