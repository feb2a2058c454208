"""Armed breakpoints in real Ray workers (no breakpoint() in the code): pause, hit limit, attach, continue,
workers started later, disarm, conditions, one job's breakpoints untouched by another job.

On Python 3.11 the workers arm through the settrace fallback (RAYDBG_BREAK_PY311=1, set
here); on 3.12+ through raydbg's sys.monitoring tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from cluster import ENV, REPO, Cluster

from e2e import armed_targets as t
from e2e.conftest import forward, wait_for_session, wait_until

pytestmark = pytest.mark.e2e

ARMED = t.line_of("armed")
# On 3.11 (the main suite) the fallback gets the pause/limit/attach test and the API test;
# the rest runs on 3.12+ (the version matrix's 3.12 and 3.13 entries: make test-matrix).
# tests/test_breakpoints_layers.py covers the fallback's running frames, later code and
# disarming without Ray.
only_312 = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+: the matrix's 3.12/3.13 entries run it")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    env = {**ENV, "RAYDBG_BREAK_PY311": "1"}
    with Cluster(num_cpus=4, env=env, by_value=(t,)) as c:
        c.up()
        yield c


@pytest.fixture
def gw(cluster: Cluster) -> Iterator[Any]:
    from raydbg.client import Gateway

    os.environ["RAY_ADDRESS"] = cluster.address
    gw = Gateway.discover()
    yield gw
    asyncio.run(_remove_all(gw))  # no test leaves anything armed for the next


async def _remove_all(gw: Any) -> None:
    for bp in (await gw.get("/api/v1/breakpoints"))["breakpoints"]:
        await gw.delete(f"/api/v1/breakpoints/{bp['id']}")


def job_id() -> str:
    return str(ray.get_runtime_context().get_job_id())


def arm(gw: Any, **body: Any) -> dict[str, Any]:
    return dict(asyncio.run(gw.post("/api/v1/breakpoints", body={"file": t.FILE, "line": ARMED, **body})))


def listed(gw: Any) -> dict[str, dict[str, Any]]:
    return {bp["id"]: bp for bp in asyncio.run(gw.get("/api/v1/breakpoints"))["breakpoints"]}


def sessions_of(gw: Any, bp_id: str) -> list[dict[str, Any]]:
    return [r for r in asyncio.run(gw.sessions()) if r.get("breakpoint_id") == bp_id]


def resume(gw: Any, sid: str) -> None:
    asyncio.run(gw.post(f"/api/v1/sessions/{sid}/continue"))


def column(cluster: Cluster, bp_id: str, name: str) -> str:
    """One cell of `raydbg break list` (the table a person reads): breakpoint `bp_id`'s `name` column."""
    listing = cluster.cli("break", "list")
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert name in header.split(), listing.stdout
    (row,) = [r for r in rows if r.startswith(bp_id)]
    return row[header.index(name):].split()[0]


def armed_in(*keepers: Any, timeout: float = 30) -> None:
    """Wait until each keeper actor's worker has armed the registry's current breakpoints."""
    from raydbg.breakpoints import store

    now = store.version()
    wait_until(lambda: ray.get([k.loaded.remote() for k in keepers], timeout=30) == [now] * len(keepers),
               timeout, f"breakpoint version {now!r} armed in {len(keepers)} worker(s)")


async def inspect_step_continue(port: int) -> dict[str, Any]:
    """Attach, read `local_value`, step over (the return: back in the caller), continue."""
    from raydbg.dap.session import attach_session
    from raydbg.dap.transport import open_tcp

    client, stopped = await attach_session(*await open_tcp("127.0.0.1", port), timeout=30)
    thread = stopped["body"]["threadId"]
    top = (await client.stack_trace(thread))[0]
    scopes = await client.scopes(top["id"])
    local = {v["name"]: v["value"] for v in await client.variables(scopes[0]["variablesReference"])}
    step = client.expect_event("stopped")
    await client.next(thread)
    await client.wait_for_event("stopped", future=step, timeout=30)
    after = (await client.stack_trace(thread))[0]
    stepped_to = after["line"]
    await client.continue_(thread)
    await client.disconnect()
    await client.close()
    return {"line": top["line"], "value": local.get("local_value"), "stepped_to": stepped_to,
            "stepped_in": f"{after['source'].get('path')}:{after['name']}"}


