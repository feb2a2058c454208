"""The node agent actor: hosts the server with its features (gateway on the head), the collector and heartbeats."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

from raydbg import _ray_internals, compat, config, gateway_file, ray_nodes, registry, schema
from raydbg.agent import dead_records, nodes
from raydbg.agent.monitor_state import RUNNING, MonitorWatch
from raydbg.agent.server import AgentServer, Feature
from raydbg.agent.token import agent_token, leave_for_local_clients
from raydbg.agent_host import history_recorder
from raydbg.breakpoints import api as breakpoints_api
from raydbg.gang import routes as gang_routes
from raydbg.gcs_tables import GcsTables
from raydbg.memory import budgets
from raydbg.private_dir import private_dir_problem
from raydbg.proc_identity import ProcessIdentity
from raydbg.version import __version__

log = logging.getLogger("raydbg.agent")

# The features that serve routes on every agent (and, on the gateway, their background work).
FEATURES: tuple[Feature, ...] = (gang_routes, breakpoints_api, history_recorder)
HEARTBEAT_S = 1.0
PRUNE_EVERY_S = 60.0
NODE_WATCH_S = 5.0  # the head's agent looks for nodes without an agent this often


class NodeAgent:
    """One per node. Started by `raydbg up` or by the first paused worker on the node."""

    def __init__(self, node_id: str, is_head: bool, started_by: str = "", watch_nodes: bool = False) -> None:
        import ray

        from raydbg import telemetry

        telemetry.setup("agent")
        self.node_id = node_id
        self.is_head = is_head
        self.started_by = started_by
        self.watch_nodes = watch_nodes and is_head
        self.node_ip = ray.util.get_node_ip_address()
        self.gcs_address = ray.get_runtime_context().gcs_address
        self.token = agent_token()
        self.server = AgentServer(
            node_id, self.node_ip, self.token, is_head, nodes_fn=nodes.cluster_nodes if is_head else None,
            features=FEATURES,
        )
        self.port = 0
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._pruned_jobs: set[str] = set()  # ended jobs whose budgets are gone (head only)
        threading.Thread(target=self._serve, name="raydbg-agent-server", daemon=True).start()
        if not self._ready.wait(30):
            raise RuntimeError("raydbg agent: server did not start")
        self._publish()
        self.monitor_watch = MonitorWatch()
        self.monitor = _spawn_memory_monitor(node_id, self.monitor_watch)
        threading.Thread(target=self._heartbeat, name="raydbg-agent-heartbeat", daemon=True).start()

    def _serve(self) -> None:
        from aiohttp import web

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(
            self.server.app(), access_log=log, access_log_class=self.server.access_logger()
        )
        loop.run_until_complete(runner.setup())
        host = self.node_ip
        port = config.gateway_port() if self.is_head else 0
        site = web.TCPSite(runner, host, port)
        loop.run_until_complete(site.start())
        self.port = int(runner.addresses[0][1])  # (host, port[, ...]) of the bound socket
        self._ready.set()
        loop.run_forever()

    def _agent_record(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "node_ip": self.node_ip,
            "port": self.port,
            "pid": os.getpid(),
            "version": __version__,
            "python": platform.python_version(),  # the workers' (raydbg break add: 3.11 costs more)
            "ray": compat.ray_version(),  # `raydbg status` warns when nodes differ
            "is_head": self.is_head,
            "started_at": time.time(),
            "started_by": self.started_by,
            "watches_nodes": self.watch_nodes,
            "memory_monitor": {"state": "starting"},
            # debug doors and stacks requests live there: `raydbg status` says when they cannot
            "private_dir": private_dir_problem(),
        }

    def _publish(self) -> None:
        self.record = self._agent_record()
        registry.put(registry.AGENT + self.node_id, self.record)
        if self.is_head:
            gateway = {
                "address": f"{self.node_ip}:{self.port}",
                "node_id": self.node_id,
                # pid, start time, uid, boot id: a local client checks it is this very process
                **ProcessIdentity.mine().fields(),
                "version": __version__,
                # lets a local client given RAY_ADDRESS use the gateway file, without importing Ray
                "gcs_address": self.gcs_address,
            }
            registry.put(registry.GATEWAY, gateway)
            registry.delete(registry.AGENTS_STARTING)  # clients waiting for the gateway find it now
            gateway_file.write(_ray_internals.session_dir(), gateway)
            try:
                leave_for_local_clients(str(gateway["address"]), self.token)
            except OSError as e:  # e.g. ~/.raydbg not private: clients need --token-file
                log.warning("raydbg: token not left for local clients: %s", e)
            log.warning("raydbg gateway listening on %s:%s (token required)", self.node_ip, self.port)

    def _heartbeat(self) -> None:
        next_prune = next_watch = 0.0
        while not self._stop.wait(HEARTBEAT_S):
            if self.watch_nodes and time.monotonic() >= next_watch:
                next_watch = time.monotonic() + NODE_WATCH_S
                try:  # a node that joined after the job started gets its agent from here
                    start_missing_agents(f"the head's agent (pid {os.getpid()}): a node joined", True)
                except Exception:
                    log.exception("raydbg agent: starting the agents of new nodes failed")
            if self.is_head and time.monotonic() >= next_prune:
                # The event log is bounded (registry.EVENTS_KEEP, EVENTS_MAX_AGE_S); the gateway prunes.
                next_prune = time.monotonic() + PRUNE_EVERY_S
                try:
                    registry.prune_events()
                except Exception:
                    log.exception("raydbg agent: pruning events failed")
                try:  # ended jobs' retry budgets and kill records (memory/budgets.py)
                    budgets.prune_ended_jobs(GcsTables().ended_jobs(), self._pruned_jobs)
                except Exception:
                    log.exception("raydbg agent: pruning ended jobs' budgets failed")
            try:
                monitor = self._monitor_status()
                self.record["memory_monitor"] = self._monitor_state(monitor)
                running = self.record["memory_monitor"]["state"] == RUNNING
                self.record["memory"] = nodes.node_memory((monitor or {}).get("memory") if running else None)
                self.record["workers"] = nodes.count_ray_workers()
                self.record["heartbeat"] = time.time()
                registry.put(registry.AGENT + self.node_id, self.record)
            except Exception:
                log.exception("raydbg agent heartbeat failed")
            try:  # on its own: a bad record read above must not stop the collector
                alive = nodes.alive_node_ids() if self.is_head else None
                dead_records.collect(self.node_id, alive)
            except Exception:
                log.exception("raydbg agent: collecting dead sessions failed")

    def _monitor_status(self) -> dict[str, Any] | None:
        """The memory monitor's own record: its state and its last measurement of the node."""
        from raydbg.memory.service import STATUS_KEY

        status = registry.get(STATUS_KEY + self.node_id)
        return status if isinstance(status, dict) else None

    def _monitor_state(self, status: dict[str, Any] | None) -> dict[str, Any]:
        code = self.monitor.poll() if self.monitor is not None else None
        state = self.monitor_watch.state(status, code, time.time())
        if self.monitor_watch.needs_event(state):
            registry.record_event(
                "monitor.failed", f"memory monitor not running: {state['reason']}",
                node_id=self.node_id, details=schema.MonitorFailedDetails(reason=state["reason"]),
            )  # fmt: skip
        return state

    # --- remote methods -------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return dict(self.record, refused=dict(self.server.refused))

    def ping(self) -> bool:
        return True

    def record_history_now(self) -> bool:
        """The gateway's history: one more round, flushed (before its cluster goes down)."""
        return history_recorder.record_now()

    def shutdown(self) -> None:
        self._stop.set()
        if self.monitor is not None:
            self.monitor.terminate()
        registry.delete(registry.AGENT + self.node_id)
        if self.is_head:
            registry.delete(registry.GATEWAY)
            gateway_file.remove(_ray_internals.session_dir())


