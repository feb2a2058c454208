"""Every record that crosses a process or sits in storage, defined once as a msgspec Struct: pure, no Ray.

Writers build these; readers check what they read against them (raydbg/validate.py); the
docs' field tables (docs/records.md) and the VS Code extension's types
(vscode-ext/src/records.generated.ts) are generated from them by `python -m raydbg.schema_gen`
(`make lint` fails when either is stale). A field's `description` is its one documentation.

Decoding tolerates unknown fields (a newer writer's additions) and fills defaults for the
optional ones (an older writer's records). The wire field order is the declared order.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from raydbg.record_rules import ID_PATTERN, MAX_LONG_TEXT, MAX_PID, MAX_TEXT

Text = Annotated[str, Meta(max_length=MAX_TEXT)]
ShortText = Annotated[str, Meta(max_length=64)]
LongText = Annotated[str, Meta(max_length=MAX_LONG_TEXT)]
Id = Annotated[str, Meta(pattern=ID_PATTERN)]
Pid = Annotated[int, Meta(ge=1, le=MAX_PID)]
Port = Annotated[int, Meta(ge=1, le=65535)]
Rank = Annotated[int, Meta(ge=0, le=2**31 - 1)]
Count = Annotated[int, Meta(ge=0, le=2**31 - 1)]

INTERNAL = {"x-internal": True}  # a field the gateway never sends (agent/server.py PRIVATE_FIELDS)

SessionState = Literal["starting", "waiting", "attached", "snapshot"]


class Record(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """Base of every record: built by keyword; unknown fields tolerated when decoding."""


# --- sessions ------------------------------------------------------------------------------
class ExceptionInfo(Record):
    """What a post-mortem pause caught (capped where the record is built)."""

    type: Annotated[LongText, Meta(description="exception class name")] = ""
    message: Annotated[LongText, Meta(description="`str()` of the exception, capped")] = ""
    traceback: Annotated[LongText, Meta(description="formatted traceback, its tail kept when capped")] = ""


class SnapshotFrame(Record):
    """One frame of a snapshot (a thread `raydbg pause` found blocked in C), innermost first."""

    function: Annotated[Text, Meta(description="function name (or a `... N more frames` marker)")] = "?"
    file: Annotated[Text, Meta(description="absolute path of its file")] = ""
    line: Annotated[int | None, Meta(description="line number (null where Python has none)")] = 0
    locals: Annotated[dict[str, str], Meta(description="name -> safe repr, as the worker wrote it")] = {}
    user: Annotated[bool | UnsetType, Meta(
        description="present and true where the worker's user-code roots make the frame the "
                    "user's and its path alone would not (docs/hangs.md)")] = UNSET


class SessionRecord(Record):
    """One paused thread of one worker (`session/<id>`; `raydbg list --json`, `GET /api/v1/sessions`)."""

    id: Annotated[Id, Meta(description="session id (12 hex chars)")]
    job_id: Annotated[Text, Meta(description="Ray job id (hex)")]
    pid: Annotated[Pid, Meta(description="worker process id")]
    thread_id: Annotated[int, Meta(ge=0, description="Python thread ident of the paused thread")]
    thread_name: Annotated[Text, Meta(description="thread name")]
    file: Annotated[Text, Meta(
        description="absolute path of the paused frame's file (a post-mortem: of the innermost "
                    "frame of the user's code in the traceback, else the raising frame)")]
    line: Annotated[int, Meta(ge=0, le=2**31 - 1, description="line number of that frame")]
    function: Annotated[Text, Meta(description="function name of that frame")]
    reason: Annotated[ShortText, Meta(description="`breakpoint`, `exception`, or `pause` (`raydbg pause`)")]
    node_id: Annotated[Text, Meta(description="Ray node id (hex)")] = ""
    node_ip: Annotated[ShortText, Meta(description="node IP address")] = ""
    task_id: Annotated[Text | None, Meta(description="Ray task id (hex)")] = None
    task_name: Annotated[Text | None, Meta(
        description="task or actor-method name as Ray reports it (`f`, `Actor.method`)")] = None
    actor_id: Annotated[Text | None, Meta(description="actor id (hex) when the pause is in an actor")] = None
    actor_name: Annotated[Text | None, Meta(description="actor class name (or its given name)")] = None
    train_rank: Annotated[Rank | None, Meta(description="Ray Train world rank when in a Train worker")] = None
    train_run: Annotated[Text | None, Meta(description="Ray Train run (experiment) name")] = None
    train_local_rank: Annotated[Rank | None, Meta(description="Ray Train local rank (on its node)")] = None
    train_world_size: Annotated[Annotated[int, Meta(ge=1, le=2**31 - 1)] | None, Meta(
        description="Ray Train world size")] = None
    group: Annotated[Text | None, Meta(
        description="pause-all group: ranks paused together at one line (run + file + line + occurrence)")] = None
    breakpoint_id: Annotated[Id | None, Meta(
        description="the armed breakpoint (`raydbg break add`) that paused it")] = None
    exception: Annotated[ExceptionInfo | None, Meta(description="what a post-mortem caught")] = None
    since: Annotated[float, Meta(description="epoch seconds when it paused")] = 0.0
    state: Annotated[SessionState, Meta(
        description="`starting` (debugpy not ready yet), `waiting` (attachable), `attached`, or "
                    "`snapshot` (a thread `raydbg pause` could not stop yet: blocked in C; it "
                    "turns `starting`, same id, once back in Python)")] = "starting"
    cwd: Annotated[Text, Meta(description="working directory of the worker (for path mappings)")] = ""
    port: Annotated[Port | None, Meta(description="compatibility mode's TCP debugpy port",
                                      extra_json_schema=INTERNAL)] = None
    socket: Annotated[Text | None, Meta(description="the worker's private debugger socket",
                                        extra_json_schema=INTERNAL)] = None
    frames: Annotated[list[SnapshotFrame] | None, Meta(
        description="a snapshot's frames, innermost first, with their locals")] = None
    attachable: Annotated[bool, Meta(description="`state` is `waiting` or `attached` (set on writing)")] = False

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON values, `attachable` derived from `state`."""
        self.attachable = self.state in ("waiting", "attached")
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    def to_json(self) -> bytes:
        """As the stdlib writes it (registry.put, record_fit): the bytes clients have always read."""
        import json

        return json.dumps(self.to_dict()).encode()


