"""Starting and stopping node agents: with an activated job (its driver, once connected, and
a worker's first pause), explicitly (`raydbg up/down`), and on nodes that join later (the
head's agent, raydbg/agent_host/actor.py). RAYDBG_AGENTS=off leaves the start to `raydbg up`.

The agent host (actor.py) is imported only when an agent is to be started: a pausing
worker and a driver pay for it in a background thread, if at all. Ray never shuts down under
such a thread: `ray.shutdown()` and the exit wait for it first (bounded, JOIN_AT_EXIT_S). A
driver whose cluster goes down with it then has the gateway record its last seconds
(`record_history_at_teardown`, bounded, RECORD_AT_TEARDOWN_S)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from raydbg import _ray_internals, config, ray_nodes, registry
from raydbg.config import NAMESPACE, agent_name
from raydbg.ray_nodes import head_node_id

if TYPE_CHECKING:  # msgspec is imported where a record is written
    from raydbg.schema import SessionRecord

log = logging.getLogger("raydbg")

_ensured: set[str] = set()
_ensure_lock = threading.Lock()
_starting: set[threading.Thread] = set()  # this process's agent starts still under way
_release_at_shutdown: set[threading.Event] = set()  # starts waiting for a first result

JOIN_AT_EXIT_S = 10.0  # ray.shutdown() or an exit waits at most this long for them
RECORD_AT_TEARDOWN_S = 5.0  # ... and for the gateway's last history round at most this long
# A driver's agent start waits for its first task result at most this long (a fresh worker
# starts in ~0.3 s on 2 idle cores; benchmarks/first_task.py).
START_AFTER_S = 2.0


def who(what: str) -> str:
    """`started_by` of the agents this process starts: what, which process, where."""
    return f"{what} (pid {os.getpid()} on {socket.gethostname()})"


def ensure_agent(node_id: str, is_head: bool, started_by: str = "") -> Any:
    """Get or create the agent actor of `node_id` (idempotent, race-free by name)."""
    from raydbg.agent_host import actor

    return actor.ensure_agent(node_id, is_head, started_by, watch_nodes=config.agents_mode() != "off")


def ensure_agents_for(rec: SessionRecord) -> None:
    """A session opened (the worker's pause listener): its node's agent and the gateway."""
    if config.agents_mode() != "off":
        ensure_agents_soon(rec.node_id, who(f"a pause (session {rec.id})"))


def ensure_all_soon(started_by: str, go: threading.Event | None = None) -> threading.Thread:
    """From an activated driver once connected: an agent on every alive node and the gateway,
    in the background, once `go` is set (the driver's first task result) or START_AFTER_S
    have passed, whichever comes first: the agents' process starts do not compete with the
    first task's worker. A driver that ends at once does not leave the start half done, nor
    wait for `go` (wait_for_agent_starts)."""
    go = go or threading.Event()
    with _ensure_lock:
        _release_at_shutdown.add(go)
    thread = _in_background(_ensure_all_quietly, (started_by, go), "raydbg-start-agents")
    _ray_internals.before_ray_shutdown(record_history_at_teardown)  # after the wait for the start
    return thread


def record_history_at_teardown(timeout: float = RECORD_AT_TEARDOWN_S) -> bool:
    """Before this driver's Ray shuts down: when the cluster goes with it (this driver started
    it), the gateway records what happened since its last round (every 2 s) and flushes; the
    cluster's processes are then killed, the gateway's last seconds with them. Bounded; quiet
    (False) when the cluster outlives the driver, no gateway runs, or the call fails."""
    if not _ray_internals.owns_cluster():
        return False
    try:
        import ray

        gateway = registry.get(registry.GATEWAY)
        if not gateway:
            return False
        handle = ray.get_actor(agent_name(str(gateway["node_id"])), namespace=NAMESPACE)
        return bool(ray.get(handle.record_history_now.remote(), timeout=timeout))
    except Exception as exc:
        log.debug("raydbg: the gateway's last history round before teardown failed: %s", exc)
        return False


def _in_background(target: Any, args: tuple[Any, ...], name: str) -> threading.Thread:
    """A daemon thread that Ray's shutdown waits for: one still inside a Ray call while Ray
    tears its core worker and GCS clients down, or while the interpreter finalizes, is how a
    driver that has done its work crashes at exit."""
    _ray_internals.before_ray_shutdown(wait_for_agent_starts)
    thread = threading.Thread(target=_tracked, args=(target, args), name=name, daemon=True)
    with _ensure_lock:
        _starting.add(thread)
    thread.start()
    return thread


def _tracked(target: Any, args: tuple[Any, ...]) -> None:
    try:
        target(*args)
    finally:
        with _ensure_lock:
            _starting.discard(threading.current_thread())


def wait_for_agent_starts(timeout: float = JOIN_AT_EXIT_S) -> bool:
    """Wait (bounded) for this process's agent starts to end; run before Ray shuts down.
    False, with a warning, if one is still under way after `timeout`."""
    deadline = time.monotonic() + timeout
    with _ensure_lock:
        for go in _release_at_shutdown:
            go.set()  # at shutdown a start no longer waits for the first result
        threads = [t for t in _starting if t is not threading.current_thread()]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in threads if t.is_alive()]
    if left:
        log.warning("raydbg: %s still under way after %.0fs; Ray shuts down regardless", ", ".join(left), timeout)
    return not left


def mark_starting(started_by: str) -> bool:
    """Say in the registry that the gateway is on its way, unless it runs: a client that finds
    no gateway then waits for it (bounded) instead of saying raydbg is not active
    (raydbg.client). The gateway's agent removes the mark once it listens; a start that fails
    removes it here. False, with nothing written, when the gateway runs."""
    if registry.get(registry.GATEWAY) is not None:
        return False
    registry.put(registry.AGENTS_STARTING, {"since": time.time(), "started_by": started_by})
    return True


def _ensure_all_quietly(started_by: str, go: threading.Event) -> None:
    marked = False
    try:
        marked = mark_starting(started_by)
        go.wait(START_AFTER_S)
        from raydbg.agent_host import actor

        actor.start_missing_agents(started_by, watch_nodes=True)
    except Exception:
        log.exception("raydbg: could not start node agents")
        if marked:
            _unmark_quietly()


def _unmark_quietly() -> None:
    try:
        registry.delete(registry.AGENTS_STARTING)
    except Exception:
        log.exception("raydbg: could not clear the agents' starting mark")


def ensure_agents_soon(node_id: str, started_by: str = "") -> None:
    """From a pausing worker: make sure this node's agent and the gateway exist (background)."""
    with _ensure_lock:
        if node_id in _ensured or not node_id:
            return
        _ensured.add(node_id)
    _in_background(_ensure_quietly, (node_id, started_by), "raydbg-ensure-agents")


def _ensure_quietly(node_id: str, started_by: str) -> None:
    gateway_missing = False
    try:
        head = head_node_id()
        gateway_missing = bool(head) and mark_starting(started_by)
        if head and gateway_missing and head != node_id:
            ensure_agent(head, True, started_by)
        if registry.get(registry.AGENT + node_id) is None:
            ensure_agent(node_id, node_id == head, started_by)
    except Exception:
        log.exception("raydbg: could not start node agents")
        if gateway_missing:
            _unmark_quietly()
        with _ensure_lock:
            _ensured.discard(node_id)


def up(timeout: float = 60.0) -> list[dict[str, Any]]:
    """Start an agent on every alive node; wait until each has registered."""
    import ray

    head = head_node_id()
    alive = [str(n["NodeID"]) for n in ray_nodes.nodes() if n.get("Alive")]
    handles = [ensure_agent(nid, nid == head, who("raydbg up")) for nid in alive]
    ray.get([h.ping.remote() for h in handles], timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agents = {a["node_id"]: a for a in registry.agents()}
        if all(nid in agents for nid in alive):
            return [agents[nid] for nid in alive]
        time.sleep(0.1)
    raise TimeoutError("raydbg agents did not register in time")


def down() -> int:
    """Stop every agent; return how many were stopped."""
    import ray

    stopped = 0
    # The head's first: it starts the agents of nodes without one (actor.start_missing_agents).
    for agent in sorted(registry.agents(), key=lambda a: not a.get("is_head")):
        try:
            handle = ray.get_actor(agent_name(agent["node_id"]), namespace=NAMESPACE)
        except ValueError:
            registry.delete(registry.AGENT + agent["node_id"])
            continue
        try:
            ray.get(handle.shutdown.remote(), timeout=10)
        except Exception:
            pass
        ray.kill(handle, no_restart=True)
        stopped += 1
    registry.delete(registry.GATEWAY)
    registry.delete(registry.AGENTS_STARTING)
    return stopped


def gateway_address() -> str | None:
    info = registry.get(registry.GATEWAY)
    return str(info["address"]) if info else None
