"""Agents start on their own, dead sessions are collected, nothing opens without the token,
user hooks still run, and a driver breakpoint is a local pdb prompt."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
import ray
from cluster import Cluster, free_ports

from e2e import targets
from e2e.conftest import (
    REPO,
    attach_and_inspect,
    forward,
    gateway,
    raydbg_cli,
    wait_for_session,
    wait_gone,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(scope="module")
def cluster(gateway_port: int) -> Iterator[str]:
    with Cluster(env={"RAYDBG_WAIT_TIMEOUT": "120", "RAYDBG_GATEWAY_PORT": str(gateway_port)}) as running:
        # What a client says before any test started agents (the tests run in any order).
        FRESH["list"] = raydbg_cli(running.address, "list")
        yield running.address


FRESH: dict[str, subprocess.CompletedProcess[str]] = {}


def test_the_gateway_listens_on_raydbg_gateway_port(cluster: str, gateway_port: int) -> None:
    assert raydbg_cli(cluster, "up").returncode == 0
    gw = gateway(cluster)
    assert gw.address.rsplit(":", 1)[1] == str(gateway_port), gw.address
    assert asyncio.run(gw.status())["gateway"]  # and it answers there


def test_agents_come_up_by_themselves_and_status_reports_them(cluster: str) -> None:
    before = FRESH["list"]
    # The driver marked its agents as starting when it connected: the client waits for them
    # (bounded), or says in one line that they are still starting; never "run raydbg up".
    assert (before.returncode, before.stdout) == (0, "no paused sessions\n") or (
        before.returncode == 1 and "still starting" in before.stderr), (before.returncode, before.stdout, before.stderr)
    assert "Traceback" not in before.stderr
    ref = ray.remote(targets.plain_task).remote(2)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = raydbg_cli(cluster, "status", "--json")
        if status.returncode == 0:
            break
        time.sleep(0.5)
    info = json.loads(status.stdout)
    assert info["agents"] and info["agents"][0]["is_head"] and info["gateway"]
    gw = gateway(cluster)
    rec = wait_for_session(gw, function="plain_task")
    with forward(cluster, rec["id"]) as port:
        asyncio.run(attach_and_inspect(port, "local_value"))
    assert ray.get(ref, timeout=60) == 7


def test_status_and_version_name_the_ray_and_python_of_the_client_and_each_agent(cluster: str) -> None:
    """The agent records its node's Ray and Python; `status` and `--version` print them, and
    what this Ray lacks of raydbg's features, each in one line (no traceback)."""
    import platform

    from raydbg import _ray_internals

    mine = f"ray {ray.__version__}, python {platform.python_version()}"
    info = json.loads(raydbg_cli(cluster, "status", "--json").stdout)
    (agent,) = info["agents"]
    assert (agent["ray"], agent["python"]) == (ray.__version__, platform.python_version())
    assert info["python_version"] == platform.python_version()
    assert info["ray_missing"] == _ray_internals.missing_features()
    status = raydbg_cli(cluster, "status")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    lines = status.stdout.splitlines()
    assert f"this client: {mine}" in lines
    assert any(x.startswith(f"  agent {agent['node_id'][:12]} ") and x.endswith(f"(head) {mine}") for x in lines)
    assert not any("versions differ" in x for x in lines)
    for missing in _ray_internals.missing_features():
        assert missing in lines
    version = raydbg_cli(cluster, "--version")
    assert version.returncode == 0 and version.stderr == "", version.stderr
    assert version.stdout.splitlines()[1:] == [
        f"this client: {mine}", f"agent {agent['node_id'][:12]} (head): {mine}",
        *_ray_internals.missing_features()]