def test_first_tasks_pause_up_to_the_hit_limit_the_rest_run_on(cluster: Cluster, gw: Any) -> None:
    out = cluster.cli("break", "add", f"{t.FILE}:{ARMED}", "--job", job_id(), "--hit-limit", "2", "--json")
    assert out.returncode == 0, out.stderr
    bp = json.loads(out.stdout)
    assert (bp["line"], bp["hit_limit"], bp["job"], bp["owner"]) == (ARMED, 2, job_id(), "cli")
    if sys.version_info < (3, 12):  # the cluster's Python, from the agents' records
        python = f"{sys.version_info[0]}.{sys.version_info[1]}"  # 3.10 in the version matrix
        assert f"workers run Python {python}" in out.stderr and "3-27x" in out.stderr, out.stderr
        assert "RAYDBG_BREAK_PY311=1" in out.stderr
    else:
        assert "RAYDBG_BREAK_PY311" not in out.stderr, out.stderr
    task = ray.remote(num_cpus=0.5)(t.slow_scaled)
    refs = [task.remote(n) for n in range(5)]
    paused = wait_until(lambda: len(sessions_of(gw, bp["id"])) == 2 and sessions_of(gw, bp["id"]), 90,
                        "two tasks paused at the armed line")
    done, pending = ray.wait(refs, num_returns=3, timeout=90)
    assert len(done) == 3 and len(pending) == 2  # the rest ran on past the breakpoint
    row = wait_until(lambda: (b := listed(gw)[bp["id"]])["hits"] == 5 and b, 10, "5 hits counted")
    # Every task has been through the line and three have returned: no third pause can come.
    assert row["paused"] == 2 and len(sessions_of(gw, bp["id"])) == 2
    rec = wait_for_session(gw, id=paused[0]["id"])
    assert (rec["line"], rec["function"], rec["reason"]) == (ARMED, "scaled", "breakpoint")
    with forward(cluster.address, rec["id"]) as port:
        seen = asyncio.run(inspect_step_continue(port))
    assert seen["line"] == ARMED and int(seen["value"]) % 10 == 0
    # debugpy took over: `next` on the return steps out into the caller (3.12's pydevd stops
    # on the call's line, 3.11's at the caller's next line).
    assert seen["stepped_in"] == f"{t.FILE}:slow_scaled", seen
    assert seen["stepped_to"] in (t.line_of("call"), t.line_of("caller")), seen
    resume(gw, paused[1]["id"])
    assert ray.get(refs, timeout=60) == [n * 10 + 1 for n in range(5)]
    # Every pause is over: the listing's paused column reads 0 of 2, after 5 hits.
    assert column(cluster, bp["id"], "paused") == "0/2" and column(cluster, bp["id"], "hits") == "5"


