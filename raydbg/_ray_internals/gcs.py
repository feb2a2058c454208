"""GCS without ray.init: a client for KV reads and writes, Ray's GlobalState, its task
events and live actors.

Written for Ray 2.51.x to 2.60.x. Relies on `ray._raylet.GcsClient`,
`ray._private.state.state`, `ray._private.internal_api.get_state_from_address`, the
GlobalStateAccessor's `get_task_events()` and `get_actor_table(job_id, state)`, and
`ray.core.generated.gcs_pb2` (`TaskEvents`, `ActorTableData`), and where the dashboard
writes its address (`ray_constants.DASHBOARD_ADDRESS` in `KV_NAMESPACE_DASHBOARD`). What differs, detected by
what GlobalState has (never by version strings):
  - the connected accessor: `_connect_and_get_accessor()` (Ray 2.52+); Ray 2.51 has
    `_check_connected()` and the `global_state_accessor` attribute instead.
  - task events: `_get_all_task_events()` (Ray 2.58+: parsed rows, and it knows where
    they live); before it, the accessor's raw rows, parsed with `TaskEvents.FromString`.
"""

from __future__ import annotations

from typing import Any


def gcs_client(address: str) -> Any:
    """A GcsClient for `address` without ray.init (KV reads and writes)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def dashboard_url(client: Any) -> str | None:
    """`http://host:port` of the dashboard (where the State API answers) of the cluster
    `client` talks to; None when it runs without one."""
    from ray._private import ray_constants

    raw = client.internal_kv_get(ray_constants.DASHBOARD_ADDRESS.encode(), ray_constants.KV_NAMESPACE_DASHBOARD,
                                 timeout=5)
    return f"http://{bytes(raw).decode()}" if raw else None


def gcs_state(address: str | None = None) -> Any:
    """Ray's GlobalState: this connected process's, or one for `address` (no ray.init)."""
    if address is None:
        import ray

        return ray._private.state.state
    from ray._private.internal_api import get_state_from_address

    return get_state_from_address(address)


def state_accessor(state: Any) -> Any:
    """GlobalState's connected GlobalStateAccessor (connects on first use)."""
    connect = getattr(state, "_connect_and_get_accessor", None)
    if connect is not None:
        return connect()
    state._check_connected()  # Ray 2.51
    return state.global_state_accessor


def all_task_events(state: Any) -> Any:
    """Every task event GCS holds (TaskEvents protobuf rows)."""
    read_all = getattr(state, "_get_all_task_events", None)
    if read_all is not None:
        return read_all()
    from ray.core.generated import gcs_pb2

    return [gcs_pb2.TaskEvents.FromString(raw) for raw in state_accessor(state).get_task_events()]  # type: ignore[attr-defined]


def alive_actor_rows(state: Any) -> list[Any]:
    """ActorTableData protobufs of the cluster's live actors."""
    from ray.core.generated import gcs_pb2

    acc = state_accessor(state)
    return [gcs_pb2.ActorTableData.FromString(raw) for raw in acc.get_actor_table(None, "ALIVE")]  # type: ignore[attr-defined]
