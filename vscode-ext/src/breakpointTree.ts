/**
 * The Ray view's "Armed breakpoints" node per cluster: a node per job with its
 * breakpoints (hits, paused now out of the hit limit), the jobs this workspace keeps in
 * sync marked, and their sync errors. Plain data, like treeModel.
 */
import { TargetState, ListState } from "./arming";
import { ArmedBreakpoint, ArmTarget, jobLabel, targetKey } from "./breakpoints";
import { ViewItem } from "./treeModel";

export const BP_CTX = {
  root: "raydbg.breakpoints",
  job: "raydbg.breakpoints.job",
  armedJob: "raydbg.breakpoints.job.armed",
  breakpoint: "raydbg.breakpoint",
} as const;

const basename = (p: string) => p.split(/[\\/]/).pop() || p;
const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;

function bpItem(parent: string, b: ArmedBreakpoint, owner: string, cluster: string): ViewItem {
  const limit = b.hit_limit > 0 ? `/${b.hit_limit}` : "";
  const cond = b.condition ? ` · if ${b.condition}` : "";
  const lines = [`${b.file}:${b.line}`, `breakpoint ${b.id} · ${jobLabel(b.job)}`];
  if (b.condition) lines.push(`condition: ${b.condition}`);
  lines.push(`${plural(b.hits, "hit")}; ${b.paused} paused now${b.hit_limit > 0 ? ` (at most ${b.hit_limit} at once; further hits count and go on)` : ""}`);
  lines.push(`armed by ${b.owner === owner ? "this workspace" : b.owner || "?"}`);
  if (b.error) lines.push(`error: ${b.error}`);
  return {
    id: `${parent}/${b.id}`,
    label: `${basename(b.file)}:${b.line}`,
    description: `${b.error ? "⚠ " : ""}hits ${b.hits} · paused ${b.paused}${limit}${cond}`,
    tooltip: lines.join("\n"),
    contextValue: BP_CTX.breakpoint,
    icon: b.error ? "warning" : b.paused > 0 ? "debug-pause" : "debug-breakpoint",
    cluster,
  };
}

function syncText(t: TargetState): string {
  if (t.status === "ok") return `synced from this workspace (${t.armed})`;
  if (t.status === "syncing") return "syncing…";
  return "sync failed";
}

/** The cluster's breakpoints node, or null when there is nothing to show (no list, none armed). */
export function breakpointsNode(cluster: string, list: ListState | undefined, armed: readonly TargetState[], owner: string): ViewItem | null {
  const bps = list?.kind === "ok" ? list.breakpoints : [];
  if (bps.length === 0 && armed.length === 0 && list?.kind !== "error") return null;
  const base = `${cluster}/breakpoints`;
  const byJob = new Map<string, { job: string | null; bps: ArmedBreakpoint[] }>();
  const group = (job: string | null) => {
    const key = targetKey({ cluster, job });
    const g = byJob.get(key) ?? { job, bps: [] };
    byJob.set(key, g);
    return g;
  };
  for (const t of armed) group(t.target.job);
  for (const b of bps) group(b.job).bps.push(b);
  const sync = new Map(armed.map((t) => [targetKey(t.target), t] as const));
  const jobs = [...byJob.entries()].sort(([, a], [, b]) => (a.job === null ? -1 : b.job === null ? 1 : a.job.localeCompare(b.job)));
  const children: ViewItem[] = [];
  for (const [key, g] of jobs) {
    const id = `${base}/job/${g.job ?? "*"}`;
    const t = sync.get(key);
    const hits = g.bps.reduce((n, b) => n + b.hits, 0);
    const paused = g.bps.reduce((n, b) => n + b.paused, 0);
    const counts = `${plural(g.bps.length, "breakpoint")} · ${hits} hits · ${paused} paused`;
    const kids = [...g.bps]
      .sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line)
      .map((b) => bpItem(id, b, owner, cluster));
    if (t?.status === "error") kids.unshift({ id: `${id}/error`, label: t.error ?? "sync failed", tooltip: t.error, contextValue: "raydbg.error", icon: "warning", cluster });
    const target: ArmTarget = { cluster, job: g.job };
    children.push({
      id,
      label: g.job === null ? "Every job" : `Job ${g.job}`,
      description: t ? `${syncText(t)} · ${counts}` : counts,
      tooltip: `${jobLabel(g.job)}: ${counts}${t ? `\nthis workspace's gutter breakpoints are kept armed here (${syncText(t)})${t.error ? `\n${t.error}` : ""}` : ""}`,
      contextValue: t ? BP_CTX.armedJob : BP_CTX.job,
      icon: t ? "sync" : "layers",
      children: kids,
      cluster,
      armTarget: target,
    });
  }
  if (list?.kind === "error") children.push({ id: `${base}/error`, label: `Cannot list breakpoints: ${list.message}`, tooltip: list.message, contextValue: "raydbg.error", icon: "warning", cluster });
  const total = bps.length;
  const paused = bps.reduce((n, b) => n + b.paused, 0);
  return {
    id: base,
    label: "Armed breakpoints",
    description: `${total} armed${paused ? ` · ${paused} paused` : ""}`,
    tooltip: "Breakpoints armed in the cluster's workers (raydbg break add, or Ray: Arm Breakpoints for Job...)",
    contextValue: BP_CTX.root,
    icon: "debug-breakpoint",
    children,
    cluster,
  };
}

/** The view with each answering cluster's breakpoints node appended to it. */
export function withBreakpoints(items: ViewItem[], nodeFor: (cluster: string) => ViewItem | null): ViewItem[] {
  return items.map((item) => {
    if (item.contextValue !== "raydbg.cluster" || item.cluster === undefined) return item;
    const node = nodeFor(item.cluster);
    return node ? { ...item, children: [...(item.children ?? []), node] } : item;
  });
}
