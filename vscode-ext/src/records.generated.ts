// Generated from raydbg/schema.py by `python -m raydbg.schema_gen`; edit there, not here.
// The records as the gateway sends them (fields with a default are always present;
// `?`: written only when set). records.ts parses what arrives into these, defensively.

/** One paused thread of one worker (`session/<id>`; `raydbg list --json`, `GET /api/v1/sessions`). */
export interface SessionRecord {
  /** session id (12 hex chars) */
  id: string;
  /** Ray job id (hex) */
  job_id: string;
  /** worker process id */
  pid: number;
  /** Python thread ident of the paused thread */
  thread_id: number;
  /** thread name */
  thread_name: string;
  /** absolute path of the paused frame's file (a post-mortem: of the innermost frame of the user's code in the traceback, else the raising frame) */
  file: string;
  /** line number of that frame */
  line: number;
  /** function name of that frame */
  function: string;
  /** `breakpoint`, `exception`, or `pause` (`raydbg pause`) */
  reason: string;
  /** Ray node id (hex) */
  node_id: string;
  /** node IP address */
  node_ip: string;
  /** Ray task id (hex) */
  task_id: string | null;
  /** task or actor-method name as Ray reports it (`f`, `Actor.method`) */
  task_name: string | null;
  /** actor id (hex) when the pause is in an actor */
  actor_id: string | null;
  /** actor class name (or its given name) */
  actor_name: string | null;
  /** Ray Train world rank when in a Train worker */
  train_rank: number | null;
  /** Ray Train run (experiment) name */
  train_run: string | null;
  /** Ray Train local rank (on its node) */
  train_local_rank: number | null;
  /** Ray Train world size */
  train_world_size: number | null;
  /** pause-all group: ranks paused together at one line (run + file + line + occurrence) */
  group: string | null;
  /** the armed breakpoint (`raydbg break add`) that paused it */
  breakpoint_id: string | null;
  /** what a post-mortem caught */
  exception: ExceptionInfo | null;
  /** epoch seconds when it paused */
  since: number;
  /** `starting` (debugpy not ready yet), `waiting` (attachable), `attached`, or `snapshot` (a thread `raydbg pause` could not stop yet: blocked in C; it turns `starting`, same id, once back in Python) */
  state: "attached" | "snapshot" | "starting" | "waiting";
  /** working directory of the worker (for path mappings) */
  cwd: string;
  /** a snapshot's frames, innermost first, with their locals */
  frames: SnapshotFrame[] | null;
  /** `state` is `waiting` or `attached` (set on writing) */
  attachable: boolean;
}

/** What a post-mortem pause caught (capped where the record is built). */
export interface ExceptionInfo {
  /** exception class name */
  type: string;
  /** `str()` of the exception, capped */
  message: string;
  /** formatted traceback, its tail kept when capped */
  traceback: string;
}

/** One frame of a snapshot (a thread `raydbg pause` found blocked in C), innermost first. */
export interface SnapshotFrame {
  /** function name (or a `... N more frames` marker) */
  function: string;
  /** absolute path of its file */
  file: string;
  /** line number (null where Python has none) */
  line: number | null;
  /** name -> safe repr, as the worker wrote it */
  locals: Record<string, string>;
  /** present and true where the worker's user-code roots make the frame the user's and its path alone would not (docs/hangs.md) */
  user?: boolean;
}

/** Something that happened (`event/<ts_ms>-<id>`; `raydbg events --json`). kinds: `session.timeout`, `session.collected`, `agent.collected`, `monitor.failed`, `memory.kill`, `memory.dry-run`, `hang`, `straggler`; each kind's `details` below. */
export interface Event {
  /** event id (8 hex chars) */
  id: string;
  /** epoch seconds */
  ts: number;
  /** what happened (see the kinds above) */
  kind: string;
  /** the node it happened on, if one */
  node_id: string;
  /** one human line (capped) */
  message: string;
  /** the kind's details (below) */
  details: Record<string, unknown>;
}

/** `details` of `session.timeout` and `session.collected` (a dead worker's or node's session). */
export interface SessionEventDetails {
  /** the session's id */
  session: string;
  /** its worker's pid */
  pid: number | null;
}

