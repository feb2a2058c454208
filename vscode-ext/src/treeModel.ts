/**
 * The Ray view's content as plain data: clusters -> jobs -> paused sessions.
 *
 * view.ts only turns these items into vscode.TreeItems, so everything a user reads
 * (labels, descriptions, tooltips, error items) is decided and tested here.
 */
import { BadRecord, SessionRecord, sessionName } from "./records";
import { ClusterConfig } from "./settings";

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
}

export const CTX = {
  cluster: "raydbg.cluster",
  clusterError: "raydbg.cluster.error",
  job: "raydbg.job",
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
  return s.reason;
}

export function sessionDescription(s: SessionRecord): string {
  const where = s.file ? `${basename(s.file)}${s.line !== null ? `:${s.line}` : ""}` : "unknown location";
  const state = s.state === "waiting" ? "" : ` (${s.state})`;
  return `${where} · ${reasonText(s)}${state}`;
}

export function sessionTooltip(s: SessionRecord, now: number = Date.now()): string {
  const lines = [`${sessionName(s)} — paused on ${s.reason === "exception" ? "an exception" : "a breakpoint"}`];
  if (s.exception) lines.push(`${s.exception.type}: ${s.exception.message}`);
  lines.push(`at ${s.file || "?"}:${s.line ?? "?"} in ${s.function ?? "?"}`);
  lines.push(`session ${s.id} · job ${s.job_id} · state ${s.state}`);
  if (s.task_id) lines.push(`task ${s.task_id}`);
  if (s.actor_id) lines.push(`actor ${s.actor_name ?? "?"} (${s.actor_id})`);
  if (s.train_rank !== null) lines.push(`Ray Train rank ${s.train_rank}`);
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

function sessionItem(cluster: string, s: SessionRecord, now: number): ViewItem {
  let icon = s.reason === "exception" ? "error" : "debug-pause";
  if (!s.attachable) icon = "loading~spin";
  return {
    id: `${cluster}/session/${s.id}`,
    label: sessionName(s),
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

function messageItem(id: string, label: string, tooltip: string, error: boolean, cluster?: string): ViewItem {
  return { id, label, tooltip, contextValue: error ? CTX.error : CTX.info, icon: error ? "warning" : "info", cluster };
}

function clusterChildren(c: ClusterConfig, state: ClusterState, now: number): ViewItem[] {
  const base = c.name;
  switch (state.kind) {
    case "loading":
      return [messageItem(`${base}/loading`, "Connecting…", `Contacting ${c.address}`, false, base)];
    case "error":
      return [messageItem(`${base}/error`, state.message, state.message, true, base)];
    case "ok": {
      const items: ViewItem[] = [];
      for (const [job, sessions] of groupByJob(state.sessions)) {
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

export function clusterItem(c: ClusterConfig, state: ClusterState, now: number = Date.now()): ViewItem {
  return {
    id: `${c.name}`,
    label: c.name,
    description: clusterDescription(c, state),
    tooltip: `raydbg gateway ${c.address}`,
    contextValue: state.kind === "error" ? CTX.clusterError : CTX.cluster,
    icon: state.kind === "error" ? "debug-disconnect" : "server",
    children: clusterChildren(c, state, now),
    cluster: c.name,
  };
}

/** The whole view: one item per configured cluster, settings problems first. */
export function buildTree(
  clusters: readonly ClusterConfig[],
  states: ReadonlyMap<string, ClusterState>,
  settingsErrors: readonly string[] = [],
  now: number = Date.now(),
): ViewItem[] {
  const items = settingsErrors.map((e, i) => messageItem(`settings/${i}`, `Settings: ${e}`, e, true));
  for (const c of clusters) items.push(clusterItem(c, states.get(c.name) ?? { kind: "loading" }, now));
  return items;
}

/** Total of paused sessions over clusters that answered (the status-bar count). */
export function pausedCount(states: Iterable<ClusterState>): number {
  let n = 0;
  for (const s of states) if (s.kind === "ok") n += s.sessions.length;
  return n;
}
