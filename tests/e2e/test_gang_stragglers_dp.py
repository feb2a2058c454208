"""Stragglers inside DDP and FSDP2 steps on a real cluster (Ray Train, gloo, CPU): one rank's loader slower
every step -> one `straggler` event naming it, found from collective arrival times, and `raydbg steps`
marking it, though every rank's time between reports is the same."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, needs_torch

from e2e import straggler_targets as targets

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), needs_torch]

EXTRA_S = 0.35  # rank 1's extra data loading per step in DDP (the issue's case)
# In FSDP: the SD tiny preset's step is heavier (18 collectives, a UNet): on this 2-core machine
# under load ~30 its own work took 0.6-0.9 s, and 0.35 s more stayed under the straggler factor
# (1.5x the others' work). The arrivals were as clean: rank 1 last by 0.35 s at every step.
FSDP_EXTRA_S = 1.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    from e2e import gang_targets

    with Cluster(num_cpus=8, env=dict(gang_targets.TRAIN_CLUSTER_ENV), by_value=(targets,)) as c:
        yield c, c.up()


class Fit:
    """trainer.fit() in a thread while the test watches the events."""

    def __init__(self, trainer: Any) -> None:
        self.error: BaseException | None = None
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, args=(trainer,), daemon=True)
        self.thread.start()

    def _run(self, trainer: Any) -> None:
        try:
            self.result = trainer.fit()
        except BaseException as exc:  # the test reports it
            self.error = exc

    def join(self, timeout: float = 240) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the run did not finish"
        assert self.error is None, f"the run failed: {self.error!r}"
        assert self.result is not None and self.result.error is None, self.result.error


def _trainer(fn: Any, name: str, tmp_path: Path, config: dict[str, Any], workers: int = 3) -> Any:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    return TorchTrainer(fn, train_loop_config=config, torch_config=TorchConfig(backend="gloo"),
                        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 0.5}),
                        run_config=RunConfig(name=name, storage_path=str(tmp_path)))


def _stragglers(gw: Any, run: str) -> list[dict[str, Any]]:
    return [e for e in asyncio.run(gw.events(500))
            if e.get("kind") == "straggler" and (e.get("details") or {}).get("train_run") == run]


def _wait_for_event(gw: Any, run: str, fit: Fit, timeout: float = 300) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while not _stragglers(gw, run) and time.monotonic() < deadline and fit.thread.is_alive():
        time.sleep(0.5)
    return _stragglers(gw, run)


def _check_one_straggler(c: Cluster, gw: Any, run: str, fit: Fit, loader_frame: str, extra: float) -> dict[str, Any]:
    """The event names rank 1 alone, with the others' wait for it; `raydbg steps` agrees."""
    events = _wait_for_event(gw, run, fit)
    if not events:  # what the gateway saw instead
        seen = c.cli("steps", "--run", run, "--json", timeout=60).stdout
        raise AssertionError(f"no straggler event{'' if fit.thread.is_alive() else f' (the run ended: {fit.error})'}; "
                             f"raydbg steps: {seen}")
    assert len(events) == 1, events
    details = events[0]["details"]
    assert details["world_rank"] == 1 and details["pid"] and events[0]["node_id"], details
    # Every rank's time between reports is the same; the others waited inside the step for rank 1.
    waited = [t for t in details["others_waited_s"] if t is not None]
    assert statistics.median(waited) > 0.6 * extra, details
    assert statistics.median(details["busy_s"]) - statistics.median(details["others_median_s"]) > 0.6 * extra
    assert "rank 1 worked" in events[0]["message"] and "the others waited" in events[0]["message"]
    # Where its extra time goes: the DataLoader's next() (timed in activated workers) against compute.
    split = details["data"]
    assert split is not None and split["data_wait_s"] > 0.6 * extra, details
    assert split["others_data_wait_s"] < 0.25 * extra and "the extra time goes waiting for data" in events[0]["message"]
    # Its stack class, taken then: rank 1 alone, in its own data loading.
    klass = details["stack_class"]
    assert klass is not None and klass["count"] == 1, details
    assert any(str(f.get("function")).rsplit(".", 1)[-1] == loader_frame for f in klass["frames"]), klass["summary"]
    out = c.cli("steps", "--run", run, "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    (shown,) = json.loads(out.stdout)["runs"]
    rows = {r["world_rank"]: r for r in shown["ranks"]}
    assert [(r, rows[r]["straggler"]) for r in sorted(rows)] == [(0, False), (1, True), (2, False)], shown
    # (medians: on a loaded machine any rank is now and then late at a collective by a descheduling)
    assert rows[1]["late_median_s"] > 0.6 * extra and max(rows[r]["late_median_s"] for r in (0, 2)) < 0.25 * extra
    assert min(rows[r]["wait_median_s"] for r in (0, 2)) > 0.6 * extra and rows[1]["wait_median_s"] < 0.25 * extra
    text = c.cli("steps", "--run", run, timeout=60).stdout
    assert "straggler(s): rank 1" in text and "OTHERS WAITED FOR IT" in text, text
    return details


def test_ddp_rank_with_a_slow_loader_is_the_one_straggler(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    c, gw = cluster
    release = tmp_path / "release-ddp"
    fit = Fit(_trainer(targets.ddp_train, "ddp-straggler", tmp_path,
                       {"steps": 24, "batch_size": 8, "extra_s": EXTRA_S, "slow_rank": 1, "release": str(release)}))
    try:
        _check_one_straggler(c, gw, "ddp-straggler", fit, "collate", EXTRA_S)
    finally:
        release.touch()
    fit.join()
    assert len(_stragglers(gw, "ddp-straggler")) == 1


def test_fsdp2_rank_with_a_slow_loader_is_the_one_straggler(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    c, gw = cluster
    release = tmp_path / "release-fsdp"
    fit = Fit(_trainer(targets.fsdp_train, "fsdp-straggler", tmp_path,
                       {"steps": 20, "batch_size": 1, "extra_s": FSDP_EXTRA_S, "slow_rank": 1,
                        "release": str(release)}))
    try:
        _check_one_straggler(c, gw, "fsdp-straggler", fit, "collate", FSDP_EXTRA_S)
    finally:
        release.touch()
    fit.join()
    assert len(_stragglers(gw, "fsdp-straggler")) == 1
