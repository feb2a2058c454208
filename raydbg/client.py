"""Gateway client for the CLI and the TUI: finds the gateway and the token, calls the JSON API."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from raydbg import api_transport, auth, gateway_file
from raydbg.api_errors import AgentsStarting, ApiError
from raydbg.private_dir import UnsafeDirError, read_own_text, session_name
from raydbg.proc_identity import ProcessIdentity

if TYPE_CHECKING:
    import aiohttp

# asyncio, http.client and socket are imported where they are used: `raydbg list` needs no event
# loop, and `raydbg --help` or `raydbg trace` no HTTP client (each import is tens of ms at start-up).


# A problem a user can fix, said in one line: the gateway's own errors (api_errors, typed by
# HTTP status) and the client's (no cluster found, no token) are one family the CLI prints.
GatewayError = ApiError


# While an activated job's agents start (lifecycle.mark_starting: the first seconds after its
# driver connects) a client waits for the gateway, this long at most, instead of saying that
# raydbg is not active. A mark older than STARTING_FRESH_S is a start that died with its driver.
STARTING_WAIT_S = 10.0
STARTING_FRESH_S = 60.0
STARTING_POLL_S = 0.2


def starting(mark: dict[str, Any] | None, now: float) -> tuple[float, str] | None:
    """(seconds ago, by whom) of a fresh mark that the gateway is on its way, else None.
    Pure; another machine's clock may run a little ahead."""
    since = (mark or {}).get("since")
    if isinstance(since, bool) or not isinstance(since, (int, float)) or abs(now - since) > STARTING_FRESH_S:
        return None
    by = mark.get("started_by") if mark else None
    return max(0.0, now - since), by if isinstance(by, str) and by else "an activated job"


def _gateway_from_gcs(address: str) -> str | None:
    """The gateway Ray's KV names for the cluster at `address`. While raydbg's agents are
    starting there, the gateway once it listens (waiting at most STARTING_WAIT_S), or
    AgentsStarting: never "not active" for a cluster whose gateway is seconds away."""
    import time

    from raydbg import registry

    try:
        gcs = registry.client_for(address)
        info = registry.get(registry.GATEWAY, gcs)
        mark = starting(None if info else registry.get(registry.AGENTS_STARTING, gcs), time.time())
        deadline = time.monotonic() + STARTING_WAIT_S
        while not info and mark and time.monotonic() < deadline:
            time.sleep(STARTING_POLL_S)
            info = registry.get(registry.GATEWAY, gcs)
        if not info and mark:  # still starting, or the start failed (its mark removed) meanwhile
            mark = starting(registry.get(registry.AGENTS_STARTING, gcs), time.time())
    except Exception as exc:
        raise GatewayError(f"cannot reach the Ray cluster at {address}: {exc}") from None
    if info:
        return str(info["address"])
    if mark:
        ago, by = mark
        raise AgentsStarting(f"raydbg's agents are still starting on the cluster at {address} ({by}, "
                             f"{ago:.0f} s ago): try again in a few seconds")
    return None


RAY_TMP = Path("/tmp/ray")


def _local_gcs_address() -> str | None:
    """The address in Ray's `ray_current_cluster` file, if the file is ours: /tmp/ray is
    writable by every local user, who could put an address of theirs there."""
    try:
        text = read_own_text(RAY_TMP / "ray_current_cluster", limit=4096).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text.splitlines()[0] if text else None


def _local_session() -> str | None:
    """The name of the latest local Ray session (`/tmp/ray/session_latest` points at it).
    Only the name is taken from /tmp/ray: it picks which of OUR session folders to read."""
    try:
        return session_name(os.readlink(RAY_TMP / "session_latest"))
    except (OSError, ValueError):
        return None


def _local_gateway_file(session: str | None, gcs_address: str | None = None) -> str | None:
    """The head agent's gateway file of the local Ray session `session`, read only from our
    own private dirs (with `gcs_address`: only if it belongs to the cluster at that address)."""
    if session is None:
        return None
    return _alive_gateway(lambda: gateway_file.read(session), gcs_address)


def _local_gateway_index(gcs_address: str) -> str | None:
    """The gateway the head agent of the cluster at `gcs_address` left in our own ~/.raydbg
    (when that agent runs on this machine and is alive): no Ray import, whatever
    /tmp/ray/session_latest points at."""
    return _alive_gateway(lambda: gateway_file.read_index(gcs_address), gcs_address)


def _alive_gateway(read: Callable[[], Any], gcs_address: str | None) -> str | None:
    """The address in a gateway file, if it is the cluster's at `gcs_address` and the very
    agent that wrote it still runs here as our uid (pid, start time, uid, boot id): a file
    left by a stopped cluster is never trusted, even once its pid is reused."""
    try:
        info = read()
        if gcs_address is not None and info.get("gcs_address") != gcs_address:
            return None
        agent = ProcessIdentity.from_record(info)
        if agent is None or agent.why_not_alive() is not None:
            return None  # left by a stopped agent (or not ours): Ray's record says whether another runs
        return str(info["address"])
    except FileNotFoundError:
        return None
    except UnsafeDirError as exc:
        raise GatewayError(str(exc)) from None
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return None