# --- events ----------------------------------------------------------------------------------
class Event(Record):
    """Something that happened (`event/<ts_ms>-<id>`; `raydbg events --json`).

    kinds: `session.timeout`, `session.collected`, `agent.collected`, `monitor.failed`,
    `memory.kill`, `memory.dry-run`, `hang`, `straggler`; each kind's `details` below."""

    id: Annotated[Id, Meta(description="event id (8 hex chars)")]
    ts: Annotated[float, Meta(description="epoch seconds")]
    kind: Annotated[str, Meta(max_length=128, description="what happened (see the kinds above)")]
    node_id: Annotated[Text, Meta(description="the node it happened on, if one")] = ""
    message: Annotated[LongText, Meta(description="one human line (capped)")] = ""
    details: Annotated[dict[str, Any], Meta(description="the kind's details (below)")] = {}


class SessionEventDetails(Record):
    """`details` of `session.timeout` and `session.collected` (a dead worker's or node's session)."""

    session: Annotated[Text, Meta(description="the session's id")] = ""
    pid: Annotated[int | None, Meta(description="its worker's pid")] = None


class UnreadableSessionDetails(Record):
    """`details` of `session.collected` for a record that could not be read."""

    key: Annotated[Text, Meta(description="its key, escaped")] = ""


class AgentCollectedDetails(Record):
    """`details` of `agent.collected`: a dead node's agent record dropped by the gateway."""

    pid: Annotated[int | None, Meta(description="the agent's pid")] = None


class MonitorFailedDetails(Record):
    """`details` of `monitor.failed`: memory protection is off on a node."""

    reason: Annotated[LongText, Meta(description="why the memory monitor is not running")] = ""


# --- agents and the gateway ------------------------------------------------------------------
class NodeMemory(Record):
    """A node's memory as the memory monitor judges it."""

    used: Annotated[int, Meta(ge=0, le=2**62, description="bytes used (page cache not counted)")]
    limit: Annotated[int, Meta(ge=0, le=2**62, description="bytes the node (or its cgroup) may use")]


class MonitorState(Record):
    """How a node's memory monitor is doing (raydbg/agent/monitor_state.py)."""

    state: Annotated[Literal["running", "starting", "off", "failed"], Meta(description="its state")]
    reason: Annotated[LongText | UnsetType, Meta(description="why (`failed` only)")] = UNSET


