/**
 * The Ray view's content as plain data: clusters -> Train runs -> ranks, and
 * clusters -> jobs -> paused sessions for everything else.
 *
 * view.ts only turns these items into vscode.TreeItems, so everything a user reads
 * (labels, descriptions, tooltips, error items) is decided and tested here.
 */
import { BadRecord, SessionRecord, sessionName } from "./records";
import { RunRef, runKey } from "./runStacks";
import { ClusterConfig } from "./settings";
import { RankStacks, RunStacks } from "./stacks";

export type ClusterState =
  | { kind: "loading" }
  | { kind: "ok"; sessions: SessionRecord[]; bad: BadRecord[]; live: boolean }
  | { kind: "error"; message: string; reason: "auth" | "unreachable" | "protocol" };

export interface ViewItem {
  /** Stable across refreshes so VS Code keeps expansion and selection. */
  id: string;
  label: string;
  description?: string;
  tooltip?: string;
  /** Matched by `view/item/context` menus in package.json. */
  contextValue: string;
  /** Codicon name. */
  icon: string;
  /** Undefined for leaves. */
  children?: ViewItem[];
  session?: SessionRecord;
  cluster?: string;
  /** Set on a Train run's node (expanding it asks for its held ranks). */
  run?: RunRef;
  /** Set on an armed-breakpoints job node (Disarm acts on it). */
  armTarget?: { cluster: string; job: string | null };
}

export const CTX = {
  cluster: "raydbg.cluster",
  clusterError: "raydbg.cluster.error",
  job: "raydbg.job",
  run: "raydbg.run",
  rank: "raydbg.rank",
  held: "raydbg.rank.held",
  attachable: "raydbg.session.attachable",
  starting: "raydbg.session.starting",
  error: "raydbg.error",
  info: "raydbg.info",
} as const;

function basename(path: string): string {
  const parts = path.split(/[\\/]/);
  return parts[parts.length - 1] || path;
}

function reasonText(s: SessionRecord): string {
  if (s.reason === "exception") return s.exception ? s.exception.type : "exception";
  return s.breakpoint_id ? `${s.reason} ${s.breakpoint_id} (armed)` : s.reason;
}

export function sessionDescription(s: SessionRecord): string {
  const where = s.file ? `${basename(s.file)}${s.line !== null ? `:${s.line}` : ""}` : "unknown location";
  const state = s.state === "waiting" ? "" : ` (${s.state})`;
  return `${where} · ${reasonText(s)}${state}`;
}

export function sessionTooltip(s: SessionRecord, now: number = Date.now()): string {
  const lines = [`${sessionName(s)} — paused on ${s.reason === "exception" ? "an exception" : "a breakpoint"}`];
  if (s.exception) lines.push(`${s.exception.type}: ${s.exception.message}`);
  if (s.breakpoint_id) lines.push(`armed breakpoint ${s.breakpoint_id} (raydbg break, or an editor's armed breakpoints)`);
  lines.push(`at ${s.file || "?"}:${s.line ?? "?"} in ${s.function ?? "?"}`);
  lines.push(`session ${s.id} · job ${s.job_id} · state ${s.state}`);
  if (s.task_id) lines.push(`task ${s.task_id}`);
  if (s.actor_id) lines.push(`actor ${s.actor_name ?? "?"} (${s.actor_id})`);
  if (s.train_run !== null || s.train_rank !== null) {
    const rank = s.train_rank !== null ? `rank ${s.train_rank}${s.train_world_size !== null ? ` of ${s.train_world_size}` : ""}` : "rank ?";
    const local = s.train_local_rank !== null ? ` (local rank ${s.train_local_rank})` : "";
    lines.push(`Ray Train ${s.train_run !== null ? `run ${s.train_run}, ` : ""}${rank}${local}`);
  }
  if (s.group !== null) lines.push(`paused together with its run's other ranks (group ${s.group})`);
  lines.push(`node ${s.node_ip || "?"} (${s.node_id ? s.node_id.slice(0, 12) : "?"}) · pid ${s.pid ?? "?"} · thread ${s.thread_name ?? s.thread_id ?? "?"}`);
  if (s.cwd) lines.push(`cwd ${s.cwd}`);
  if (s.since !== null) lines.push(`paused ${ago(now / 1000 - s.since)} ago`);
  return lines.join("\n");
}