def find_gateway(address: str | None = None, ask_gcs: bool = True) -> str:
    """--address, RAYDBG_GATEWAY, the cluster at RAY_ADDRESS, else the local Ray session.
    ask_gcs=False: only what this machine's files say (never waits on an absent GCS)."""
    if address:
        return address
    if os.environ.get("RAYDBG_GATEWAY"):
        return os.environ["RAYDBG_GATEWAY"]
    ray_address = os.environ.get("RAY_ADDRESS", "")
    if ray_address and ray_address != "auto" and "://" not in ray_address:
        found = (_local_gateway_file(_local_session(), gcs_address=ray_address)
                 or _local_gateway_index(ray_address) or (ask_gcs and _gateway_from_gcs(ray_address)))
        if found:
            return found
        raise GatewayError(f"raydbg is not active on the cluster at {ray_address}: run `raydbg up`")
    found = _local_gateway_file(_local_session())
    if found:
        return found
    gcs = _local_gcs_address()
    if gcs:
        found = _local_gateway_index(gcs) or (ask_gcs and _gateway_from_gcs(gcs))
        if found:
            return found
        raise GatewayError("raydbg is not active on the local Ray cluster: run `raydbg up`")
    raise GatewayError("no Ray cluster found: set RAY_ADDRESS (or RAYDBG_GATEWAY), or start one with `ray start --head`")


def checked_runs(answer: dict[str, Any], struct: str) -> dict[str, Any]:
    """A stacks or steps answer with each of its `runs` checked against `struct` (raydbg/schema.py,
    `RunSummary` or `StepsRun`): a run that is not one is dropped, in `errors` with why; the
    answer as it came when every run is one."""
    from raydbg import schema, validate

    runs, errors = [], []
    for run in answer.get("runs") or []:
        try:
            runs.append(validate.check(getattr(schema, struct), run, fill=False))
        except validate.Malformed as exc:
            errors.append({"node_id": "", "error": f"malformed {struct} from the gateway: {exc}"})
    if not errors:
        return answer
    return {**answer, "runs": runs, "errors": [*(answer.get("errors") or []), *errors]}