class AgentRecord(Record):
    """One node's agent (`agent/<node_id>`; the `agents` of `GET /api/v1/status`)."""

    node_id: Annotated[Id, Meta(description="Ray node id (hex)")]
    node_ip: Annotated[ShortText, Meta(description="the node's IP address, where the agent listens")]
    port: Annotated[Port, Meta(description="the agent's HTTP port")]
    pid: Annotated[Pid | None, Meta(description="the agent's pid")] = None
    version: Annotated[ShortText, Meta(description="raydbg version")] = ""
    python: Annotated[ShortText, Meta(description="the node's Python version")] = ""
    ray: Annotated[ShortText, Meta(description="the node's Ray version")] = ""
    is_head: Annotated[bool, Meta(description="the head node's agent (it serves the gateway)")] = False
    started_at: Annotated[float, Meta(description="epoch seconds")] = 0.0
    started_by: Annotated[Text, Meta(description="who started it (a job's driver, `raydbg up`, ...)")] = ""
    watches_nodes: Annotated[bool, Meta(description="it starts the agents of nodes that join")] = False
    memory_monitor: Annotated[MonitorState | None, Meta(description="the node's memory monitor")] = None
    private_dir: Annotated[Text | None, Meta(
        description="why the private directory (debug doors, stacks requests) cannot be used, if it cannot")] = None
    heartbeat: Annotated[float | None, Meta(description="epoch seconds of its last refresh")] = None
    memory: Annotated[NodeMemory | None, Meta(description="node memory at the last heartbeat")] = None
    workers: Annotated[Count | None, Meta(description="Ray worker processes on the node")] = None
    gpus: Annotated[list[dict[str, Any]], Meta(description="the node's GPUs, when known")] = []

    def __post_init__(self) -> None:
        import ipaddress

        try:
            ipaddress.ip_address(self.node_ip)
        except ValueError:
            raise ValueError("expected an IP address at `$.node_ip`") from None


class GatewayRecord(Record):
    """Where the gateway listens (`gateway` key, and the gateway file for local clients)."""

    address: Annotated[str, Meta(max_length=256, description="`host:port`")]
    node_id: Annotated[Text, Meta(description="the head node's id")] = ""
    pid: Annotated[Pid | None, Meta(description="the gateway agent's pid")] = None
    start_time: Annotated[int | None, Meta(
        description="its process start time (clock ticks since boot): a local client checks it is this very process")] = None
    uid: Annotated[int | None, Meta(description="its user id")] = None
    boot_id: Annotated[ShortText | None, Meta(description="the machine's boot id")] = None
    version: Annotated[ShortText, Meta(description="raydbg version")] = ""
    gcs_address: Annotated[str, Meta(max_length=256, description="the cluster's GCS address")] = ""


# --- progress beats ----------------------------------------------------------------------------
class ProgressBeat(Record):
    """A worker's last beat: one fixed-size block per process, rewritten in place
    (raydbg/progress_records.py), read by its node's agent (`GET /api/v1/node/progress`)."""

    ts: Annotated[float, Meta(description="epoch seconds of the beat")]
    step: Annotated[int, Meta(description="step count (a Train report's, or beats so far)")]
    source: Annotated[ShortText, Meta(description="what beat: `progress`, `train.report`, ...")] = "progress"
    busy_s: Annotated[list[float], Meta(description="work time of the recent steps, oldest first")] = []
    wait_s: Annotated[list[float], Meta(description="time waited in the recent sync points")] = []
    data_s: Annotated[list[float], Meta(description="of each step's work time, the time waiting for data")] = []
    job_id: Annotated[str, Meta(description="Ray job id (hex)")] = ""
    node_id: Annotated[str, Meta(description="Ray node id (hex)")] = ""
    task_id: Annotated[str | None, Meta(description="Ray task id (hex)")] = None
    actor_id: Annotated[str | None, Meta(description="actor id (hex)")] = None
    train_run: Annotated[str | None, Meta(description="Ray Train run name")] = None
    world_rank: Annotated[int | None, Meta(description="Train world rank (`train_rank` of a session)")] = None
    local_rank: Annotated[int | None, Meta(description="Train local rank")] = None
    world_size: Annotated[int | None, Meta(description="Train world size")] = None
    pid: Annotated[int | None, Meta(description="the worker's pid")] = None


# --- pause answers -----------------------------------------------------------------------------
class PauseAnswer(Record):
    """`POST /api/v1/pause` (`raydbg pause --json`): the worker paused and its session."""

    target: Annotated[str, Meta(description="the target as asked (`rank 3`, `pid 1234`, ...)")]
    node_id: Annotated[str, Meta(description="the worker's node")]
    pid: Annotated[int, Meta(description="the worker's pid")]
    train_run: Annotated[str | None, Meta(description="its Train run, if any")] = None
    world_rank: Annotated[int | None, Meta(description="its Train world rank, if any")] = None
    thread: Annotated[str | None, Meta(description="the thread the worker paused")] = None
    session: Annotated[dict[str, Any] | None, Meta(
        description="its session record (a SessionRecord), null when none was listed in time")] = None


