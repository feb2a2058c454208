/**
 * The Ray view's items as plain data and the ones every part of the tree shares: a
 * paused session's line, its tooltip, message lines.
 *
 * view.ts only turns ViewItems into vscode.TreeItems, so everything a user reads
 * (labels, descriptions, tooltips, error items) is decided and tested in plain modules.
 */
import { SessionRecord, sessionName } from "./records";
import { RunRef } from "./runStacks";

/** A rank `Pause and attach` can stop: `RUN:RANK` of a job (null: the gateway finds it). */
export interface PauseTarget {
  cluster: string;
  job: string | null;
  run: string;
  rank: number;
}

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
  /** Shown collapsed at first (a running Train run: its ranks are asked for on expand). */
  collapsed?: boolean;
  session?: SessionRecord;
  cluster?: string;
  /** Set on a Train run's node (expanding it asks for its ranks' stacks). */
  run?: RunRef;
  /** Set on a rank that is not paused (Pause and attach acts on it). */
  pauseTarget?: PauseTarget;
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
  /** A rank of a Train run with nothing paused. */
  running: "raydbg.rank.running",
  attachable: "raydbg.session.attachable",
  starting: "raydbg.session.starting",
  /** A thread `raydbg pause` found blocked in C: frames and locals, attachable later. */
  snapshot: "raydbg.session.snapshot",
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
  const state = s.state === "waiting" ? "" : s.state === "snapshot" ? " (blocked in C: snapshot)" : ` (${s.state})`;
  return `${where} · ${reasonText(s)}${state}`;
}

function pausedOn(s: SessionRecord): string {
  if (s.state === "snapshot") return "blocked in C: a snapshot of its frames, attachable once it returns to Python";
  if (s.reason === "exception") return "paused on an exception";
  return s.reason === "pause" ? "paused by raydbg pause" : "paused on a breakpoint";
}

export function sessionTooltip(s: SessionRecord, now: number = Date.now()): string {
  const lines = [`${sessionName(s)} — ${pausedOn(s)}`];
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

export function ago(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function sessionContext(s: SessionRecord): string {
  if (s.state === "snapshot") return CTX.snapshot;
  return s.attachable ? CTX.attachable : CTX.starting;
}

export function sessionItem(cluster: string, s: SessionRecord, now: number, label: string = sessionName(s)): ViewItem {
  let icon = s.reason === "exception" ? "error" : s.breakpoint_id ? "debug-breakpoint" : "debug-pause";
  if (s.state === "snapshot") icon = "eye";
  else if (!s.attachable) icon = "loading~spin";
  return {
    id: `${cluster}/session/${s.id}`,
    label,
    description: sessionDescription(s),
    tooltip: sessionTooltip(s, now),
    contextValue: sessionContext(s),
    icon,
    session: s,
    cluster,
  };
}

// Train workers read best in rank order; otherwise newest first, as the gateway sends.
export function bySessionOrder(a: SessionRecord, b: SessionRecord): number {
  if (a.train_rank !== null && b.train_rank !== null && a.train_rank !== b.train_rank) return a.train_rank - b.train_rank;
  return (b.since ?? 0) - (a.since ?? 0);
}

export function messageItem(id: string, label: string, tooltip: string, error: boolean, cluster?: string): ViewItem {
  return { id, label, tooltip, contextValue: error ? CTX.error : CTX.info, icon: error ? "warning" : "info", cluster };
}