/** `details` of `session.collected` for a record that could not be read. */
export interface UnreadableSessionDetails {
  /** its key, escaped */
  key: string;
}

/** `details` of `agent.collected`: a dead node's agent record dropped by the gateway. */
export interface AgentCollectedDetails {
  /** the agent's pid */
  pid: number | null;
}

/** `details` of `monitor.failed`: memory protection is off on a node. */
export interface MonitorFailedDetails {
  /** why the memory monitor is not running */
  reason: string;
}

/** One node's agent (`agent/<node_id>`; the `agents` of `GET /api/v1/status`). */
export interface AgentRecord {
  /** Ray node id (hex) */
  node_id: string;
  /** the node's IP address, where the agent listens */
  node_ip: string;
  /** the agent's HTTP port */
  port: number;
  /** the agent's pid */
  pid: number | null;
  /** raydbg version */
  version: string;
  /** the node's Python version */
  python: string;
  /** the node's Ray version */
  ray: string;
  /** the head node's agent (it serves the gateway) */
  is_head: boolean;
  /** epoch seconds */
  started_at: number;
  /** who started it (a job's driver, `raydbg up`, ...) */
  started_by: string;
  /** it starts the agents of nodes that join */
  watches_nodes: boolean;
  /** the node's memory monitor */
  memory_monitor: MonitorState | null;
  /** why the private directory (debug doors, stacks requests) cannot be used, if it cannot */
  private_dir: string | null;
  /** epoch seconds of its last refresh */
  heartbeat: number | null;
  /** node memory at the last heartbeat */
  memory: NodeMemory | null;
  /** Ray worker processes on the node */
  workers: number | null;
  /** the node's GPUs, when known */
  gpus: Record<string, unknown>[];
}

/** A node's memory as the memory monitor judges it. */
export interface NodeMemory {
  /** bytes used (page cache not counted) */
  used: number;
  /** bytes the node (or its cgroup) may use */
  limit: number;
}

/** How a node's memory monitor is doing (raydbg/agent/monitor_state.py). */
export interface MonitorState {
  /** its state */
  state: "failed" | "off" | "running" | "starting";
  /** why (`failed` only) */
  reason?: string;
}

/** Where the gateway listens (`gateway` key, and the gateway file for local clients). */
export interface GatewayRecord {
  /** `host:port` */
  address: string;
  /** the head node's id */
  node_id: string;
  /** the gateway agent's pid */
  pid: number | null;
  /** its process start time (clock ticks since boot): a local client checks it is this very process */
  start_time: number | null;
  /** its user id */
  uid: number | null;
  /** the machine's boot id */
  boot_id: string | null;
  /** raydbg version */
  version: string;
  /** the cluster's GCS address */
  gcs_address: string;
}

/** A worker's last beat: one fixed-size block per process, rewritten in place (raydbg/progress_records.py), read by its node's agent (`GET /api/v1/node/progress`). */
export interface ProgressBeat {
  /** epoch seconds of the beat */
  ts: number;
  /** step count (a Train report's, or beats so far) */
  step: number;
  /** what beat: `progress`, `train.report`, ... */
  source: string;
  /** work time of the recent steps, oldest first */
  busy_s: number[];
  /** time waited in the recent sync points */
  wait_s: number[];
  /** of each step's work time, the time waiting for data */
  data_s: number[];
  /** Ray job id (hex) */
  job_id: string;
  /** Ray node id (hex) */
  node_id: string;
  /** Ray task id (hex) */
  task_id: string | null;
  /** actor id (hex) */
  actor_id: string | null;
  /** Ray Train run name */
  train_run: string | null;
  /** Train world rank (`train_rank` of a session) */
  world_rank: number | null;
  /** Train local rank */
  local_rank: number | null;
  /** Train world size */
  world_size: number | null;
  /** the worker's pid */
  pid: number | null;
}

/** `POST /api/v1/pause` (`raydbg pause --json`): the worker paused and its session. */
export interface PauseAnswer {
  /** the target as asked (`rank 3`, `pid 1234`, ...) */
  target: string;
  /** the worker's node */
  node_id: string;
  /** the worker's pid */
  pid: number;
  /** its Train run, if any */
  train_run: string | null;
  /** its Train world rank, if any */
  world_rank: number | null;
  /** the thread the worker paused */
  thread: string | null;
  /** its session record (a SessionRecord), null when none was listed in time */
  session: Record<string, unknown> | null;
}