# --- stack reports (docs/hangs.md) -------------------------------------------------------------
class StackFrame(Record):
    """One frame of a thread's stack, innermost first (py-spy's, or the worker's own)."""

    function: Annotated[str, Meta(description="qualified function name (`Class.method`)")] = "?"
    file: Annotated[str, Meta(description="its file")] = ""
    line: Annotated[int | None, Meta(description="line number")] = None
    user: Annotated[bool | UnsetType, Meta(
        description="present and true where the worker's roots make the frame the user's and its "
                    "path alone would not")] = UNSET


class ThreadStack(Record):
    """One thread of a worker."""

    thread_id: Annotated[int | None, Meta(description="Python thread ident")] = None
    native_id: Annotated[int | None, Meta(description="OS thread id")] = None
    name: Annotated[str | None, Meta(description="thread name")] = None
    idle: Annotated[bool, Meta(description="waiting for work (an idle pool thread, the task loop)")] = False
    paused: Annotated[bool, Meta(description="stopped by raydbg (a session)")] = False
    frames: Annotated[list[StackFrame], Meta(description="innermost first")] = []


class WorkerStacks(Record):
    """One worker's stacks, labelled with its Ray identity (`workers` of `GET /api/v1/stacks`)."""

    node_id: Annotated[str, Meta(description="Ray node id (hex)")]
    pid: Annotated[int, Meta(description="the worker's pid")]
    node_ip: Annotated[str | None, Meta(description="node IP address")] = None
    job_id: Annotated[str | None, Meta(description="Ray job id (hex)")] = None
    actor_id: Annotated[str | None, Meta(description="actor id (hex)")] = None
    actor_name: Annotated[str | None, Meta(description="actor name or class")] = None
    task_name: Annotated[str | None, Meta(description="the task it runs, as its process title says")] = None
    train_run: Annotated[str | None, Meta(description="Ray Train run name")] = None
    world_rank: Annotated[int | None, Meta(description="Train world rank (`train_rank` of a session)")] = None
    local_rank: Annotated[int | None, Meta(description="Train local rank")] = None
    world_size: Annotated[int | None, Meta(description="Train world size")] = None
    paused: Annotated[bool, Meta(description="a thread of it is paused by raydbg")] = False
    session_ids: Annotated[list[str], Meta(description="its sessions")] = []
    source: Annotated[str | None, Meta(description="`py-spy` or `cooperative`; null when none answered")] = None
    cooperative_format: Annotated[str | UnsetType, Meta(
        description="`thread`, `json` or `faulthandler`, when cooperative")] = UNSET
    pyspy_error: Annotated[str | UnsetType, Meta(description="why py-spy failed, when the fallback answered")] = UNSET
    threads: Annotated[list[ThreadStack], Meta(description="its threads")] = []
    error: Annotated[str | UnsetType, Meta(description="why no stack could be taken")] = UNSET


class StackMember(Record):
    """A worker in a stack class."""

    node_id: Annotated[str | None, Meta(description="Ray node id (hex)")] = None
    pid: Annotated[int | None, Meta(description="the worker's pid")] = None
    world_rank: Annotated[int | None, Meta(description="its Train world rank")] = None


class StackClass(Record):
    """Workers whose main threads show one stack (`classes` of `GET /api/v1/stacks`)."""

    id: Annotated[str, Meta(description="class id (10 hex chars)")]
    summary: Annotated[str, Meta(description="one line: where they are")]
    members: Annotated[list[StackMember], Meta(description="its workers, by rank")] = []
    count: Annotated[int, Meta(description="how many workers")] = 0
    total: Annotated[int, Meta(description="workers in the report")] = 0
    paused: Annotated[bool, Meta(description="paused by raydbg")] = False
    in_collective: Annotated[bool, Meta(description="waiting in a collective")] = False
    thread: Annotated[str | None, Meta(description="the main thread's name")] = None
    frames: Annotated[list[StackFrame], Meta(description="the stack, innermost first")] = []


class RankCollective(Record):
    """A rank's last collectives in one process group (Flight Recorder), its recent list left out."""

    label: Annotated[str, Meta(description="the group's label (`world`, `group [2,3]`)")] = ""
    started: Annotated[dict[str, Any] | None, Meta(
        description="the last collective it entered (`op`, `seq`, `sizes`, `since_s`, ...)")] = None
    completed: Annotated[dict[str, Any] | None, Meta(description="the last one it completed")] = None