def ensure_agent(node_id: str, is_head: bool, started_by: str = "", watch_nodes: bool = False) -> Any:
    """Get or create the agent actor of `node_id` (idempotent, race-free by name); the
    arguments count only for the agent that is created (who started it, and, on the head,
    whether it starts the agents of nodes that join later)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(NodeAgent)
    return actor_cls.options(  # type: ignore[attr-defined]
        name=config.agent_name(node_id),
        namespace=config.NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        num_cpus=0,
        max_restarts=-1,
        max_task_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        # The agent must not run a job's hooks or take over its own breakpoints.
        runtime_env={"env_vars": {"RAY_DEBUG": "0", "RAYDBG_AGENT": "1"}},
    ).remote(node_id, is_head, started_by, watch_nodes)


def start_missing_agents(started_by: str, watch_nodes: bool) -> list[str]:
    """An agent on every alive node that has none registered, the head's (the gateway) first;
    the node ids it was asked for (their agents register once started)."""
    head = ray_nodes.head_node_id()
    registered = {a.get("node_id") for a in registry.agents()}
    alive = sorted(ray_nodes.alive_node_ids(), key=lambda nid: nid != head)
    missing = [nid for nid in alive if nid not in registered]
    for nid in missing:
        ensure_agent(nid, nid == head, started_by, watch_nodes)
    return missing


def _spawn_memory_monitor(node_id: str, watch: MonitorWatch) -> Any:
    """The memory monitor runs as its own process (out of the OOM killer's first pick, which
    every Ray worker, this agent included, is); one per node however often the agent restarts.
    `watch` learns whether it is switched off or could not be spawned."""
    from raydbg.memory import settings

    if settings.current().monitor == "off":
        watch.off = True
        return None
    try:
        import ray

        from raydbg.memory import service

        logs = Path(_ray_internals.session_dir() or ".") / "logs"
        return service.spawn(
            ray.get_runtime_context().gcs_address, node_id, watch_pid=os.getppid(),
            protect=(os.getpid(),), log_path=str(Path(logs) / "raydbg_memory.log"),
        )
    except Exception as e:
        log.exception("raydbg agent: could not start the memory monitor")
        watch.error = f"could not be started: {e}"
        return None

