"""Drivers that activate raydbg and then exit, one way each, for the exit stress runs.

    python benchmarks/exit_drivers.py NAME

Each starts a cluster of its own (`ray.init(address="local")`) unless RAY_ADDRESS names
one, runs with raydbg active (`raydbg.runtime_env()`), and exits; its exit status must
be 0 whatever the path out (benchmarks/exit_stress.py runs them many times). NAME:

  task         one task, wait until the agents the driver started have registered, ray.shutdown()
  in_flight    connect and exit at once, while the agent start is still under way (no ray.shutdown)
  shutdown_at_once  connect and ray.shutdown() at once, while the agent start is still under way
  registry     one task, the registry through a GcsClient of raydbg's own (as the CLI and
               the gateway lookup make one), then ray.shutdown()
  no_shutdown  one task, wait for the agents, exit without ray.shutdown() (Ray's atexit does it)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import ray

import raydbg

AGENTS_WITHIN_S = 60.0


def _connect() -> None:
    address = os.environ.get("RAY_ADDRESS") or "local"
    own = {"num_cpus": 1, "include_dashboard": False} if address == "local" else {}
    ray.init(address=address, runtime_env=raydbg.runtime_env(), logging_level="WARNING", **own)


def _one_task() -> None:
    assert ray.get(ray.remote(lambda: 1).remote(), timeout=120) == 1


def _wait_for_agents() -> None:
    from raydbg import registry

    deadline = time.monotonic() + AGENTS_WITHIN_S
    while not registry.agents():
        if time.monotonic() > deadline:
            raise SystemExit(f"no agent registered within {AGENTS_WITHIN_S:.0f}s")
        time.sleep(0.2)


def task() -> None:
    _connect()
    _one_task()
    _wait_for_agents()
    ray.shutdown()


def in_flight() -> None:
    _connect()


def shutdown_at_once() -> None:
    _connect()
    ray.shutdown()


def registry_client() -> None:
    from raydbg import client, registry

    _connect()
    _one_task()
    gcs = str(ray.get_runtime_context().gcs_address)
    registry.use_client(registry.client_for(gcs))  # as the CLI does in a process of its own
    _wait_for_agents()
    client._gateway_from_gcs(gcs)  # a one-off client, as the gateway lookup makes
    ray.shutdown()


def no_shutdown() -> None:
    _connect()
    _one_task()
    _wait_for_agents()


DRIVERS: dict[str, Callable[[], None]] = {
    "task": task, "in_flight": in_flight, "shutdown_at_once": shutdown_at_once,
    "registry": registry_client, "no_shutdown": no_shutdown,
}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in DRIVERS:
        sys.exit(f"usage: exit_drivers.py {{{'|'.join(DRIVERS)}}}")
    DRIVERS[sys.argv[1]]()