class RunRank(Record):
    """One rank of a RunSummary."""

    world_rank: Annotated[int, Meta(description="Train world rank")]
    local_rank: Annotated[int | None, Meta(description="Train local rank")] = None
    node_id: Annotated[str | None, Meta(description="Ray node id (hex)")] = None
    pid: Annotated[int | None, Meta(description="the worker's pid")] = None
    state: Annotated[str, Meta(
        description="`paused` (by raydbg), `held` (another rank is paused) or `running`")] = "running"
    session_ids: Annotated[list[str], Meta(description="its sessions")] = []
    class_id: Annotated[str | None, Meta(description="its StackClass's id")] = None
    last_progress_s: Annotated[float | None, Meta(
        description="seconds since its last beat (null: none seen)")] = None
    collectives: Annotated[dict[str, RankCollective] | None, Meta(
        description="group name -> its last collectives there; null without Flight Recorder")] = None


class WaitHop(Record):
    """One hop of the wait-for graph: `ranks` wait in `op` of `group` for `on` (raydbg/gang/wait_for.py)."""

    ranks: Annotated[list[int], Meta(description="the ranks that wait")] = []
    group: Annotated[str | None, Meta(description="the process group (null: point-to-point)")] = None
    group_label: Annotated[str, Meta(description="the group as shown (`world`, `group [0,1]`)")] = ""
    op: Annotated[str, Meta(description="the collective or `send`/`recv`")] = ""
    seq: Annotated[int | None, Meta(description="its sequence number in the group")] = None
    kind: Annotated[str, Meta(description="`collective`, `mismatch`, `unknown` or `p2p`")] = ""
    on: Annotated[list[int], Meta(description="the ranks they wait for")] = []
    note: Annotated[str, Meta(description="why, where the kind needs it")] = ""


class Deadlock(Record):
    """A cycle of ranks waiting on each other."""

    ranks: Annotated[list[int], Meta(description="the cycle, from its lowest rank")] = []
    hops: Annotated[list[int], Meta(description="indexes of its hops in `waits`")] = []
    all: Annotated[list[int], Meta(description="every rank of the cycle's component")] = []


class Mismatch(Record):
    """Ranks of one group that entered different collectives at one sequence number."""

    group: Annotated[str | None, Meta(description="the process group")] = None
    group_label: Annotated[str, Meta(description="the group as shown")] = ""
    seq: Annotated[int | None, Meta(description="the sequence number")] = None
    ops: Annotated[dict[str, list[int]], Meta(description="`op sizes` -> the ranks that entered it")] = {}
    odd: Annotated[list[int], Meta(description="the ranks outside the majority")] = []


class RunSummary(Record):
    """One Train run of a stacks answer (`runs` of `GET /api/v1/stacks`, `raydbg stacks --run --json`)."""

    run: Annotated[str, Meta(description="Train run name")] = ""
    job_id: Annotated[str, Meta(description="Ray job id (hex)")] = ""
    world_size: Annotated[int | None, Meta(description="Train world size")] = None
    ranks: Annotated[list[RunRank], Meta(description="its ranks, by rank")] = []
    held_by: Annotated[list[int], Meta(description="the ranks paused by raydbg (the others wait for them)")] = []
    waiting: Annotated[list[int], Meta(description="ranks whose stack is in a collective")] = []
    not_waiting: Annotated[list[int], Meta(description="ranks whose stack is not")] = []
    collectives_seen: Annotated[list[int], Meta(description="ranks with Flight Recorder figures")] = []
    waits: Annotated[list[WaitHop], Meta(description="the wait-for graph's hops")] = []
    culprits: Annotated[list[int], Meta(
        description="the graph's roots: ranks the others wait for that wait for nobody")] = []
    deadlocks: Annotated[list[Deadlock], Meta(description="cycles")] = []
    mismatches: Annotated[list[Mismatch], Meta(description="collectives the ranks disagree on")] = []
    groups: Annotated[dict[str, str], Meta(description="process group name -> label")] = {}
    chain: Annotated[list[str], Meta(description="who waits for whom, one hop a line, the culprits' place last")] = []
    attempts: Annotated[list[dict[str, Any]], Meta(
        description="Train's attempts of the run, oldest first (raydbg/telemetry/attempts.py)")] = []


class StackError(Record):
    """A worker or node whose stacks could not be taken."""

    node_id: Annotated[str | None, Meta(description="its node (empty: the run as a whole)")] = None
    pid: Annotated[int | UnsetType | None, Meta(description="the worker's pid, when one")] = UNSET
    error: Annotated[str, Meta(description="what went wrong")] = ""


# --- hang and straggler events (docs/hangs.md) -------------------------------------------------
class ClassBrief(Record):
    """The stack class a worker was in when an event was recorded."""

    id: Annotated[str | None, Meta(description="class id")] = None
    summary: Annotated[str | None, Meta(description="one line: where they are")] = None
    count: Annotated[int | None, Meta(description="how many workers")] = None
    total: Annotated[int | None, Meta(description="workers in the report")] = None
    in_collective: Annotated[bool | None, Meta(description="waiting in a collective")] = None
    frames: Annotated[list[StackFrame] | None, Meta(description="the stack, innermost first")] = None


