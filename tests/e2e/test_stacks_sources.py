"""Where `raydbg stacks` takes each worker's stacks from, on a real cluster: raydbg-activated
workers through their stacks thread (cooperative, no ptrace), a worker raydbg is not in
through py-spy; the report has the same shape either way (and with `--pyspy` for all)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
import ray

from e2e.conftest import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


class Stuck:
    def ready(self) -> int:
        import os

        return os.getpid()

    def stuck_here(self) -> None:
        while True:
            time.sleep(0.05)


def _stacks(c: Cluster, *args: str) -> dict[str, Any]:
    out = c.cli("stacks", "--json", *args, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def _ours(answer: dict[str, Any], pids: set[int]) -> dict[int, dict[str, Any]]:
    return {w["pid"]: w for w in answer["workers"] if w["pid"] in pids}


def _shape(w: dict[str, Any]) -> tuple[frozenset[str], frozenset[frozenset[str]]]:
    return (frozenset(w) - {"cooperative_format"}, frozenset(frozenset(t) for t in w["threads"]))


def test_activated_workers_answer_from_their_thread_others_from_pyspy() -> None:
    with Cluster(num_cpus=2, by_value=(sys.modules[__name__],)) as c:
        c.up()
        actor = ray.remote(num_cpus=0)(Stuck)
        activated = [actor.remote() for _ in range(2)]
        # A worker raydbg is not in: its job's RAY_DEBUG is off for it (as for raydbg's own agents).
        plain = actor.options(runtime_env={"env_vars": {"RAY_DEBUG": "0"}}).remote()
        pids = ray.get([a.ready.remote() for a in activated + [plain]], timeout=120)
        for a in activated + [plain]:
            a.stuck_here.remote()
        time.sleep(1.0)
        answer = _stacks(c)
        got = _ours(answer, set(pids))
        assert set(got) == set(pids), answer["errors"]
        for pid in pids[:2]:
            assert (got[pid]["source"], got[pid].get("cooperative_format")) == ("cooperative", "thread"), got[pid]
        assert got[pids[2]]["source"] == "py-spy", got[pids[2]]
        assert "cooperative_format" not in got[pids[2]]
        for w in got.values():
            assert w["actor_name"].endswith("Stuck") and w["actor_id"] and w["job_id"] and "error" not in w
            assert "Stuck.stuck_here" in {f["function"] for t in w["threads"] for f in t["frames"]}
        # One class of three, whichever way each worker's stacks came.
        (cls,) = [k for k in answer["classes"] if {m["pid"] for m in k["members"]} & set(pids)]
        assert cls["count"] == 3 and cls["summary"].startswith("Stuck.stuck_here "), cls

        # --pyspy: py-spy for every worker; the same shape, labels and class.
        by_pyspy = _ours(_stacks(c, "--pyspy"), set(pids))
        assert {w["source"] for w in by_pyspy.values()} == {"py-spy"}
        for pid in pids:
            assert _shape(by_pyspy[pid]) == _shape(got[pid]), (by_pyspy[pid], got[pid])
            labels = ("actor_id", "actor_name", "job_id", "node_id", "task_name", "paused")
            assert {k: by_pyspy[pid].get(k) for k in labels} == {k: got[pid].get(k) for k in labels}