def test_killed_paused_worker_is_collected(cluster: str) -> None:
    assert raydbg_cli(cluster, "up").returncode == 0
    gw = gateway(cluster)
    ref = ray.remote(max_retries=0)(targets.plain_task).remote(3)
    rec = wait_for_session(gw, function="plain_task")
    psutil.Process(rec["pid"]).kill()
    started = time.monotonic()
    wait_gone(gw, rec["id"], timeout=10)
    assert time.monotonic() - started < 5
    events = json.loads(raydbg_cli(cluster, "events", "--json").stdout)
    assert any(e["kind"] == "session.collected" and e["details"]["session"] == rec["id"] for e in events)
    # --follow: the collection above comes first (replayed), then one caused while following.
    from e2e.conftest import RAYDBG, cli_env

    follow = subprocess.Popen([*RAYDBG, "events", "--follow", "--json"], env=cli_env(cluster),
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in follow.stdout or ()], daemon=True).start()

    def collected(sid: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ev = json.loads(lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            if ev["kind"] == "session.collected" and ev["details"].get("session") == sid:
                return
        raise AssertionError(f"raydbg events --follow never printed the collection of {sid}")

    try:
        collected(rec["id"])  # replayed: the follower has read the log once
        ref2 = ray.remote(max_retries=0)(targets.plain_task).remote(4)
        rec2 = wait_for_session(gw, function="plain_task")
        psutil.Process(rec2["pid"]).kill()
        collected(rec2["id"])  # new: printed as it came
    finally:
        follow.kill()
        follow.wait(10)
    for doomed in (ref, ref2):
        with pytest.raises(ray.exceptions.RayError):
            ray.get(doomed, timeout=60)


def _refused(gw: Any) -> dict[str, int]:
    return dict(asyncio.run(gw.status())["refused"])


async def _probe(address: str, sid: str) -> dict[str, Any]:
    """Every way in without the right token: each must be refused."""
    host, port = address.rsplit(":", 1)
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://{address}/api/v1/sessions") as resp:
            out["no_token"] = resp.status
        async with http.get(f"http://{address}/api/v1/sessions", headers={"Authorization": "Bearer nope"}) as resp:
            out["wrong_token"] = resp.status
        try:
            await http.ws_connect(f"http://{address}/api/v1/sessions/{sid}/dap",
                                  headers={"Authorization": "Bearer nope"})
            out["ws_wrong_token"] = 101
        except aiohttp.WSServerHandshakeError as exc:
            out["ws_wrong_token"] = exc.status
    reader, writer = await asyncio.open_connection(host, int(port))
    # A DAP client talking straight to the gateway port, as if it were debugpy.
    body = json.dumps({"seq": 1, "type": "request", "command": "initialize", "arguments": {}}).encode()
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    out["raw_dap"] = await asyncio.wait_for(reader.read(200), 5)
    writer.close()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(os.urandom(64) + b"\r\n\r\n")
    await writer.drain()
    out["garbage"] = await asyncio.wait_for(reader.read(200), 5)
    writer.close()
    # A bare connect+close must not wedge anything either.
    socket.create_connection((host, int(port)), timeout=5).close()
    return out


def test_nothing_accepts_dap_without_the_token(cluster: str) -> None:
    assert raydbg_cli(cluster, "up").returncode == 0
    gw = gateway(cluster)
    ref = ray.remote(targets.plain_task).remote(4)
    rec = wait_for_session(gw, function="plain_task")
    before = _refused(gw)
    agents = asyncio.run(gw.status())["agents"]
    for agent in agents:
        out = asyncio.run(_probe(f"{agent['node_ip']}:{agent['port']}", rec["id"]))
        assert out["no_token"] == 401 and out["wrong_token"] == 401 and out["ws_wrong_token"] == 401
        assert b"Content-Length" not in out["raw_dap"] or b"401" in out["raw_dap"] or b"400" in out["raw_dap"]
        assert out["garbage"].startswith(b"HTTP/1.") and b" 400 " in out["garbage"]
    after = _refused(gw)
    assert after.get("no token", 0) > before.get("no token", 0)
    assert after.get("bad token", 0) >= before.get("bad token", 0) + 2
    assert after.get("malformed", 0) >= before.get("malformed", 0) + 2
    # debugpy in the worker listens on no TCP port at all, only on its private socket
    # (tests/e2e/test_debug_door.py checks that door).
    from raydbg import registry

    private = registry.get(registry.SESSION + rec["id"])
    assert private["port"] is None and os.path.exists(private["socket"])
    # ... and the session still attaches with the right token afterwards.
    with forward(cluster, rec["id"]) as port:
        seen = asyncio.run(attach_and_inspect(port, "local_value"))
    assert seen["value"] == "12"
    assert ray.get(ref, timeout=60) == 13


def test_cli_errors_are_one_line(cluster: str) -> None:
    assert raydbg_cli(cluster, "up").returncode == 0
    unknown = raydbg_cli(cluster, "forward", "feedfacefeed", "--port", "0")
    assert unknown.returncode == 1 and "no paused session matches 'feedfacefeed'" in unknown.stderr
    bad = subprocess.run([sys.executable, "-m", "raydbg", "list"], capture_output=True, text=True,
                         env={**os.environ, "RAY_ADDRESS": cluster, "RAYDBG_TOKEN": "wrong"}, cwd=REPO)
    assert bad.returncode == 1 and "refused the token" in bad.stderr
    for out in (unknown, bad):
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ref = ray.remote(targets.plain_task).remote(5)
        rec = wait_for_session(gateway(cluster), function="plain_task")
        busy = raydbg_cli(cluster, "forward", rec["id"], "--port", str(taken.getsockname()[1]))
    assert busy.returncode == 1 and "cannot listen" in busy.stderr
    with forward(cluster, rec["id"]) as port:
        asyncio.run(attach_and_inspect(port, "local_value"))
    assert ray.get(ref, timeout=60) == 16


JOB = """
import os, ray
from cluster import Cluster
from e2e import targets
ray.init(address=os.environ["GCS"], runtime_env={"worker_process_setup_hook": targets.setup_hook_marker})
print("HOOKS", ray.get(ray.remote(targets.user_hook_ran).remote()),
      ray.get(ray.remote(targets.user_env_hook_ran).remote()), flush=True)
print(f"RESULT {ray.get(ray.remote(targets.plain_task).remote(10))}", flush=True)  # one write
"""


def test_ray_debug_env_alone_activates_and_chains_user_hooks(cluster: str, tmp_path: Path) -> None:
    """An unchanged job: RAY_DEBUG=1 in its environment, its own setup and runtime-env hooks."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = {**os.environ, "RAY_DEBUG": "1", "GCS": cluster, "RAYDBG_WAIT_TIMEOUT": "120",
           "PYTHONPATH": str(REPO / "tests"), "RAY_RUNTIME_ENV_HOOK": "e2e.targets.user_runtime_env_hook"}
    job = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        assert raydbg_cli(cluster, "up").returncode == 0
        gw = gateway(cluster)
        rec = wait_for_session(gw, function="plain_task", timeout=60)
        with forward(cluster, rec["id"]) as port:
            asyncio.run(attach_and_inspect(port, "local_value"))
        output, _ = job.communicate(timeout=120)
    except AssertionError:
        job.kill()
        raise AssertionError(job.communicate()[0]) from None
    finally:
        job.kill()
    assert "HOOKS yes ran" in output
    assert "RESULT 31" in output


VIEW_JOB = """
import json, os, ray
from e2e import targets
ray.init(address=os.environ["GCS"])
view = ray.remote(targets.worker_view)
own = view.options(runtime_env={"env_vars": {"RAYDBG_WAIT_TIMEOUT": "5"}})
print("VIEW", json.dumps({"job_runtime_env": dict(ray.get_runtime_context().runtime_env),
                          "task": ray.get(view.remote()), "own": ray.get(own.remote())}), flush=True)
"""


def _worker_view(cluster: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    script = tmp_path / "view.py"
    script.write_text(textwrap.dedent(VIEW_JOB))
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_RUNTIME_ENV_HOOK", "RAYDBG_WORKER_ACTIVATION")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                         env={**base, "GCS": cluster, "PYTHONPATH": str(REPO / "tests"), **env})
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("VIEW ")), None)
    assert line, out.stdout + out.stderr
    return dict(json.loads(line[5:]))


def test_an_activated_jobs_workers_take_raydbg_at_their_first_task_without_a_runtime_env(
    cluster: str, tmp_path: Path,
) -> None:
    """RAY_DEBUG=1 leaves the job without a runtime_env (Ray's costs every task ~2 %); its
    workers, prestarted ones included, set raydbg up from the job's settings. The node's
    environment has RAY_DEBUG=1 too (this module's cluster), and a plain job's workers stay
    Ray's: the decision is the job's."""
    on = _worker_view(cluster, tmp_path, RAY_DEBUG="1", RAYDBG_WAIT_TIMEOUT="77")
    assert on["job_runtime_env"] == {}
    assert on["task"] == {"breakpointhook": "raydbg.worker.hook", "wait_timeout": "77", "child_hook_var": ""}
    # A setting the task's own runtime_env sets keeps its value, as under a job runtime_env.
    assert on["own"]["breakpointhook"] == "raydbg.worker.hook" and on["own"]["wait_timeout"] == "5"

    plain = _worker_view(cluster, tmp_path, RAY_DEBUG="")
    assert plain["job_runtime_env"] == {}
    assert plain["task"]["breakpointhook"] != "raydbg.worker.hook"
    assert plain["own"]["breakpointhook"] != "raydbg.worker.hook"

    forced = _worker_view(cluster, tmp_path, RAY_DEBUG="1", RAYDBG_WAIT_TIMEOUT="77",
                          RAYDBG_WORKER_ACTIVATION="runtime_env")
    assert forced["job_runtime_env"]["worker_process_setup_hook"] == "raydbg.activation.worker_setup_hook"
    assert forced["task"]["breakpointhook"] == "raydbg.worker.hook" and forced["task"]["wait_timeout"] == "77"


def test_driver_breakpoint_is_a_local_pdb_prompt(cluster: str, tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text("x = 41\nbreakpoint()\nprint('after', x)\n")
    env = {**os.environ, "RAY_DEBUG": "1"}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import ray, runpy
        ray.init(address={cluster!r})
        runpy.run_path({str(script)!r})
        """)], input="p x + 1\nc\n", env=env, capture_output=True, text=True, timeout=120)
    assert "(Pdb)" in out.stdout and "42" in out.stdout and "after 41" in out.stdout, out.stdout + out.stderr


def test_agent_restarts_after_it_dies_then_down_stops_it(cluster: str) -> None:
    assert raydbg_cli(cluster, "up").returncode == 0
    status = json.loads(raydbg_cli(cluster, "status", "--json").stdout)
    head = next(a for a in status["agents"] if a["is_head"])
    psutil.Process(head["pid"]).kill()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        out = raydbg_cli(cluster, "status", "--json")
        if out.returncode == 0:
            agents = json.loads(out.stdout)["agents"]
            if agents and agents[0]["pid"] != head["pid"]:
                break
        time.sleep(1)
    else:
        raise AssertionError("the agent did not come back")
    ref = ray.remote(targets.plain_task).remote(6)
    rec = wait_for_session(gateway(cluster), function="plain_task")
    with forward(cluster, rec["id"]) as port:
        asyncio.run(attach_and_inspect(port, "local_value"))
    assert ray.get(ref, timeout=60) == 19
    down = raydbg_cli(cluster, "down")
    assert down.returncode == 0 and "stopped 1 agent" in down.stdout
    after = raydbg_cli(cluster, "status")
    assert after.returncode == 1 and "not active" in after.stderr, after.stdout


def test_prometheus_scrapes_a_running_agent(cluster: str, tmp_path: Path) -> None:
    """`raydbg prometheus` writes the targets; a real Prometheus scrapes the agent with the token."""
    import shutil
    import urllib.parse
    import urllib.request

    import yaml

    binary = shutil.which("prometheus")
    if binary is None:
        install = subprocess.run(["bash", str(REPO / "tests" / "telemetry_install_prometheus.sh")],
                                 capture_output=True, text=True, timeout=300)
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip(f"Debian's prometheus package could not be installed: {install.stderr.strip()}")
    assert raydbg_cli(cluster, "up").returncode == 0
    gw = gateway(cluster)
    token_file = tmp_path / "token"
    token_file.write_text(gw.token)
    # One refused request, so the relay counter has a value to scrape.
    with socket.create_connection(gw.address.rsplit(":", 1)) as s:
        s.sendall(b"GET /api/v1/sessions HTTP/1.0\r\n\r\n")
        s.recv(100)
    out = raydbg_cli(cluster, "prometheus", "--file-sd", str(tmp_path / "targets.json"),
                     "--token-file", str(token_file))
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    config["global"] = {"scrape_interval": "1s"}
    config["scrape_configs"][0]["scrape_interval"] = "1s"
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        result: list[Any] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not result:
            time.sleep(1)
            query = urllib.parse.urlencode({"query": 'raydbg_relay_connections_total{outcome="refused"}'})
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as resp:
                    result = json.load(resp)["data"]["result"]
            except OSError:
                continue
        assert result and float(result[0]["value"][1]) >= 1, result
    finally:
        server.terminate()
        server.wait(10)


def test_the_agent_runs_the_memory_monitor_in_its_own_process(cluster: str) -> None:
    from raydbg import registry

    assert raydbg_cli(cluster, "up").returncode == 0
    node_id = ray.get_runtime_context().get_node_id()
    deadline = time.monotonic() + 30
    status = None
    while time.monotonic() < deadline and status is None:
        status = registry.get("memory/" + node_id)
        time.sleep(0.5)
    assert status is not None, "no memory monitor status for this node"
    monitors = [p for p in psutil.process_iter(["cmdline"])
                if "raydbg.memory.service" in " ".join(p.info["cmdline"] or []) and node_id in " ".join(p.info["cmdline"])]
    assert len(monitors) == 1
    agent = next(a for a in json.loads(raydbg_cli(cluster, "status", "--json").stdout)["agents"]
                 if a["node_id"] == node_id)
    assert monitors[0].pid != agent["pid"]  # outside the agent: not the OOM killer's first pick
    nodes = asyncio.run(gateway(cluster).nodes())
    assert nodes[0]["memory"]["limit"] > 0


def test_the_monitor_knows_named_and_ray_data_tasks_and_their_budgets(cluster: str) -> None:
    """Who-is-who on real workers: a task named by options(name=...) (its process title is
    the name, not the function) and a Ray Data map task (a generator task) are retriable
    with the budgets their submitters gave them."""
    import threading

    from raydbg.memory.node_memory import NodeMeasurer
    from raydbg.memory.process_memory import scan
    from raydbg.memory.worker_tasks import GcsView, Resolver

    node_id = ray.get_runtime_context().get_node_id()
    named = ray.remote(max_retries=2)(targets.nap).options(name="Nap Named(x.y)").remote(8)
    ds = ray.data.range(2, override_num_blocks=1).map_batches(targets.nap_batch)
    data = threading.Thread(target=ds.take_all)
    data.start()
    measurer = NodeMeasurer(psi=False)
    resolver = Resolver(GcsView(), node_id, protect={os.getpid()})
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    # Until both are known with a budget: a task is titled a moment before its record is
    # written, and a GCS read that times out under load leaves a round unknown (sound).
    while time.monotonic() < deadline and (
        len(seen) < 2 or any(c.retries_left is None for c in seen.values())
    ):
        procs = scan(measurer.pids(), measurer.roots)
        for c in resolver.candidates(procs, {}):
            if c.name == "Nap Named(x.y)":
                seen["named"] = c
            elif "MapBatches(nap_batch)" in c.name:
                seen["data"] = c
        time.sleep(0.2)
    data.join(60)
    ray.get(named, timeout=60)
    assert set(seen) == {"named", "data"}, seen
    assert seen["named"].retriable and seen["named"].retries_left == 2
    assert seen["data"].retriable and seen["data"].retries_left == -1  # Ray Data: max_retries=-1