/** One worker's stacks, labelled with its Ray identity (`workers` of `GET /api/v1/stacks`). */
export interface WorkerStacks {
  /** Ray node id (hex) */
  node_id: string;
  /** the worker's pid */
  pid: number;
  /** node IP address */
  node_ip: string | null;
  /** Ray job id (hex) */
  job_id: string | null;
  /** actor id (hex) */
  actor_id: string | null;
  /** actor name or class */
  actor_name: string | null;
  /** the task it runs, as its process title says */
  task_name: string | null;
  /** Ray Train run name */
  train_run: string | null;
  /** Train world rank (`train_rank` of a session) */
  world_rank: number | null;
  /** Train local rank */
  local_rank: number | null;
  /** Train world size */
  world_size: number | null;
  /** a thread of it is paused by raydbg */
  paused: boolean;
  /** its sessions */
  session_ids: string[];
  /** `py-spy` or `cooperative`; null when none answered */
  source: string | null;
  /** `thread`, `json` or `faulthandler`, when cooperative */
  cooperative_format?: string;
  /** why py-spy failed, when the fallback answered */
  pyspy_error?: string;
  /** its threads */
  threads: ThreadStack[];
  /** why no stack could be taken */
  error?: string;
}

/** One thread of a worker. */
export interface ThreadStack {
  /** Python thread ident */
  thread_id: number | null;
  /** OS thread id */
  native_id: number | null;
  /** thread name */
  name: string | null;
  /** waiting for work (an idle pool thread, the task loop) */
  idle: boolean;
  /** stopped by raydbg (a session) */
  paused: boolean;
  /** innermost first */
  frames: StackFrame[];
}

/** One frame of a thread's stack, innermost first (py-spy's, or the worker's own). */
export interface StackFrame {
  /** qualified function name (`Class.method`) */
  function: string;
  /** its file */
  file: string;
  /** line number */
  line: number | null;
  /** present and true where the worker's roots make the frame the user's and its path alone would not */
  user?: boolean;
}

/** Workers whose main threads show one stack (`classes` of `GET /api/v1/stacks`). */
export interface StackClass {
  /** class id (10 hex chars) */
  id: string;
  /** one line: where they are */
  summary: string;
  /** its workers, by rank */
  members: StackMember[];
  /** how many workers */
  count: number;
  /** workers in the report */
  total: number;
  /** paused by raydbg */
  paused: boolean;
  /** waiting in a collective */
  in_collective: boolean;
  /** the main thread's name */
  thread: string | null;
  /** the stack, innermost first */
  frames: StackFrame[];
}

/** A worker in a stack class. */
export interface StackMember {
  /** Ray node id (hex) */
  node_id: string | null;
  /** the worker's pid */
  pid: number | null;
  /** its Train world rank */
  world_rank: number | null;
}

/** One Train run of a stacks answer (`runs` of `GET /api/v1/stacks`, `raydbg stacks --run --json`). */
export interface RunSummary {
  /** Train run name */
  run: string;
  /** Ray job id (hex) */
  job_id: string;
  /** Train world size */
  world_size: number | null;
  /** its ranks, by rank */
  ranks: RunRank[];
  /** the ranks paused by raydbg (the others wait for them) */
  held_by: number[];
  /** ranks whose stack is in a collective */
  waiting: number[];
  /** ranks whose stack is not */
  not_waiting: number[];
  /** ranks with Flight Recorder figures */
  collectives_seen: number[];
  /** the wait-for graph's hops */
  waits: WaitHop[];
  /** the graph's roots: ranks the others wait for that wait for nobody */
  culprits: number[];
  /** cycles */
  deadlocks: Deadlock[];
  /** collectives the ranks disagree on */
  mismatches: Mismatch[];
  /** process group name -> label */
  groups: Record<string, string>;
  /** who waits for whom, one hop a line, the culprits' place last */
  chain: string[];
  /** Train's attempts of the run, oldest first (raydbg/telemetry/attempts.py) */
  attempts: Record<string, unknown>[];
}

