"""The one test-cluster helper: a real Ray cluster with raydbg active, one node or several raylets here.

The head is `ray.init` in the test process (the test is the job's driver, as a user's
script would be). `add_node()` starts another raylet on this machine with
`ray start --address HEAD --block`, in its own process group, with ports the OS says
are free and a custom resource to pin work to it: a real, separate raylet whose pid
a test can kill. Only processes this helper started are ever stopped, by process
group; never `ray stop`, which stops every Ray process on the machine (the other
test clusters too).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
RAYDBG = [sys.executable, "-m", "raydbg"]
RAY = str(Path(sys.executable).with_name("ray"))
ENV = {"RAY_DEBUG": "1", "RAYDBG_WAIT_TIMEOUT": "120"}

# Ray's defaults mark a killed raylet's node dead after ~15 s (a check every 3 s, 5 failures).
# These make it ~2 s (refused checks fail at once; a hung one fails after the timeout).
# Only for tests that kill a node: on a loaded 2-core machine a low threshold risks a
# false node death, so the timeout stays generous.
FAST_NODE_DEATH: dict[str, Any] = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 4,
}


RAY_START_TIMED_OUT = "timed out during startup"

# Ray Train's torch backend needs torch. The version matrix's light venvs (Pythons other than
# 3.11) go without: the registry has only CUDA builds of torch for them, several GB each.
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="no torch in this venv: the registry has only CUDA builds (several GB) for this "
           "Python, so the version matrix's light venvs run without Ray Train's torch backend")


def node_death_bound_s(config: dict[str, Any]) -> float:
    """The longest Ray takes to declare a dead raylet's node dead under `config`."""
    period = config["health_check_period_ms"] / 1000
    return period * config["health_check_failure_threshold"] + config["health_check_timeout_ms"] / 1000