def test_the_slot_of_a_killed_paused_worker_frees_when_its_lease_runs_out(cluster: Cluster, gw: Any) -> None:
    """The lease runs from the dead holder's last renewal (its slot record), not from the kill."""
    import psutil

    from raydbg import registry
    from raydbg.breakpoints import store

    bp = arm(gw, job=job_id(), hit_limit=1)
    # A worker of its own (its own runtime env): armed with this test's breakpoint at its
    # start, never a pooled one that still holds the last test's.
    fresh = {"env_vars": {"RAYDBG_TEST_FRESH_WORKER": bp["id"]}}
    first = ray.remote(num_cpus=0.5, max_retries=0, runtime_env=fresh)(t.slow_scaled).remote(1)
    keeper = ray.remote(t.Keeper).remote()  # a live worker to hit the line with
    keeper_pid = ray.get(keeper.pid.remote(), timeout=60)
    armed_in(keeper)
    rec = wait_until(lambda: sessions_of(gw, bp["id"]), 90, "the first task paused")[0]
    victim = psutil.Process(rec["pid"])
    victim.kill()  # its slot stays held: nobody releases or renews it
    victim.wait(10)
    (dead_key,) = registry.keys(f"{store.SLOT}{bp['id']}/")
    dead = json.loads(registry.get_bytes(dead_key) or b"{}")
    held_until = dead["ts"] + store.LEASE_S
    # While the lease runs, a hit counts and runs on.
    assert ray.get(keeper.call.remote(2), timeout=30) == 21
    assert time.time() < held_until, "the call ended after the lease: it showed nothing"
    hits_key = f"{store.HITS}{bp['id']}/{ray.get_runtime_context().get_node_id()[:12]}-{keeper_pid}"
    wait_until(lambda: (registry.get(hits_key) or {}).get("hits") == 1, 10, "the keeper's hit counted")

    # Then the keeper hits the line again and again: the first pause comes only after the lease.
    def paused_or_done(ref: Any) -> dict[str, Any] | None:
        while time.time() < held_until + 30:
            if ray.wait([ref], timeout=0.2)[0]:
                return None
            mine = [r for r in sessions_of(gw, bp["id"]) if r["pid"] == keeper_pid]
            if mine:
                return mine[0]
        raise AssertionError("no pause within 30 s of the lease's end")

    while (paused := paused_or_done(late := keeper.call.remote(3))) is None:
        assert ray.get(late) == 31
    assert paused["since"] > held_until, (paused["since"], held_until)
    # The dead holder's slot, were it to come back, is no longer its own: renew and release
    # leave the keeper's claim alone (on the real GCS; tests/test_breakpoints_store.py: the races).
    (key,) = registry.keys(f"{store.SLOT}{bp['id']}/")
    index, gen = (int(x) for x in dead_key.rsplit("/", 2)[1:])
    ghost = store.Slot(bp["id"], index, gen, dead["who"], dead["token"])
    assert key != dead_key and not store.renew_slot(ghost)
    store.release_slot(ghost)
    assert store.held(registry.get_bytes(key), time.time())
    resume(gw, paused["id"])
    assert ray.get(late, timeout=60) == 31
    with pytest.raises(ray.exceptions.RayError):
        ray.get(first, timeout=60)


@only_312
def test_arming_reaches_running_and_later_workers_rm_disarms_conditions(cluster: Cluster, gw: Any) -> None:
    early = ray.remote(t.Keeper).remote()
    ray.get(early.pid.remote(), timeout=60)  # a worker that was running before the arming
    bp = arm(gw, job=job_id())
    armed_in(early)  # the running worker armed itself (its poll thread)
    ref = early.call.remote(7)
    rec = wait_for_session(gw, breakpoint_id=bp["id"], timeout=30)
    assert rec["line"] == ARMED
    resume(gw, rec["id"])
    assert ray.get(ref, timeout=60) == 71
    late = ray.remote(t.Keeper).remote()  # a worker that starts after the arming
    late_pid = ray.get(late.pid.remote(), timeout=60)
    ref = late.call.remote(8)
    rec = wait_for_session(gw, breakpoint_id=bp["id"], timeout=60)
    assert rec["pid"] == late_pid != ray.get(early.pid.remote(), timeout=30)
    resume(gw, rec["id"])
    assert ray.get(ref, timeout=60) == 81
    out = cluster.cli("break", "rm", bp["id"])
    assert out.returncode == 0 and bp["id"] in out.stdout, out.stderr
    armed_in(early, late)  # both workers have disarmed
    assert ray.get([early.call.remote(9), late.call.remote(9)], timeout=30) == [91, 91]
    never = arm(gw, job=job_id(), condition="n < 0")
    when5 = arm(gw, job=job_id(), condition="n == 5")
    armed_in(early)  # both armed in the worker: a run-on below is the conditions' doing
    assert ray.get(early.call.remote(4), timeout=30) == 41  # both conditions false: no pause
    ref = early.call.remote(5)
    rec = wait_for_session(gw, breakpoint_id=when5["id"], timeout=30)
    assert sessions_of(gw, never["id"]) == []
    resume(gw, rec["id"])
    assert ray.get(ref, timeout=60) == 51
    rows = wait_until(lambda: (r := listed(gw))[when5["id"]]["hits"] == 1 and r, 10, "the hit counted")
    assert rows[never["id"]]["hits"] == 0 and rows[never["id"]]["error"] is None


JOB_B = """
import ray, sys
import armed_targets
ray.init(address=sys.argv[1])
print("JOB", ray.get_runtime_context().get_job_id(), flush=True)
# One write: Ray prints the workers' log lines from another thread, between print's parts.
print(f"RESULT {ray.get(ray.remote(armed_targets.scaled).remote(2), timeout=120)}", flush=True)
"""