class HangRank(Record):
    """A rank (or worker) of a hung run, as its last beat says."""

    world_rank: Annotated[int | None, Meta(description="Train world rank (null: not a Train worker)")] = None
    pid: Annotated[int | None, Meta(description="the worker's pid")] = None
    node_id: Annotated[str | None, Meta(description="Ray node id (hex)")] = None
    step: Annotated[int | None, Meta(description="its last step")] = None
    last_progress_s: Annotated[float | None, Meta(description="seconds since its last beat")] = None


class Culprit(Record):
    """A rank the others wait for, with its stack class."""

    world_rank: Annotated[int | None, Meta(description="Train world rank")] = None
    node_id: Annotated[str | None, Meta(description="Ray node id (hex)")] = None
    pid: Annotated[int | None, Meta(description="the worker's pid")] = None
    stack_class: Annotated[ClassBrief | None, Meta(description="its stack class, if it was dumped")] = None


class HangDetails(Record):
    """`details` of `hang`: a run that made no progress (raydbg/gang/hang_service.py)."""

    job_id: Annotated[str, Meta(description="Ray job id (hex)")] = ""
    train_run: Annotated[str | None, Meta(description="Train run name (null: a job's raydbg.progress() workers)")] = None
    world_size: Annotated[int | None, Meta(description="Train world size")] = None
    stalled_for_s: Annotated[float, Meta(description="seconds without progress")] = 0.0
    ranks: Annotated[list[HangRank], Meta(description="the ranks seen, by rank")] = []
    classes: Annotated[list[StackClass], Meta(description="the run's stack classes")] = []
    runs: Annotated[list[RunSummary], Meta(description="the run's summary (its stacks answer's runs)")] = []
    errors: Annotated[list[StackError], Meta(description="workers whose stacks could not be taken")] = []
    waits: Annotated[list[WaitHop], Meta(description="the wait-for graph's hops")] = []
    culprits: Annotated[list[Culprit], Meta(description="the graph's roots, with their stack class")] = []
    deadlocks: Annotated[list[Deadlock], Meta(description="cycles")] = []
    mismatches: Annotated[list[Mismatch], Meta(description="collectives the ranks disagree on")] = []
    chain: Annotated[list[str], Meta(description="who waits for whom, one hop a line")] = []


class DataSplit(Record):
    """Where a straggler's work went: its median data wait and compute against the others'."""

    data_wait_s: Annotated[float, Meta(description="its median wait for data a step")] = 0.0
    compute_s: Annotated[float, Meta(description="its median compute a step")] = 0.0
    others_data_wait_s: Annotated[float, Meta(description="the others' median wait for data")] = 0.0
    others_compute_s: Annotated[float, Meta(description="the others' median compute")] = 0.0


class StragglerDetails(Record):
    """`details` of `straggler`: a rank slower than the others step after step (raydbg/gang/stragglers.py)."""

    job_id: Annotated[str, Meta(description="Ray job id (hex)")] = ""
    train_run: Annotated[str, Meta(description="Train run name")] = ""
    world_rank: Annotated[int | None, Meta(description="the straggler's world rank")] = None
    world_size: Annotated[int | None, Meta(description="Train world size")] = None
    pid: Annotated[int | None, Meta(description="its pid (its node: the event's `node_id`)")] = None
    factor: Annotated[float, Meta(description="the setting: x the others' median")] = 0.0
    steps: Annotated[list[int], Meta(description="the steps judged")] = []
    busy_s: Annotated[list[float], Meta(description="its work in each of them")] = []
    others_median_s: Annotated[list[float], Meta(description="the others' median work in each")] = []
    ratio: Annotated[float, Meta(description="median of its work over the others'")] = 0.0
    others_waited_s: Annotated[list[float | None], Meta(description="the others' wait for it alone, per step")] = []
    clock: Annotated[str | None, Meta(description="how its clock was lined up with the others'")] = None
    data: Annotated[DataSplit | None, Meta(description="its data wait and compute (null without data marks)")] = None
    stack_class: Annotated[ClassBrief | None, Meta(description="its stack class, sampled until it is alone in it")] = None
    errors: Annotated[list[StackError], Meta(description="errors of the last sample")] = []