/** One rank of a RunSummary. */
export interface RunRank {
  /** Train world rank */
  world_rank: number;
  /** Train local rank */
  local_rank: number | null;
  /** Ray node id (hex) */
  node_id: string | null;
  /** the worker's pid */
  pid: number | null;
  /** `paused` (by raydbg), `held` (another rank is paused) or `running` */
  state: string;
  /** its sessions */
  session_ids: string[];
  /** its StackClass's id */
  class_id: string | null;
  /** seconds since its last beat (null: none seen) */
  last_progress_s: number | null;
  /** group name -> its last collectives there; null without Flight Recorder */
  collectives: Record<string, RankCollective> | null;
}

/** A rank's last collectives in one process group (Flight Recorder), its recent list left out. */
export interface RankCollective {
  /** the group's label (`world`, `group [2,3]`) */
  label: string;
  /** the last collective it entered (`op`, `seq`, `sizes`, `since_s`, ...) */
  started: Record<string, unknown> | null;
  /** the last one it completed */
  completed: Record<string, unknown> | null;
}

/** One hop of the wait-for graph: `ranks` wait in `op` of `group` for `on` (raydbg/gang/wait_for.py). */
export interface WaitHop {
  /** the ranks that wait */
  ranks: number[];
  /** the process group (null: point-to-point) */
  group: string | null;
  /** the group as shown (`world`, `group [0,1]`) */
  group_label: string;
  /** the collective or `send`/`recv` */
  op: string;
  /** its sequence number in the group */
  seq: number | null;
  /** `collective`, `mismatch`, `unknown` or `p2p` */
  kind: string;
  /** the ranks they wait for */
  on: number[];
  /** why, where the kind needs it */
  note: string;
}

/** A cycle of ranks waiting on each other. */
export interface Deadlock {
  /** the cycle, from its lowest rank */
  ranks: number[];
  /** indexes of its hops in `waits` */
  hops: number[];
  /** every rank of the cycle's component */
  all: number[];
}

/** Ranks of one group that entered different collectives at one sequence number. */
export interface Mismatch {
  /** the process group */
  group: string | null;
  /** the group as shown */
  group_label: string;
  /** the sequence number */
  seq: number | null;
  /** `op sizes` -> the ranks that entered it */
  ops: Record<string, number[]>;
  /** the ranks outside the majority */
  odd: number[];
}

/** A worker or node whose stacks could not be taken. */
export interface StackError {
  /** its node (empty: the run as a whole) */
  node_id: string | null;
  /** the worker's pid, when one */
  pid?: number | null;
  /** what went wrong */
  error: string;
}

/** `details` of `hang`: a run that made no progress (raydbg/gang/hang_service.py). */
export interface HangDetails {
  /** Ray job id (hex) */
  job_id: string;
  /** Train run name (null: a job's raydbg.progress() workers) */
  train_run: string | null;
  /** Train world size */
  world_size: number | null;
  /** seconds without progress */
  stalled_for_s: number;
  /** the ranks seen, by rank */
  ranks: HangRank[];
  /** the run's stack classes */
  classes: StackClass[];
  /** the run's summary (its stacks answer's runs) */
  runs: RunSummary[];
  /** workers whose stacks could not be taken */
  errors: StackError[];
  /** the wait-for graph's hops */
  waits: WaitHop[];
  /** the graph's roots, with their stack class */
  culprits: Culprit[];
  /** cycles */
  deadlocks: Deadlock[];
  /** collectives the ranks disagree on */
  mismatches: Mismatch[];
  /** who waits for whom, one hop a line */
  chain: string[];
}

/** A rank (or worker) of a hung run, as its last beat says. */
export interface HangRank {
  /** Train world rank (null: not a Train worker) */
  world_rank: number | null;
  /** the worker's pid */
  pid: number | null;
  /** Ray node id (hex) */
  node_id: string | null;
  /** its last step */
  step: number | null;
  /** seconds since its last beat */
  last_progress_s: number | null;
}

/** A rank the others wait for, with its stack class. */
export interface Culprit {
  /** Train world rank */
  world_rank: number | null;
  /** Ray node id (hex) */
  node_id: string | null;
  /** the worker's pid */
  pid: number | null;
  /** its stack class, if it was dumped */
  stack_class: ClassBrief | null;
}

