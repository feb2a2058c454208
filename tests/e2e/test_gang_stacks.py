"""`raydbg stacks` on a real Ray Train run (4 workers, gloo, CPU): the odd rank named, the rest in the collective.

Rank 2 loops in a sleep while a marker file exists; ranks 0, 1 and 3 have entered an
`all_reduce` that waits for it. Then the same with py-spy denied for real (the agent's
py-spy runs as nobody, without ptrace rights over the root-owned workers): the agent
falls back by itself to the cooperative handler, with the same labels. Also `--no-pyspy`
and `--job`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import ENV, Cluster, needs_torch

from e2e.gang_targets import TRAIN_CLUSTER_ENV

pytestmark = [pytest.mark.timeout(600), needs_torch]

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
    if rank == config["odd"]:
        open(os.path.join(os.path.dirname(config["marker"]), "holding"), "w").close()
    while rank == config["odd"] and os.path.exists(config["marker"]):
        time.sleep(0.05)  # the odd one: not in the collective
    dist.all_reduce(t)  # the others wait here for it
    with open(os.path.join(os.path.dirname(config["marker"]), f"sum-{rank}"), "w") as out:
        out.write(str(float(t.item())))


CAN_DENY = os.getuid() == 0 and shutil.which("setpriv") is not None


@pytest.fixture(scope="module")
def deny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """While this file exists, the agents' py-spy (RAYDBG_PYSPY) runs as nobody: ptrace is refused."""
    from raydbg.gang.pyspy import find_pyspy

    here = tmp_path_factory.mktemp("pyspy")
    flag, wrapper, real = here / "deny", here / "py-spy", find_pyspy()
    setpriv = shutil.which("setpriv") or "setpriv"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{flag}" ]; then exec {setpriv} --reuid=65534 --regid=65534 --clear-groups {real} "$@"; fi\n'
        f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    return flag


@pytest.fixture(scope="module")
def cluster(deny: Path) -> Iterator[Cluster]:
    # 8 logical CPUs on 2 cores: 4 Train workers + the controller + the agent must fit.
    env = {**ENV, **TRAIN_CLUSTER_ENV, "RAYDBG_PYSPY": str(deny.with_name("py-spy"))}
    with Cluster(num_cpus=8, env=env, by_value=(sys.modules[__name__],)) as c:
        c.up()
        yield c