# --- memory kills (docs/memory.md) -------------------------------------------------------------
class KillCandidate(Record):
    """A worker the memory monitor could kill, as it judged it."""

    pid: Annotated[int | None, Meta(description="its pid")] = None
    kind: Annotated[str, Meta(description="`task`, `actor` or `idle`")] = ""
    name: Annotated[str, Meta(description="its task or actor name")] = ""
    memory: Annotated[int, Meta(description="bytes freed if it dies (USS)")] = 0
    gpu_memory: Annotated[int, Meta(description="GPU bytes it holds")] = 0
    growth_bps: Annotated[int, Meta(description="its growth, bytes a second")] = 0
    retriable: Annotated[bool | None, Meta(description="Ray would retry it")] = None
    retries_left: Annotated[int | None, Meta(description="retries left (-1: infinite, null: unknown)")] = None
    task_id: Annotated[str | None, Meta(description="Ray task id (hex)")] = None
    actor_id: Annotated[str | None, Meta(description="actor id (hex)")] = None
    job_id: Annotated[str | None, Meta(description="Ray job id (hex)")] = None
    attempt: Annotated[int | None, Meta(description="the task's attempt")] = None
    owner: Annotated[str | None, Meta(description="its caller (parent task or the actor's owner)")] = None
    prior_kills: Annotated[int, Meta(description="how often raydbg already killed it")] = 0
    expected_peak: Annotated[int, Meta(description="bytes it is expected to reach (0: unknown)")] = 0
    peak_source: Annotated[str, Meta(description="`learned`, `reservation` or `unknown`")] = "unknown"


class KillVictim(KillCandidate):
    """The worker killed: a KillCandidate, with why, and `expected_peak` what its next attempt is
    expected to need (at least what it had)."""

    reason: Annotated[str, Meta(description="why this one")] = ""


class TopConsumer(Record):
    """A process among the node's largest."""

    pid: Annotated[int | None, Meta(description="its pid")] = None
    name: Annotated[str, Meta(description="its name")] = ""
    memory: Annotated[int, Meta(description="private bytes (USS or RssAnon)")] = 0
    rss: Annotated[int, Meta(description="resident bytes")] = 0


class MemoryKillDetails(Record):
    """`details` of `memory.kill` and `memory.dry-run` (raydbg/memory/events.py)."""

    round: Annotated[str, Meta(description="the monitor round's id")] = ""
    mode: Annotated[str, Meta(description="the monitor's mode")] = ""
    trigger: Annotated[str | None, Meta(description="`threshold`, `min-free` or `trend`")] = None
    used: Annotated[int, Meta(description="node bytes used")] = 0
    limit: Annotated[int, Meta(description="node bytes it may use")] = 0
    fraction: Annotated[float, Meta(description="used / limit")] = 0.0
    source: Annotated[str, Meta(description="where `used` was read (`cgroup`, `meminfo`, ...)")] = ""
    cgroup: Annotated[str, Meta(description="the cgroup path, when read there")] = ""
    psi: Annotated[dict[str, float], Meta(description="memory pressure (PSI), when read")] = {}
    threshold: Annotated[float, Meta(description="the threshold, a fraction of the limit")] = 0.0
    threshold_bytes: Annotated[int, Meta(description="the threshold in bytes")] = 0
    target_bytes: Annotated[int, Meta(description="what the kill brings the node back under")] = 0
    need: Annotated[int, Meta(description="bytes to free")] = 0
    growth_bps: Annotated[int, Meta(description="the node's growth, bytes a second")] = 0
    reaction_s: Annotated[float, Meta(description="threshold crossing to kill, seconds")] = 0.0
    victim: Annotated[KillVictim | None, Meta(description="the worker killed")] = None
    candidates: Annotated[list[KillCandidate], Meta(description="the preference order (first 50)")] = []
    top_consumers: Annotated[list[TopConsumer], Meta(description="the node's largest processes")] = []
    decision: Annotated[str, Meta(description="the policy's explanation")] = ""


# --- step times (`raydbg steps`) ---------------------------------------------------------------
class StepsRank(Record):
    """One rank of a StepsRun: its recent steps, oldest first."""

    world_rank: Annotated[int, Meta(description="Train world rank")]
    node_id: Annotated[str | None, Meta(description="Ray node id (hex)")] = None
    pid: Annotated[int | None, Meta(description="its pid")] = None
    step: Annotated[int | None, Meta(description="its last step count")] = None
    last_progress_s: Annotated[float, Meta(description="seconds since its last beat")] = 0.0
    steps: Annotated[list[int], Meta(description="the recent steps' numbers")] = []
    busy_s: Annotated[list[float | None], Meta(description="work per step (outside waits at collectives)")] = []
    wait_s: Annotated[list[float | None], Meta(description="waited for others per step")] = []
    late_s: Annotated[list[float | None], Meta(description="others waited for it alone per step")] = []
    data_s: Annotated[list[float | None], Meta(description="waited for data per step")] = []
    busy_median_s: Annotated[float | None, Meta(description="median of `busy_s`")] = None
    wait_median_s: Annotated[float | None, Meta(description="median of `wait_s`")] = None
    late_median_s: Annotated[float | None, Meta(description="median of `late_s`")] = None
    data_median_s: Annotated[float | None, Meta(description="median of `data_s`")] = None
    clock: Annotated[str | None, Meta(description="how its clock was lined up with the others'")] = None
    straggler: Annotated[bool, Meta(description="it straggles now")] = False