/** The stack class a worker was in when an event was recorded. */
export interface ClassBrief {
  /** class id */
  id: string | null;
  /** one line: where they are */
  summary: string | null;
  /** how many workers */
  count: number | null;
  /** workers in the report */
  total: number | null;
  /** waiting in a collective */
  in_collective: boolean | null;
  /** the stack, innermost first */
  frames: StackFrame[] | null;
}

/** `details` of `straggler`: a rank slower than the others step after step (raydbg/gang/stragglers.py). */
export interface StragglerDetails {
  /** Ray job id (hex) */
  job_id: string;
  /** Train run name */
  train_run: string;
  /** the straggler's world rank */
  world_rank: number | null;
  /** Train world size */
  world_size: number | null;
  /** its pid (its node: the event's `node_id`) */
  pid: number | null;
  /** the setting: x the others' median */
  factor: number;
  /** the steps judged */
  steps: number[];
  /** its work in each of them */
  busy_s: number[];
  /** the others' median work in each */
  others_median_s: number[];
  /** median of its work over the others' */
  ratio: number;
  /** the others' wait for it alone, per step */
  others_waited_s: (number | null)[];
  /** how its clock was lined up with the others' */
  clock: string | null;
  /** its data wait and compute (null without data marks) */
  data: DataSplit | null;
  /** its stack class, sampled until it is alone in it */
  stack_class: ClassBrief | null;
  /** errors of the last sample */
  errors: StackError[];
}

/** Where a straggler's work went: its median data wait and compute against the others'. */
export interface DataSplit {
  /** its median wait for data a step */
  data_wait_s: number;
  /** its median compute a step */
  compute_s: number;
  /** the others' median wait for data */
  others_data_wait_s: number;
  /** the others' median compute */
  others_compute_s: number;
}

/** `details` of `memory.kill` and `memory.dry-run` (raydbg/memory/events.py). */
export interface MemoryKillDetails {
  /** the monitor round's id */
  round: string;
  /** the monitor's mode */
  mode: string;
  /** `threshold`, `min-free` or `trend` */
  trigger: string | null;
  /** node bytes used */
  used: number;
  /** node bytes it may use */
  limit: number;
  /** used / limit */
  fraction: number;
  /** where `used` was read (`cgroup`, `meminfo`, ...) */
  source: string;
  /** the cgroup path, when read there */
  cgroup: string;
  /** memory pressure (PSI), when read */
  psi: Record<string, number>;
  /** the threshold, a fraction of the limit */
  threshold: number;
  /** the threshold in bytes */
  threshold_bytes: number;
  /** what the kill brings the node back under */
  target_bytes: number;
  /** bytes to free */
  need: number;
  /** the node's growth, bytes a second */
  growth_bps: number;
  /** threshold crossing to kill, seconds */
  reaction_s: number;
  /** the worker killed */
  victim: KillVictim | null;
  /** the preference order (first 50) */
  candidates: KillCandidate[];
  /** the node's largest processes */
  top_consumers: TopConsumer[];
  /** the policy's explanation */
  decision: string;
}

/** The worker killed: a KillCandidate, with why, and `expected_peak` what its next attempt is expected to need (at least what it had). */
export interface KillVictim {
  /** its pid */
  pid: number | null;
  /** `task`, `actor` or `idle` */
  kind: string;
  /** its task or actor name */
  name: string;
  /** bytes freed if it dies (USS) */
  memory: number;
  /** GPU bytes it holds */
  gpu_memory: number;
  /** its growth, bytes a second */
  growth_bps: number;
  /** Ray would retry it */
  retriable: boolean | null;
  /** retries left (-1: infinite, null: unknown) */
  retries_left: number | null;
  /** Ray task id (hex) */
  task_id: string | null;
  /** actor id (hex) */
  actor_id: string | null;
  /** Ray job id (hex) */
  job_id: string | null;
  /** the task's attempt */
  attempt: number | null;
  /** its caller (parent task or the actor's owner) */
  owner: string | null;
  /** how often raydbg already killed it */
  prior_kills: number;
  /** bytes it is expected to reach (0: unknown) */
  expected_peak: number;
  /** `learned`, `reservation` or `unknown` */
  peak_source: string;
  /** why this one */
  reason: string;
}

