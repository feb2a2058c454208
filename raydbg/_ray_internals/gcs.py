"""GCS without ray.init: a client for KV reads and writes, Ray's GlobalState, its task
events and live actors.

Written for Ray 2.60.0. Relies on `ray._raylet.GcsClient`, `ray._private.state.state`,
`ray._private.internal_api.get_state_from_address`, `GlobalState._get_all_task_events`
and `_connect_and_get_accessor().get_actor_table`, and `ray.core.generated.gcs_pb2.
ActorTableData`.
"""

from __future__ import annotations

from typing import Any


def gcs_client(address: str) -> Any:
    """A GcsClient for `address` without ray.init (KV reads and writes)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def gcs_state(address: str | None = None) -> Any:
    """Ray's GlobalState: this connected process's, or one for `address` (no ray.init)."""
    if address is None:
        import ray

        return ray._private.state.state
    from ray._private.internal_api import get_state_from_address

    return get_state_from_address(address)


def all_task_events(state: Any) -> Any:
    """Every task event GCS holds (`GlobalState._get_all_task_events`: protobuf rows)."""
    return state._get_all_task_events()


def alive_actor_rows(state: Any) -> list[Any]:
    """ActorTableData protobufs of the cluster's live actors."""
    from ray.core.generated import gcs_pb2

    acc = state._connect_and_get_accessor()
    return [gcs_pb2.ActorTableData.FromString(raw) for raw in acc.get_actor_table(None, "ALIVE")]  # type: ignore[attr-defined]