@only_312
def test_arming_for_job_a_leaves_job_b_alone(cluster: Cluster, gw: Any) -> None:
    mine = arm(gw, job=job_id())  # job A's, on scaled's return line
    every = arm(gw, line=t.line_of("first"))  # every job's, on scaled's first line
    env = {**os.environ, "RAY_DEBUG": "1", "RAYDBG_BREAK_PY311": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO / "tests" / "e2e")])}
    job = subprocess.Popen([sys.executable, "-c", textwrap.dedent(JOB_B), cluster.address], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    resumed: list[dict[str, Any]] = []
    try:
        while job.poll() is None:
            for rec in asyncio.run(gw.sessions()):
                if rec.get("job_id") == job_id() or rec["id"] in {r["id"] for r in resumed}:
                    continue
                # Job B's worker is armed (it pauses at the line armed for every job) ...
                assert rec.get("breakpoint_id") == every["id"], f"job B paused at job A's breakpoint: {rec}"
                resume(gw, rec["id"])
                resumed.append(rec)
            time.sleep(0.2)
        output = job.communicate(timeout=10)[0]
    finally:
        job.kill()
    assert [(r["line"], r["breakpoint_id"]) for r in resumed] == [(t.line_of("first"), every["id"])], resumed
    assert "RESULT 21" in output, output  # ... and ran on past job A's line
    ref = ray.remote(t.scaled).remote(3)  # in job A both are armed
    for bp in (every, mine):
        rec = wait_for_session(gw, breakpoint_id=bp["id"], timeout=60)
        resume(gw, rec["id"])
    assert ray.get(ref, timeout=60) == 31


def test_api_put_replaces_an_owners_set_and_refuses_bad_input(cluster: Cluster, gw: Any) -> None:
    from raydbg.client import GatewayError

    mine = arm(gw, owner="cli")
    a, b = {"file": "/w/a.py", "line": 1}, {"file": "/w/b.py", "line": 2, "condition": "x > 1"}
    first = asyncio.run(gw.put("/api/v1/breakpoints?owner=vscode&job=0a00", {"breakpoints": [a, b]}))
    ids = {bp["file"]: bp["id"] for bp in first["breakpoints"]}
    assert all(bp["owner"] == "vscode" and bp["job"] == "0a00" for bp in first["breakpoints"])
    second = asyncio.run(gw.put("/api/v1/breakpoints?owner=vscode&job=0a00",
                                {"breakpoints": [b, {"file": "/w/c.py", "line": 3}]}))
    now = {bp["file"]: bp["id"] for bp in second["breakpoints"]}
    assert now["/w/b.py"] == ids["/w/b.py"] and "/w/a.py" not in now  # unchanged keeps its id
    assert set(listed(gw)) == {mine["id"], *now.values()}  # another owner's stays
    for_job = asyncio.run(gw.get("/api/v1/breakpoints?job=0a00"))["breakpoints"]
    assert {bp["id"] for bp in for_job} == {mine["id"], *now.values()}  # + those for every job
    assert asyncio.run(gw.get("/api/v1/breakpoints?job=0b00"))["breakpoints"][0]["id"] == mine["id"]
    asyncio.run(gw.put("/api/v1/breakpoints?owner=vscode&job=0a00", {"breakpoints": []}))
    assert set(listed(gw)) == {mine["id"]}
    for call, words in [
        (gw.post("/api/v1/breakpoints", body={"file": "a.py", "line": "x"}), "line"),
        (gw.post("/api/v1/breakpoints", body={"file": "a.py", "line": 3, "condition": "1 +"}), "expression"),
        (gw.put("/api/v1/breakpoints", {"breakpoints": []}), "owner"),
        (gw.put("/api/v1/breakpoints?owner=x", {"nope": 1}), "breakpoints"),
        (gw.delete("/api/v1/breakpoints/bp-nothere"), "no breakpoint"),
    ]:
        with pytest.raises(GatewayError, match=words):
            asyncio.run(call)
    out = cluster.cli("break", "rm", "bp-nothere")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "no breakpoint" in out.stderr
    job_only = arm(gw, job="0c00")
    out = cluster.cli("break", "rm", "--all", "--job", "0c00")  # that job's, not those for every job
    assert out.returncode == 0 and job_only["id"] in out.stdout and set(listed(gw)) == {mine["id"]}, out