function ago(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function sessionItem(cluster: string, s: SessionRecord, now: number, label: string = sessionName(s)): ViewItem {
  let icon = s.reason === "exception" ? "error" : s.breakpoint_id ? "debug-breakpoint" : "debug-pause";
  if (!s.attachable) icon = "loading~spin";
  return {
    id: `${cluster}/session/${s.id}`,
    label,
    description: sessionDescription(s),
    tooltip: sessionTooltip(s, now),
    contextValue: s.attachable ? CTX.attachable : CTX.starting,
    icon,
    session: s,
    cluster,
  };
}

// Train workers read best in rank order; otherwise newest first, as the gateway sends.
function bySessionOrder(a: SessionRecord, b: SessionRecord): number {
  if (a.train_rank !== null && b.train_rank !== null && a.train_rank !== b.train_rank) return a.train_rank - b.train_rank;
  return (b.since ?? 0) - (a.since ?? 0);
}

export function groupByJob(sessions: readonly SessionRecord[]): Map<string, SessionRecord[]> {
  const groups = new Map<string, SessionRecord[]>();
  for (const s of sessions) {
    const g = groups.get(s.job_id);
    if (g) g.push(s);
    else groups.set(s.job_id, [s]);
  }
  for (const g of groups.values()) g.sort(bySessionOrder);
  return groups;
}

interface RunGroup {
  ref: RunRef;
  sessions: SessionRecord[];
}

/** Sessions of Train runs by (job, run), in run-name order; the rest as they came. */
export function groupByRun(sessions: readonly SessionRecord[]): { runs: RunGroup[]; rest: SessionRecord[] } {
  const runs = new Map<string, RunGroup>();
  const rest: SessionRecord[] = [];
  for (const s of sessions) {
    if (s.train_run === null) {
      rest.push(s);
      continue;
    }
    const key = runKey(s.job_id, s.train_run);
    const g = runs.get(key) ?? { ref: { job: s.job_id, run: s.train_run }, sessions: [] };
    g.sessions.push(s);
    runs.set(key, g);
  }
  const sorted = [...runs.values()].sort((a, b) => a.ref.run.localeCompare(b.ref.run) || a.ref.job.localeCompare(b.ref.job));
  return { runs: sorted, rest };
}

function ranksText(ranks: readonly number[]): string {
  return ranks.length === 1 ? `rank ${ranks[0]}` : `ranks ${ranks.join(",")}`;
}

function heldItem(runId: string, r: RankStacks, by: readonly number[], cluster: string): ViewItem {
  const label = `rank ${r.world_rank} — held by ${ranksText(by)}${r.summary ? `: ${r.summary}` : ""}`;
  const lines = [`rank ${r.world_rank}${r.local_rank !== null ? ` (local rank ${r.local_rank})` : ""} waits for ${ranksText(by)}, paused by raydbg`];
  if (r.summary) lines.push(`stack: ${r.summary}`);
  lines.push(`node ${r.node_id ? r.node_id.slice(0, 12) : "?"} · pid ${r.pid ?? "?"}`);
  if (r.last_progress_s !== null) lines.push(`last step ${ago(r.last_progress_s)} ago`);
  return { id: `${runId}/held/${r.world_rank}`, label, tooltip: lines.join("\n"), contextValue: CTX.held, icon: "watch", cluster };
}

/** A run node: its paused ranks (one item per rank) and, from stacks, the ranks they hold. */
function runItem(cluster: string, g: RunGroup, stacks: RunStacks | undefined, now: number): ViewItem {
  const runId = `${cluster}/run/${g.ref.job}/${g.ref.run}`;
  const byRank = new Map<number, SessionRecord[]>();
  const unranked: SessionRecord[] = [];
  for (const s of g.sessions) {
    if (s.train_rank === null) unranked.push(s);
    else byRank.set(s.train_rank, [...(byRank.get(s.train_rank) ?? []), s]);
  }
  const ranked: [number, ViewItem][] = [];
  for (const [rank, ss] of byRank) {
    if (ss.length === 1) {
      ranked.push([rank, sessionItem(cluster, ss[0], now, `rank ${rank}`)]);
      continue;
    }
    ss.sort(bySessionOrder);
    ranked.push([rank, {
      id: `${runId}/rank/${rank}`,
      label: `rank ${rank}`,
      description: `${ss.length} paused threads`,
      tooltip: `Ray Train run ${g.ref.run}, rank ${rank}: ${ss.length} threads paused`,
      contextValue: CTX.rank,
      icon: "debug-pause",
      children: ss.map((s) => sessionItem(cluster, s, now)),
      cluster,
    }]);
  }
  const paused = [...byRank.keys()].sort((a, b) => a - b);
  if (stacks) {
    const by = stacks.held_by.length > 0 ? [...stacks.held_by].sort((a, b) => a - b) : paused;
    for (const r of stacks.ranks) {
      if (r.state === "held" && !byRank.has(r.world_rank) && by.length > 0) ranked.push([r.world_rank, heldItem(runId, r, by, cluster)]);
    }
  }
  ranked.sort((a, b) => a[0] - b[0]);
  const sizes = g.sessions.map((s) => s.train_world_size).filter((n): n is number => n !== null);
  const world = sizes.length > 0 ? Math.max(...sizes) : (stacks?.world_size ?? null);
  const k = paused.length;
  const counted = world !== null ? `${k}/${world} ranks paused` : `${k} rank${k === 1 ? "" : "s"} paused`;
  const together = g.sessions.some((s) => s.group !== null) ? " · paused together" : "";
  return {
    id: runId,
    label: `run ${g.ref.run} (${counted})`,
    description: `job ${g.ref.job}${together}`,
    tooltip: `Ray Train run ${g.ref.run} of job ${g.ref.job}: ${ranksText(paused)} paused${world !== null ? ` of ${world}` : ""}`,
    contextValue: CTX.run,
    icon: "organization",
    children: [...ranked.map(([, item]) => item), ...unranked.map((s) => sessionItem(cluster, s, now))],
    cluster,
    run: g.ref,
  };
}

function messageItem(id: string, label: string, tooltip: string, error: boolean, cluster?: string): ViewItem {
  return { id, label, tooltip, contextValue: error ? CTX.error : CTX.info, icon: error ? "warning" : "info", cluster };
}

function clusterChildren(c: ClusterConfig, state: ClusterState, now: number, held: ReadonlyMap<string, RunStacks>): ViewItem[] {
  const base = c.name;
  switch (state.kind) {
    case "loading":
      return [messageItem(`${base}/loading`, "Connecting…", `Contacting ${c.address}`, false, base)];
    case "error":
      return [messageItem(`${base}/error`, state.message, state.message, true, base)];
    case "ok": {
      const items: ViewItem[] = [];
      const { runs, rest } = groupByRun(state.sessions);
      for (const g of runs) items.push(runItem(base, g, held.get(runKey(g.ref.job, g.ref.run)), now));
      for (const [job, sessions] of groupByJob(rest)) {
        items.push({
          id: `${base}/job/${job}`,
          label: `Job ${job}`,
          description: `${sessions.length} paused`,
          tooltip: `Ray job ${job}: ${sessions.length} paused session${sessions.length === 1 ? "" : "s"}`,
          contextValue: CTX.job,
          icon: "layers",
          children: sessions.map((s) => sessionItem(base, s, now)),
          cluster: base,
        });
      }
      for (const b of state.bad) {
        items.push(messageItem(`${base}/bad/${b.index}`, `Unreadable session record #${b.index}`, b.error, true, base));
      }
      if (items.length === 0) items.push(messageItem(`${base}/empty`, "No paused sessions", "Nothing is paused on this cluster. Set RAY_DEBUG=1 and call breakpoint() in a task.", false, base));
      return items;
    }
  }
}

function clusterDescription(c: ClusterConfig, state: ClusterState): string {
  switch (state.kind) {
    case "loading":
      return c.address;
    case "error":
      return `${c.address} · ${state.reason === "auth" ? "token rejected" : state.reason === "unreachable" ? "unreachable" : "error"}`;
    case "ok":
      return `${c.address} · ${state.sessions.length} paused${state.live ? "" : " (polling)"}`;
  }
}

export function clusterItem(c: ClusterConfig, state: ClusterState, now: number = Date.now(), held: ReadonlyMap<string, RunStacks> = new Map()): ViewItem {
  return {
    id: `${c.name}`,
    label: c.name,
    description: clusterDescription(c, state),
    tooltip: `raydbg gateway ${c.address}`,
    contextValue: state.kind === "error" ? CTX.clusterError : CTX.cluster,
    icon: state.kind === "error" ? "debug-disconnect" : "server",
    children: clusterChildren(c, state, now, held),
    cluster: c.name,
  };
}

/** The whole view: one item per configured cluster, settings problems first. */
export function buildTree(
  clusters: readonly ClusterConfig[],
  states: ReadonlyMap<string, ClusterState>,
  settingsErrors: readonly string[] = [],
  now: number = Date.now(),
  /** Per cluster name: held-rank information by runKey. */
  held: ReadonlyMap<string, ReadonlyMap<string, RunStacks>> = new Map(),
): ViewItem[] {
  const items = settingsErrors.map((e, i) => messageItem(`settings/${i}`, `Settings: ${e}`, e, true));
  for (const c of clusters) items.push(clusterItem(c, states.get(c.name) ?? { kind: "loading" }, now, held.get(c.name)));
  return items;
}

/** Total of paused sessions over clusters that answered (the status-bar count). */
export function pausedCount(states: Iterable<ClusterState>): number {
  let n = 0;
  for (const s of states) if (s.kind === "ok") n += s.sessions.length;
  return n;
}