def free_ports(n: int) -> list[int]:
    """n distinct ports the OS says are free now (all held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_port_range(size: int = 64) -> tuple[int, int]:
    """A run of `size` ports none of which is bound now, below the ephemeral range.

    Ray's own default worker range is 10002-19999; this stays above it so a concurrent
    default cluster does not take ports from ours.
    """
    rng = random.Random()
    for _ in range(200):
        low = rng.randrange(20000, 30000 - size)
        if all(_bindable(p) for p in range(low, low + size)):
            return low, low + size - 1
    raise RuntimeError(f"no {size} free consecutive ports in 20000-30000")


@dataclass
class Node:
    """A raylet this helper started (`ray start --block`, leader of its own process group)."""

    proc: subprocess.Popen[bytes]
    node_id: str
    resources: dict[str, float]
    node_manager_port: int
    log: Path
    temp_dir: Path

    def raylet_pid(self) -> int:
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.name() == "raylet":
                    return int(child.pid)
        raise AssertionError(f"no raylet under `ray start` pid {self.proc.pid}: {self.tail()}")

    def kill_raylet(self) -> int:
        """SIGKILL this node's raylet (a node death, as a crashed machine's); returns its pid."""
        pid = self.raylet_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self, timeout: float = 20) -> None:
        """End `ray start` and everything in its process group (raylet, agents, workers)."""
        for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
            deadline = time.monotonic() + grace
            while _group_alive(self.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not _group_alive(self.proc.pid):
                break
        self.remove_files()

    def remove_files(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.log.unlink(missing_ok=True)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def forget_ray_auth_state() -> None:
    """Make Ray read RAY_AUTH_MODE and the token anew in this process.

    Ray caches both per process (its config and its token loader) and refreshes them
    only when it turns token auth on itself: after a test cluster with
    RAY_AUTH_MODE=disabled (or another HOME), the next one would start with token auth
    while this driver still talks without a token ("InvalidAuthToken", seen in CI).
    """
    try:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]
    except ImportError:  # Ray 2.51: no token authentication, nothing cached
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def without_ray_auto_connect() -> Iterator[None]:
    """While a cluster is torn down: a Ray call from another thread of this process must not
    connect it again (Ray's auto-init: `ray.get`, `ray.get_runtime_context`, ...), or
    `ray.cluster_utils.Cluster.shutdown` refuses to remove the head it finds connected (seen
    once in CI, teardown of test_sd_cluster). Such calls are refused, and reported at the end
    with their threads' stacks (a warning: not the test's subject, but a finding)."""
    import ray.util.placement_group  # noqa: F401 - the module, whose name ray.util shadows
    from ray._private import auto_init_hook, client_mode_hook

    placement_group = sys.modules["ray.util.placement_group"]
    calls: list[str] = []

    def refuse() -> None:
        call = f"thread {threading.current_thread().name}:\n" + "".join(traceback.format_stack(limit=12))
        if call not in calls:
            calls.append(call)

    homes = (auto_init_hook, client_mode_hook, placement_group)
    saved = [home.auto_init_ray for home in homes]
    for home in homes:
        home.auto_init_ray = refuse  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for home, original in zip(homes, saved, strict=True):
            home.auto_init_ray = original  # type: ignore[attr-defined]
    if calls:
        warnings.warn("a Ray call tried to reconnect this driver during teardown:\n" + "\n".join(calls),
                      stacklevel=3)


@dataclass
class Cluster:
    """A Ray cluster with raydbg active: `start()` the head, `add_node()` more raylets, `shutdown()`.

    env: set in this process (and so in the job's runtime env) for the cluster's life.
    by_value: test modules workers cannot import; pickled by value (file and lines kept).
    system_config: Ray config of the whole cluster (GCS runs the node health checks).
    """

    num_cpus: int = 4
    env: dict[str, str] = field(default_factory=dict)
    by_value: tuple[ModuleType, ...] = ()
    system_config: dict[str, Any] | None = None
    address: str = ""
    nodes: list[Node] = field(default_factory=list)
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _down: bool = False

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def start(self) -> str:
        import ray
        from ray import cloudpickle

        import raydbg

        self._down = False
        wanted = {"RAY_DEBUG": "1", **self.env}
        # ray.init sets RAY_AUTH_MODE=token in this process when it turns Ray's token auth on.
        keys = (*wanted, "RAY_ADDRESS", "RAYDBG_GATEWAY", "RAY_AUTH_MODE")
        self._saved_env = {k: os.environ.get(k) for k in keys}
        os.environ.update(wanted)
        os.environ.pop("RAYDBG_GATEWAY", None)
        os.environ.pop("RAY_ADDRESS", None)
        for module in self.by_value:
            cloudpickle.register_pickle_by_value(module)
        forget_ray_auth_state()
        kwargs: dict[str, Any] = {"_system_config": self.system_config} if self.system_config else {}
        # "local": always a new cluster; a plain ray.init() would join whatever cluster a
        # `ray start` on this machine last wrote into /tmp/ray/ray_current_cluster.
        ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False,
                 runtime_env=raydbg.runtime_env(), logging_level="WARNING", **kwargs)
        self.address = str(ray.get_runtime_context().gcs_address)
        return self.address

    def head_node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def add_node(self, num_cpus: int = 2, resources: dict[str, float] | None = None,
                 timeout: float = 120) -> Node:
        """Another raylet on this machine joined to the head; returns once GCS lists it alive.

        Tried twice when Ray gave up on it: `ray start` waits a fixed 30 s for the raylet to
        register (ray/_private/node.py), which a loaded 2-core machine can exceed.
        """
        for attempt in (1, 2):
            node, tail = self._try_add_node(num_cpus, dict(resources or {}), timeout)
            if node is not None:
                return node
            if attempt == 1 and RAY_START_TIMED_OUT in tail:
                continue
            raise AssertionError(f"extra raylet did not join within {timeout}s:\n{tail}")
        raise AssertionError("unreachable")

    def _try_add_node(self, num_cpus: int, resources: dict[str, float],
                      timeout: float) -> tuple[Node | None, str]:
        import ray

        nm, om, metrics, agent_http, agent_grpc, runtime_env = free_ports(6)
        low, high = free_port_range()
        log = Path(tempfile.mkstemp(prefix="raydbg-node-", suffix=".log")[1])
        # Its own temp dir: `ray start` writes ray_current_cluster there, and in the shared
        # /tmp/ray that file makes every later plain ray.init() on this machine (other
        # test clusters too) join this cluster instead of starting its own. Short: socket
        # paths under it must stay below the 107-byte limit.
        temp_dir = Path(tempfile.mkdtemp(prefix="rdn-", dir="/tmp"))
        cmd = [
            RAY, "start", "--address", self.address, "--block", "--disable-usage-stats",
            "--temp-dir", str(temp_dir),
            "--num-cpus", str(num_cpus), "--num-gpus", "0", "--resources", json.dumps(resources),
            "--object-store-memory", str(200 * 1024 * 1024),
            "--node-manager-port", str(nm), "--object-manager-port", str(om),
            "--metrics-export-port", str(metrics), "--dashboard-agent-listen-port", str(agent_http),
            "--dashboard-agent-grpc-port", str(agent_grpc), "--runtime-env-agent-port", str(runtime_env),
            "--min-worker-port", str(low), "--max-worker-port", str(high),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=self._node_env(), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        node = Node(proc, "", resources, nm, log, temp_dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in ray.nodes():
                if n.get("Alive") and int(n.get("NodeManagerPort", 0)) == nm:
                    node.node_id = str(n["NodeID"])
                    self.nodes.append(node)
                    return node, ""
            if proc.poll() is not None:
                break
            time.sleep(0.25)
        tail = f"(rc {proc.poll()}) " + node.tail()
        node.stop()
        return None, tail

    def _node_env(self) -> dict[str, str]:
        """The raylet joins the head's auth: Ray's token handed over in memory, or auth off like the head."""
        from raydbg.agent.token import ray_auth_token

        env = dict(os.environ)
        token = ray_auth_token()
        if token:
            # Read once from the head's loader: another test may rewrite ~/.ray/auth_token meanwhile.
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        else:
            env["RAY_AUTH_MODE"] = "disabled"
        return env

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`raydbg ARGS` as a real subprocess against this cluster."""
        env = {**os.environ, "RAY_ADDRESS": self.address}
        env.pop("RAYDBG_GATEWAY", None)
        return subprocess.run([*RAYDBG, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)

    def up(self, timeout: float = 120) -> Any:
        """`raydbg up` (an agent on every alive node); returns the discovered gateway."""
        from raydbg.client import Gateway

        out = self.cli("up", timeout=timeout)
        assert out.returncode == 0, out.stderr
        os.environ["RAY_ADDRESS"] = self.address
        return Gateway.discover()

    def shutdown(self) -> None:
        """Stop it; once only (a test may end its cluster early: the record that outlives it)."""
        import ray
        from ray import cloudpickle

        if self._down:
            return
        self._down = True
        for node in reversed(self.nodes):
            node.stop()
        self.nodes.clear()
        ray.shutdown()
        for module in self.by_value:
            cloudpickle.unregister_pickle_by_value(module)
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def raydbg_cluster(*by_value: ModuleType, num_cpus: int = 2) -> Iterator[tuple[str, str, str]]:
    """A started cluster with its agents up: yields (gcs_address, gateway_address, token)."""
    with Cluster(num_cpus=num_cpus, env=dict(ENV), by_value=by_value) as cluster:
        gw = cluster.up()
        yield cluster.address, gw.address, gw.token