class StepsRun(Record):
    """One Train run of `GET /api/v1/steps` (`runs`; `raydbg steps --json`)."""

    job_id: Annotated[str, Meta(description="Ray job id (hex)")] = ""
    train_run: Annotated[str, Meta(description="Train run name")] = ""
    ranks: Annotated[list[StepsRank], Meta(description="its ranks, by rank")] = []
    stragglers: Annotated[list[int], Meta(description="the ranks that straggle")] = []
    factor: Annotated[float, Meta(description="the setting: x the others' median")] = 0.0
    steps: Annotated[int, Meta(description="the setting: steps in a row")] = 0


# Each event kind's typed `details` (checked where written and where read; registry.record_event).
EVENT_DETAILS: dict[str, type[Record]] = {
    "session.timeout": SessionEventDetails,
    "agent.collected": AgentCollectedDetails,
    "hang": HangDetails,
    "straggler": StragglerDetails,
    "memory.kill": MemoryKillDetails,
    "memory.dry-run": MemoryKillDetails,
    "monitor.failed": MonitorFailedDetails,
}


# --- history (docs/history.md) -------------------------------------------------------------------
HistoryKind = Literal["job", "node", "event", "attempt", "steps", "memory", "span", "gap"]


class HistoryEntry(Record):
    """One line of a job's record (`<RAYDBG_HISTORY>/<record>/seg-*.jsonl`), appended as it happens."""

    ts: Annotated[float, Meta(description="epoch seconds")]
    kind: Annotated[HistoryKind, Meta(
        description="`job` (versions), `node` (a node's agent), `event` (an Event, session lifecycles "
                    "included), `attempt` (a Train attempt), `steps` (a rank's step times, downsampled), "
                    "`memory` (a node's memory), `span` (an embedded telemetry span), `gap` (lines the "
                    "writer dropped)")]
    job_id: Annotated[Text, Meta(description="Ray job id (hex)")] = ""
    data: Annotated[dict[str, Any], Meta(description="the kind's fields (docs/history.md)")] = {}


class HistoryManifest(Record):
    """A job's summary (`<RAYDBG_HISTORY>/<record>/manifest.json`), rewritten by its writer: a hint for
    listings; the segments are the record."""

    job_id: Annotated[Text, Meta(description="Ray job id (hex)")]
    record: Annotated[Text, Meta(
        description="the record's folder: `<job id>-<the Ray session's time>` (every cluster's first job is 01000000)")] = ""
    first_ts: Annotated[float, Meta(description="epoch seconds of its first entry")] = 0.0
    last_ts: Annotated[float, Meta(description="epoch seconds of its last entry")] = 0.0
    runs: Annotated[list[str], Meta(description="its Ray Train runs (names)")] = []
    counts: Annotated[dict[str, int], Meta(description="entries per kind")] = {}
    version: Annotated[ShortText, Meta(description="raydbg version of the writer")] = ""


# The records whose tables and TypeScript types are generated, in the docs' order.
DOCUMENTED: tuple[type[Record], ...] = (
    SessionRecord, ExceptionInfo, SnapshotFrame,
    Event, SessionEventDetails, UnreadableSessionDetails, AgentCollectedDetails, MonitorFailedDetails,
    AgentRecord, NodeMemory, MonitorState, GatewayRecord, ProgressBeat, PauseAnswer,
    WorkerStacks, ThreadStack, StackFrame, StackClass, StackMember,
    RunSummary, RunRank, RankCollective, WaitHop, Deadlock, Mismatch, StackError,
    HangDetails, HangRank, Culprit, ClassBrief, StragglerDetails, DataSplit,
    MemoryKillDetails, KillVictim, KillCandidate, TopConsumer,
    StepsRun, StepsRank,
    HistoryEntry, HistoryManifest,
)


def defaults(cls: type[Record]) -> dict[str, Any]:
    """Each optional field's default (a fresh copy), by wire name: what a reader fills in."""
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.default is not msgspec.NODEFAULT and f.default is not UNSET:
            out[f.encode_name] = type(f.default)() if isinstance(f.default, (dict, list)) else f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            out[f.encode_name] = f.default_factory()
    return out