def start_run(tmp: Path, name: str, workers: int, odd: int) -> dict[str, Any]:
    """A Train run whose rank `odd` holds while its own marker file exists (in a thread)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    marker = tmp / "hold"
    marker.write_text("hold")
    trainer = TorchTrainer(
        train_func, train_loop_config={"odd": odd, "marker": str(marker)},
        scaling_config=ScalingConfig(num_workers=workers),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=name, storage_path=str(tmp / "storage")),
    )
    result: dict[str, Any] = {}

    def fit() -> None:
        try:
            result["result"] = trainer.fit()
        except Exception as exc:  # reported by the test that joins it
            result["error"] = exc

    th = threading.Thread(target=fit, daemon=True)
    th.start()
    return {"marker": marker, "result": result, "thread": th}


@pytest.fixture(scope="module")
def stuck_run(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    info = start_run(tmp_path_factory.mktemp("gang"), RUN, WORKERS, ODD)
    yield info
    info["marker"].unlink(missing_ok=True)
    info["thread"].join(180)


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
    check_answer(answer, "cooperative")  # activated Train workers: from their stacks thread
    assert {w["cooperative_format"] for w in answer["workers"]} == {"thread"}
    check_answer(wait_settled(cluster, "--pyspy"), "py-spy")  # and the same through py-spy
    # The readable report says the same in two lines.
    out = cluster.cli("stacks", "--run", RUN, timeout=120)
    assert out.returncode == 0, out.stderr
    print(out.stdout)  # the example in docs/hangs.md
    assert f"run {RUN}  world size {WORKERS}" in out.stdout
    assert "rank 2 (1/4): train_func " in out.stdout
    assert "ranks 0-1,3 (3/4): all_reduce <- train_func " in out.stdout


@pytest.mark.skipif(not CAN_DENY, reason="denying py-spy needs root (to drop to nobody) and setpriv")
def test_pyspy_denied_falls_back_by_itself_with_the_same_labels(cluster: Cluster, stuck_run: dict[str, Any],
                                                                deny: Path) -> None:
    deny.touch()
    try:
        answer = wait_settled(cluster, "--pyspy")  # py-spy is tried (not the stacks thread) and refused
        text = cluster.cli("stacks", "--run", RUN, "--pyspy", timeout=120)
    finally:
        deny.unlink()
    assert text.returncode == 0, text.stderr
    assert "rank 2 (1/4): train_func " in text.stdout and "ranks 0-1,3 (3/4): all_reduce <- train_func " in text.stdout
    assert "note: py-spy could not read 4 worker(s)" in text.stdout, text.stdout
    check_answer(answer, "cooperative")
    for w in answer["workers"]:  # a real permission failure, and the answer says so
        assert "Permission Denied" in w["pyspy_error"], w["pyspy_error"]
    # Ray's task loop holds the main thread in C: the dump may come from faulthandler, not Python.
    formats = {w.get("cooperative_format") for w in answer["workers"]}
    assert formats <= {"faulthandler", "json"} and formats
    print("cooperative formats:", formats, "took", answer["took_s"])


def test_no_pyspy_flag_asks_only_the_handler(cluster: Cluster, stuck_run: dict[str, Any]) -> None:
    answer = wait_settled(cluster, "--no-pyspy")
    check_answer(answer, "cooperative")
    assert all("pyspy_error" not in w for w in answer["workers"])  # not tried, so not failed


def test_native_frames_come_with_native(cluster: Cluster, stuck_run: dict[str, Any]) -> None:
    answer = wait_settled(cluster, "--native")
    assert [w.get("pyspy_error") for w in answer["workers"]] == [None] * WORKERS, answer["workers"][0].get("pyspy_error")
    assert [w["source"] for w in answer["workers"]] == ["py-spy"] * WORKERS  # the stacks thread has no C frames
    assert answer["runs"][0]["not_waiting"] == [ODD] and answer["errors"] == []
    # py-spy --native: the C/C++ frames below the Python ones (gloo's wait in the collective).
    for w in answer["workers"]:
        files = {f["file"] for t in w["threads"] for f in t["frames"]}
        assert any(not f.endswith(".py") for f in files), sorted(files)[:20]
    plain = wait_settled(cluster)
    assert all(f["file"].endswith(".py") or f["file"].startswith("<")
               for w in plain["workers"] for t in w["threads"] for f in t["frames"]), "native frames without --native"


def test_stacks_of_a_job(cluster: Cluster, stuck_run: dict[str, Any]) -> None:
    import ray

    job = ray.get_runtime_context().get_job_id()  # the run's job: this test process is its driver
    out = cluster.cli("stacks", "--json", "--job", job, timeout=120)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    workers = answer["workers"]
    assert {w["job_id"] for w in workers} == {job}
    assert sorted(w["world_rank"] for w in workers if w.get("train_run") == RUN) == list(range(WORKERS))
    assert len(workers) > WORKERS  # the whole job: Train's controller actor too, not only the run
    (run,) = answer["runs"]
    assert run["run"] == RUN and run["not_waiting"] == [ODD] and answer["errors"] == []
    other = cluster.cli("stacks", "--json", "--job", "7f000000", timeout=120)
    assert other.returncode == 0 and json.loads(other.stdout)["workers"] == [], other.stdout


def test_run_finishes_after_the_odd_rank_goes_on(cluster: Cluster, tmp_path: Path) -> None:
    # A run of its own (2 ranks), so the module's stuck run stays stuck for the other tests.
    run = start_run(tmp_path, f"{RUN}-finish", 2, 1)
    deadline = time.monotonic() + 300
    while not (tmp_path / "holding").exists():  # its odd rank has reached the hold
        assert time.monotonic() < deadline and run["thread"].is_alive(), run["result"]
        time.sleep(0.2)
    run["marker"].unlink()
    run["thread"].join(180)
    assert "error" not in run["result"], run["result"].get("error")
    assert run["result"]["result"].error is None
    sums = [(tmp_path / f"sum-{r}").read_text() for r in range(2)]
    assert sums == [str(2.0)] * 2  # every rank got the all_reduce of both
