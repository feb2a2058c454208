"""Real clusters one after another: a fresh raydbg token each, Ray's never copied, the monitor's state in status.

HOME points at a temp dir for the whole module (the clusters' raylets, agents and the
CLI inherit it), so the machine's own ~/.raydbg and ~/.ray are never touched.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from cluster import REPO, Cluster

from raydbg import auth

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ENV = {"RAYDBG_WAIT_TIMEOUT": "60"}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    h = tmp_path / "home"
    h.mkdir(mode=0o700)
    yield h


def _status(cluster: Cluster) -> dict[str, Any]:
    out = cluster.cli("status", "--json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def _wait_monitor(cluster: Cluster, want: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        agents = _status(cluster)["agents"]
        last = [a.get("memory_monitor") for a in agents]
        if agents and all((m or {}).get("state") == want for m in last):
            return dict(agents[0])
        time.sleep(1)
    raise AssertionError(f"memory monitor not {want} within {timeout}s: {last}")


def _list_works(cluster: Cluster) -> None:
    out = cluster.cli("list", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


@ray.remote
def _parent() -> int:
    return os.getppid()


def test_each_cluster_gets_its_own_raydbg_token_and_clients_pick_the_right_one(home: Path) -> None:
    env = {**ENV, "HOME": str(home), "RAY_AUTH_MODE": "disabled"}
    tokens: dict[str, str] = {}
    for _ in range(2):
        with Cluster(num_cpus=2, env=env) as cluster:
            gw = cluster.up()
            path = auth.token_path(gw.address)
            assert path.parent == home / ".raydbg" / "tokens"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            assert gw.token == path.read_text().strip()
            tokens[gw.address] = gw.token
            _list_works(cluster)
            # The monitor runs (it pinned its raylet), and workers are that raylet's
            # children: the only processes its kills may reach.
            agent = _wait_monitor(cluster, "running")
            parent = ray.get(_parent.remote())
            assert parent == _raylet_of(agent["pid"]), "workers are not children of the raylet"
            assert not (home / ".raydbg" / "token").exists()  # no machine-wide token file
    assert len(tokens) == 2 and len(set(tokens.values())) == 2, "a later cluster reused a token"


def _raylet_of(agent_pid: int) -> int:
    stat_text = Path(f"/proc/{agent_pid}/stat").read_text()
    return int(stat_text[stat_text.rfind(")") + 2 :].split()[1])


# Ray reads its auth mode once per process: a cluster with token auth on runs in a driver
# process of its own (this one runs its clusters with auth off).
TOKEN_DRIVER = """
import json, sys
sys.path.insert(0, "tests")
from cluster import REPO, Cluster
from raydbg import auth
from raydbg.agent.token import ray_auth_token
with Cluster(num_cpus=2, env={"RAYDBG_WAIT_TIMEOUT": "60"}) as cluster:
    gw = cluster.up()
    out = cluster.cli("list", "--json")
    import os, subprocess
    from cluster import RAYDBG
    shell = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # a new shell's
    off = subprocess.run([*RAYDBG, "up"], env={**shell, "RAY_ADDRESS": cluster.address},
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    print(json.dumps({"up_without_token_mode": [off.returncode, off.stderr],"gateway": gw.address, "token": gw.token, "ray_token": ray_auth_token(),
                      "list_rc": out.returncode, "list": out.stdout, "stderr": out.stderr[-2000:],
                      "file": str(auth.token_path(gw.address))}))
"""


def test_with_ray_token_auth_raydbg_keeps_no_copy_of_rays_token(home: Path) -> None:
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token"}
    for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS", "RAYDBG_TOKEN"):
        env.pop(k, None)
    run = subprocess.run([sys.executable, "-c", TOKEN_DRIVER], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    ray_token = (home / ".ray" / "auth_token").read_text().strip()  # where Ray keeps it
    assert got["ray_token"] == ray_token and got["token"] == ray_token  # the gateway checks Ray's
    assert got["list_rc"] == 0 and json.loads(got["list"]) == [], got["stderr"]
    # `raydbg up` from a shell without RAY_AUTH_MODE=token: after Ray's own retry lines, one
    # line that says what to do.
    rc, err = got["up_without_token_mode"]
    last = err.strip().splitlines()[-1]
    assert rc == 1 and last.startswith("raydbg: ") and "RAY_AUTH_MODE=token" in last, err[-2000:]
    assert not Path(got["file"]).exists()  # no raydbg token file for this gateway
    copies = [p for p in home.joinpath(".raydbg").rglob("*") if p.is_file() and ray_token in p.read_text()]
    assert copies == [], f"Ray's token copied to {copies}"


def test_a_monitor_that_cannot_start_says_so_in_status_and_as_an_event(home: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared-run"
    shared.mkdir()
    os.chmod(shared, 0o777)  # a run dir open to every local user: the monitor must refuse it
    env = {**ENV, "HOME": str(home), "RAY_AUTH_MODE": "disabled", "RAYDBG_RUN_DIR": str(shared)}
    with Cluster(num_cpus=2, env=env) as cluster:
        cluster.up()
        agent = _wait_monitor(cluster, "failed")
        assert "has mode 777, open to other users" in agent["memory_monitor"]["reason"]
        assert str(shared) in agent["memory_monitor"]["reason"]
        text = cluster.cli("status")
        assert text.returncode == 0, text.stderr
        assert "memory monitor: failed: raydbg: " in text.stdout and "mode 777" in text.stdout
        out = cluster.cli("events", "--json")
        assert out.returncode == 0, out.stderr
        failed = [e for e in json.loads(out.stdout) if e["kind"] == "monitor.failed"]
        assert len(failed) == 1 and "mode 777" in failed[0]["message"], failed
        assert list(shared.iterdir()) == []  # nothing written there