@dataclass
class Gateway:
    address: str
    token: str

    @classmethod
    def discover(cls, address: str | None = None, token_file: str | None = None,
                 ask_gcs: bool = True) -> Gateway:
        gateway = find_gateway(address, ask_gcs)
        try:
            # The token that belongs to this gateway: never another cluster's.
            token = auth.client_token(token_file, gateway)
        except auth.TokenError as exc:
            raise GatewayError(str(exc)) from None
        return cls(gateway, token)

    @property
    def peer(self) -> api_transport.Peer:
        return api_transport.Peer(self.address, self.token)

    @property
    def headers(self) -> dict[str, str]:
        return self.peer.headers

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://{self.address}{path}"

    async def get(self, path: str, timeout: float = 10.0) -> Any:
        return await self.request("GET", path, timeout)

    async def post(self, path: str, timeout: float = 10.0, body: Any = None) -> Any:
        return await self.request("POST", path, timeout, body)

    async def put(self, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        return await self.request("PUT", path, timeout, body)

    async def delete(self, path: str, timeout: float = 10.0) -> Any:
        return await self.request("DELETE", path, timeout)

    async def request(self, method: str, path: str, timeout: float = 10.0, body: Any = None) -> Any:
        """One call; `body`, when given, is sent as JSON. An HTTP error is its typed GatewayError
        (api_errors) with the gateway's line."""
        import asyncio

        # The standard library's client, not aiohttp: a CLI command pays ~0.2 s less start-up.
        return await asyncio.to_thread(self.call, method, path, timeout, body)

    def call(self, method: str, path: str, timeout: float = 10.0, body: Any = None) -> Any:
        """`request` without an event loop (blocking): for a CLI command that makes one call."""
        return api_transport.call(self.peer, method, path, body, timeout)

    async def sessions(self) -> list[dict[str, Any]]:
        return list(await self.get("/api/v1/sessions"))

    def sessions_now(self) -> list[dict[str, Any]]:
        """`sessions`, blocking, without an event loop (`raydbg list`: no asyncio to import)."""
        return list(self.call("GET", "/api/v1/sessions"))

    async def session(self, sid: str) -> dict[str, Any]:
        return dict(await self.get(f"/api/v1/sessions/{sid}"))

    async def status(self) -> dict[str, Any]:
        return dict(await self.get("/api/v1/status"))

    async def nodes(self) -> list[dict[str, Any]]:
        return list(await self.get("/api/v1/nodes"))

    async def events(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(await self.get(f"/api/v1/events?limit={limit}"))

    async def agents(self) -> list[dict[str, Any]]:
        """Every node agent's record (`raydbg prometheus` writes their /metrics targets)."""
        return list(await self.get("/api/v1/agents"))

    async def continue_session(self, sid: str) -> dict[str, Any]:
        return dict(await self.post(f"/api/v1/sessions/{sid}/continue"))

    async def pause(self, target: str, job: str | None = None, wait_s: float = 5.0) -> dict[str, Any]:
        """`raydbg pause`: stop the worker `target` names (RUN:RANK, PID, NODE:PID or a stack
        class id); {"node_id", "pid", "thread", "session": record or None after `wait_s`}."""
        body: dict[str, Any] = {"target": target, "wait_s": wait_s}
        if job is not None:
            body["job"] = job
        return dict(await self.post("/api/v1/pause", body=body, timeout=wait_s + 30.0))

    async def continue_group(self, group: str) -> dict[str, Any]:
        """Resume every rank of a pause group."""
        return dict(await self.post(f"/api/v1/groups/{group}/continue"))

    async def continue_all(self, job: str | None = None) -> dict[str, Any]:
        """Resume every paused session of `job` (None: of every job) in one request:
        {"continued": [ids], "groups": [group ids], "job": job}; a GatewayError when none is paused."""
        return dict(await self.post("/api/v1/continue", body={"job": job} if job is not None else {"all": True}))

    async def stacks(self, job: str | None = None, run: str | None = None, native: bool = False,
                     pyspy: bool = True, timeout: float = 30.0, thread: bool = True) -> dict[str, Any]:
        """Every worker's stacks, grouped (docs/hangs.md); `job`/`run` narrow it, `native` adds C
        frames, `pyspy=False` asks only the cooperative ways (no ptrace stop), `thread=False`
        does not ask activated workers' stacks threads (py-spy for every worker)."""
        q = {"native": "1" if native else "0"}
        if job:
            q["job"] = job
        if run:
            q["run"] = run
        if not pyspy:
            q["pyspy"] = "0"
        if not thread:
            q["thread"] = "0"
        return checked_runs(dict(await self.get("/api/v1/stacks?" + urlencode(q), timeout=timeout)), "RunSummary")

    async def steps(self, job: str | None = None, run: str | None = None) -> dict[str, Any]:
        """Per Train run, each rank's recent step times and who straggles (docs/hangs.md)."""
        q = {k: v for k, v in (("job", job), ("run", run)) if v}
        return checked_runs(dict(await self.get("/api/v1/steps" + (f"?{urlencode(q)}" if q else ""))), "StepsRun")

    async def train_runs(self, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Every Ray Train run the cluster's Train state knows, with its attempts (raydbg.telemetry.attempts)."""
        return list((await self.get("/api/v1/train/runs", timeout=timeout)).get("runs") or [])

    async def breakpoints(self, job: str | None = None) -> list[dict[str, Any]]:
        """Armed breakpoints (with `job`: that job's and every job's)."""
        answer = await self.get("/api/v1/breakpoints" + (f"?{urlencode({'job': job})}" if job else ""))
        if not isinstance(answer, dict) or not isinstance(answer.get("breakpoints"), list):
            raise GatewayError(f"{self.address} sent no list of breakpoints: is it a raydbg gateway of this version?")
        return [b for b in answer["breakpoints"] if isinstance(b, dict)]

    async def add_breakpoint(self, body: dict[str, Any]) -> dict[str, Any]:
        """Arm one: `body` has file, line and optionally job, condition, hit_limit, owner."""
        return dict(await self.post("/api/v1/breakpoints", body=body))

    async def remove_breakpoint(self, bid: str) -> dict[str, Any]:
        return dict(await self.delete(f"/api/v1/breakpoints/{quote(bid, safe='')}"))

    def dap_url(self, sid: str) -> str:
        """The session's DAP relay (a WebSocket; the bearer token in the handshake)."""
        return self.url(f"/api/v1/sessions/{sid}/dap")

    async def open_dap(self, http: aiohttp.ClientSession, sid: str) -> aiohttp.ClientWebSocketResponse:
        """The DAP relay WebSocket for a session (raw DAP bytes in binary messages)."""
        from raydbg.dap.transport import HANDSHAKE_REASONS, MAX_WS_MESSAGE, WS_HEARTBEAT_S

        reasons = {**HANDSHAKE_REASONS, 404: f"no paused session {sid}",
                   409: f"session {sid} is busy or not attachable yet"}
        # Bounded messages, and a heartbeat: a gateway gone silent ends the relay (raydbg forward).
        # The handshake may wait on the gateway holding a "starting" session, then on the far node's agent.
        return await api_transport.open_ws(self.peer, http, f"/api/v1/sessions/{sid}/dap", max_msg_size=MAX_WS_MESSAGE,
                                           heartbeat=WS_HEARTBEAT_S, reasons=reasons, timeout=30.0)
