"""The Ray adapter on each supported Ray's shape (2.51, 2.55, 2.60), by feature detection:
fake GlobalStates with only what each release has, real protobuf rows; what `raydbg status`
and `--version` say about versions. The e2e half runs in the version matrix (Makefile)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from ray.core.generated import gcs_pb2

from raydbg import _ray_internals
from raydbg._ray_internals import authentication, tracing
from raydbg.commands import versions


def _event(name: str) -> bytes:
    ev = gcs_pb2.TaskEvents(task_id=b"t" * 24, attempt_number=0)
    ev.task_info.name = name
    return bytes(ev.SerializeToString())


def _actor(name: str) -> bytes:
    return bytes(gcs_pb2.ActorTableData(actor_id=b"a" * 16, name=name).SerializeToString())


class _Accessor:
    def get_task_events(self) -> list[bytes]:
        return [_event("f"), _event("g")]

    def get_actor_table(self, job_id: Any, state: str) -> list[bytes]:
        assert job_id is None and state == "ALIVE"
        return [_actor("a1")]


class State251:
    """Ray 2.51's GlobalState: `_check_connected()` then `global_state_accessor`."""

    def __init__(self) -> None:
        self.global_state_accessor: _Accessor | None = None

    def _check_connected(self) -> None:
        self.global_state_accessor = _Accessor()


class State255:
    """Ray 2.55's: `_connect_and_get_accessor()`, no `_get_all_task_events`."""

    def _connect_and_get_accessor(self) -> _Accessor:
        return _Accessor()


class State260(State255):
    """Ray 2.58+: `_get_all_task_events()` returns parsed rows."""

    def _get_all_task_events(self) -> list[Any]:
        return [gcs_pb2.TaskEvents.FromString(_event("h"))]


@pytest.mark.parametrize(("state", "names"), [(State251(), ["f", "g"]), (State255(), ["f", "g"]),
                                               (State260(), ["h"])])
def test_task_events_on_each_rays_globalstate(state: Any, names: list[str]) -> None:
    assert [ev.task_info.name for ev in _ray_internals.all_task_events(state)] == names


@pytest.mark.parametrize("state", [State251(), State255(), State260()])
def test_live_actors_on_each_rays_globalstate(state: Any) -> None:
    assert [row.name for row in _ray_internals.alive_actor_rows(state)] == ["a1"]


def test_the_installed_rays_globalstate_has_one_of_the_known_shapes() -> None:
    """The fakes above are the real thing's shape: the installed Ray has one of them."""
    from ray._private.state import GlobalState

    has = {n for n in ("_get_all_task_events", "_connect_and_get_accessor", "_check_connected")
           if hasattr(GlobalState, n)}
    assert "_get_all_task_events" in has or "_connect_and_get_accessor" in has or has == {"_check_connected"}


def test_a_ray_without_token_auth_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import ray

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == authentication.AUTH_MODULE else real(name, *a))
    monkeypatch.setattr(ray, "__version__", "2.51.2")
    assert _ray_internals.token_auth_in_ray() is False
    assert _ray_internals.missing_features() == [
        "Ray token auth: not in Ray 2.51.2, raydbg's own token in use"]


def test_the_installed_ray_reports_what_it_lacks_by_what_it_has() -> None:
    import ray

    has_auth = (Path(ray.__file__).parent / "_private" / "authentication" / "authentication_utils.py").exists()
    assert _ray_internals.token_auth_in_ray() is has_auth
    assert any("token auth" in x for x in _ray_internals.missing_features()) is (not has_auth)


def test_raydbgs_opentelemetry_proxy_pickles_to_a_fresh_one() -> None:
    """Ray < 2.58 pickles `_opentelemetry` into every traced function: the proxy must travel
    without the OpenTelemetry modules it imported here."""
    proxy = tracing._OtelProxy()
    assert proxy.context is not None and "context" in vars(proxy)  # a module, now cached
    copy = pickle.loads(pickle.dumps(proxy))
    assert isinstance(copy, tracing._OtelProxy) and vars(copy) == {}
    assert copy.trace.get_tracer("x").start_as_current_span("s") is tracing._QUIET  # no span current


def _agent(node: str, ray: str, python: str, head: bool = False) -> dict[str, Any]:
    return {"node_id": node * 12, "ray": ray, "python": python, "is_head": head}


def test_versions_warn_only_when_the_client_and_nodes_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "client_versions", lambda: ("2.55.1", "3.13.0"))
    same = [_agent("a", "2.55.1", "3.13.0", head=True), _agent("b", "2.55.1", "3.13.0")]
    assert versions.mismatch_warning(same) is None
    assert versions.lines({"agents": same}) == [
        "this client: ray 2.55.1, python 3.13.0",
        f"agent {'a' * 12} (head): ray 2.55.1, python 3.13.0",
        f"agent {'b' * 12}: ray 2.55.1, python 3.13.0"]
    odd = [*same, _agent("c", "2.51.2", "3.13.0")]
    assert versions.mismatch_warning(odd) == (
        f"warning: versions differ: ray 2.55.1 (this client, node {'a' * 12}, node {'b' * 12}), "
        f"2.51.2 (node {'c' * 12})")
    # An agent from before agents recorded versions is unknown, not a difference.
    assert versions.mismatch_warning([*same, {"node_id": "d" * 12}]) is None
    status = {"agents": odd, "ray_missing": ["Ray token auth: not in Ray 2.51.2, raydbg's own token in use"]}
    assert versions.notes(status) == [versions.mismatch_warning(odd), status["ray_missing"][0]]