/** A worker the memory monitor could kill, as it judged it. */
export interface KillCandidate {
  /** its pid */
  pid: number | null;
  /** `task`, `actor` or `idle` */
  kind: string;
  /** its task or actor name */
  name: string;
  /** bytes freed if it dies (USS) */
  memory: number;
  /** GPU bytes it holds */
  gpu_memory: number;
  /** its growth, bytes a second */
  growth_bps: number;
  /** Ray would retry it */
  retriable: boolean | null;
  /** retries left (-1: infinite, null: unknown) */
  retries_left: number | null;
  /** Ray task id (hex) */
  task_id: string | null;
  /** actor id (hex) */
  actor_id: string | null;
  /** Ray job id (hex) */
  job_id: string | null;
  /** the task's attempt */
  attempt: number | null;
  /** its caller (parent task or the actor's owner) */
  owner: string | null;
  /** how often raydbg already killed it */
  prior_kills: number;
  /** bytes it is expected to reach (0: unknown) */
  expected_peak: number;
  /** `learned`, `reservation` or `unknown` */
  peak_source: string;
}

/** A process among the node's largest. */
export interface TopConsumer {
  /** its pid */
  pid: number | null;
  /** its name */
  name: string;
  /** private bytes (USS or RssAnon) */
  memory: number;
  /** resident bytes */
  rss: number;
}

/** One Train run of `GET /api/v1/steps` (`runs`; `raydbg steps --json`). */
export interface StepsRun {
  /** Ray job id (hex) */
  job_id: string;
  /** Train run name */
  train_run: string;
  /** its ranks, by rank */
  ranks: StepsRank[];
  /** the ranks that straggle */
  stragglers: number[];
  /** the setting: x the others' median */
  factor: number;
  /** the setting: steps in a row */
  steps: number;
}

/** One rank of a StepsRun: its recent steps, oldest first. */
export interface StepsRank {
  /** Train world rank */
  world_rank: number;
  /** Ray node id (hex) */
  node_id: string | null;
  /** its pid */
  pid: number | null;
  /** its last step count */
  step: number | null;
  /** seconds since its last beat */
  last_progress_s: number;
  /** the recent steps' numbers */
  steps: number[];
  /** work per step (outside waits at collectives) */
  busy_s: (number | null)[];
  /** waited for others per step */
  wait_s: (number | null)[];
  /** others waited for it alone per step */
  late_s: (number | null)[];
  /** waited for data per step */
  data_s: (number | null)[];
  /** median of `busy_s` */
  busy_median_s: number | null;
  /** median of `wait_s` */
  wait_median_s: number | null;
  /** median of `late_s` */
  late_median_s: number | null;
  /** median of `data_s` */
  data_median_s: number | null;
  /** how its clock was lined up with the others' */
  clock: string | null;
  /** it straggles now */
  straggler: boolean;
}

/** One line of a job's record (`<RAYDBG_HISTORY>/<record>/seg-*.jsonl`), appended as it happens. */
export interface HistoryEntry {
  /** epoch seconds */
  ts: number;
  /** `job` (versions), `node` (a node's agent), `event` (an Event, session lifecycles included), `attempt` (a Train attempt), `steps` (a rank's step times, downsampled), `memory` (a node's memory), `span` (an embedded telemetry span), `gap` (lines the writer dropped) */
  kind: "attempt" | "event" | "gap" | "job" | "memory" | "node" | "span" | "steps";
  /** Ray job id (hex) */
  job_id: string;
  /** the kind's fields (docs/history.md) */
  data: Record<string, unknown>;
}

/** A job's summary (`<RAYDBG_HISTORY>/<record>/manifest.json`), rewritten by its writer: a hint for listings; the segments are the record. */
export interface HistoryManifest {
  /** Ray job id (hex) */
  job_id: string;
  /** the record's folder: `<job id>-<the Ray session's time>` (every cluster's first job is 01000000) */
  record: string;
  /** epoch seconds of its first entry */
  first_ts: number;
  /** epoch seconds of its last entry */
  last_ts: number;
  /** its Ray Train runs (names) */
  runs: string[];
  /** entries per kind */
  counts: Record<string, number>;
  /** raydbg version of the writer */
  version: string;
}
