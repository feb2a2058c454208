/**
 * The Ray view's Train run nodes: a run with paused ranks (its sessions, the ranks they
 * hold) and a running one (found by the gateway's steps), each rank that is not paused
 * with its state, the collective it is in, its step times and a straggler mark, and a
 * pauseTarget for `Pause and attach`; first, where ranks wait, who waits for whom (the
 * wait-for chain, one hop a line). Plain data, like treeModel.
 */
import { SessionRecord } from "./records";
import { RunRef, runKey } from "./runStacks";
import { RankStacks, RunStacks } from "./stacks";
import { RankSteps, RunSteps, seconds } from "./steps";
import { ago, bySessionOrder, CTX, messageItem, sessionItem, ViewItem } from "./viewItems";

export interface RunGroup {
  ref: RunRef;
  /** Its paused sessions; none for a run known only from the steps answer. */
  sessions: SessionRecord[];
}

/** Sessions of Train runs by (job, run), plus the runs `steps` lists, in run-name order; the other sessions as they came. */
export function groupByRun(sessions: readonly SessionRecord[], steps: ReadonlyMap<string, RunSteps> = new Map()): { runs: RunGroup[]; rest: SessionRecord[] } {
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
  for (const [key, r] of steps) if (!runs.has(key)) runs.set(key, { ref: { job: r.job_id, run: r.run }, sessions: [] });
  const sorted = [...runs.values()].sort((a, b) => a.ref.run.localeCompare(b.ref.run) || a.ref.job.localeCompare(b.ref.job));
  return { runs: sorted, rest };
}

export function ranksText(ranks: readonly number[]): string {
  return ranks.length === 1 ? `rank ${ranks[0]}` : `ranks ${ranks.join(",")}`;
}

interface RankFacts {
  rank: number;
  stacks?: RankStacks;
  steps?: RankSteps;
  behind: boolean;
}

function stateText(st: RankStacks): string {
  return st.state === "running" && st.waiting ? "in collective" : st.state;
}

/** `running · in all_reduce #12 · work 0.412 s · wait 0.020 s · straggler` (what is known of it). */
export function rankDescription(f: RankFacts, withState = true): string {
  const parts: string[] = [];
  if (withState && f.stacks) parts.push(stateText(f.stacks));
  if (f.stacks?.collective) parts.push(f.stacks.collective);
  const st = f.steps;
  if (st && (st.busy_median_s !== null || st.wait_median_s !== null)) parts.push(`work ${seconds(st.busy_median_s)} · wait ${seconds(st.wait_median_s)}`);
  if (f.behind) parts.push("behind");
  if (st?.straggler) parts.push("straggler");
  return parts.join(" · ");
}

function rankTooltip(f: RankFacts, run: string, factor: number | null): string[] {
  const st = f.stacks;
  const steps = f.steps;
  const lines: string[] = [];
  if (st) lines.push(`state: ${stateText(st)}`);
  if (st?.summary) lines.push(`stack: ${st.summary}`);
  if (st?.collective) lines.push(`collectives (Flight Recorder): ${st.collective}`);
  if (f.behind) lines.push("behind: the other ranks wait for it, and it waits for nobody (the wait-for graph's culprit)");
  if (steps) {
    if (steps.step !== null) lines.push(`step ${steps.step}`);
    lines.push(`median per step: work ${seconds(steps.busy_median_s)}, wait in collectives ${seconds(steps.wait_median_s)}`);
    if (steps.straggler) lines.push(`straggler: works ${factor !== null ? `${factor}x` : "far"} longer than the others' median`);
  }
  const node = st?.node_id ?? steps?.node_id ?? null;
  lines.push(`node ${node ? node.slice(0, 12) : "?"} · pid ${st?.pid ?? steps?.pid ?? "?"}`);
  const last = st?.last_progress_s ?? steps?.last_progress_s ?? null;
  if (last !== null) lines.push(`last step ${ago(last)} ago`);
  lines.push(`Right-click: Pause and attach (raydbg pause ${run}:${f.rank})`);
  return lines;
}

function rankItem(runId: string, cluster: string, ref: RunRef, f: RankFacts, by: readonly number[] | null, factor: number | null): ViewItem {
  const held = by !== null;
  const summary = f.stacks?.summary;
  const local = f.stacks?.local_rank ?? null;
  const head = held
    ? `rank ${f.rank}${local !== null ? ` (local rank ${local})` : ""} waits for ${ranksText(by)}, paused by raydbg`
    : `Ray Train run ${ref.run}, rank ${f.rank}${local !== null ? ` (local rank ${local})` : ""}`;
  return {
    id: `${runId}/${held ? "held" : "rank"}/${f.rank}`,
    label: held ? `rank ${f.rank} — held by ${ranksText(by)}${summary ? `: ${summary}` : ""}` : `rank ${f.rank}`,
    description: rankDescription(f, !held) || undefined,
    tooltip: [head, ...rankTooltip(f, ref.run, factor)].join("\n"),
    contextValue: held ? CTX.held : CTX.running,
    icon: f.steps?.straggler ? "warning" : held ? "watch" : "pulse",
    cluster,
    pauseTarget: { cluster, job: ref.job === "unknown" ? null : ref.job, run: ref.run, rank: f.rank },
  };
}

/**
 * The run's wait-for chain as one node, one child a hop ("ranks 0,1 wait in all_reduce #5
 * (world) for 2,3"), the culprits' place last; none when nobody waits.
 */
export function waitsItem(runId: string, cluster: string, stacks: RunStacks | undefined): ViewItem | null {
  const chain = stacks?.chain ?? [];
  if (chain.length === 0) return null;
  const deadlocks = stacks?.deadlocks ?? [];
  const culprits = stacks?.culprits ?? [];
  const verdict = deadlocks.length > 0
    ? `deadlock: ${deadlocks.map((d) => [...d, d[0]].join(" → ")).join("; ")}`
    : culprits.length > 0 ? `culprit${culprits.length === 1 ? "" : "s"}: ${ranksText(culprits)}` : "";
  return {
    id: `${runId}/waits`,
    label: "who waits for whom",
    description: verdict || undefined,
    tooltip: ["Who waits for whom (Flight Recorder, process groups, send/recv), one hop a line:", ...chain].join("\n"),
    contextValue: CTX.info,
    icon: deadlocks.length > 0 ? "warning" : "type-hierarchy",
    children: chain.map((line, i) => ({
      id: `${runId}/waits/${i}`,
      label: line,
      tooltip: line,
      contextValue: CTX.info,
      icon: line.startsWith("deadlock") ? "warning" : i >= chain.length - culprits.length ? "debug-stackframe" : "arrow-right",
      cluster,
    })),
    cluster,
  };
}

/** Every rank stacks or steps know of, with what each says. */
function rankFacts(stacks: RunStacks | undefined, steps: RunSteps | undefined): Map<number, RankFacts> {
  const out = new Map<number, RankFacts>();
  const behind = new Set(stacks?.culprits ?? []);
  const at = (rank: number) => {
    const f = out.get(rank) ?? { rank, behind: behind.has(rank) };
    out.set(rank, f);
    return f;
  };
  for (const r of stacks?.ranks ?? []) at(r.world_rank).stacks = r;
  for (const r of steps?.ranks ?? []) at(r.world_rank).steps = r;
  return out;
}

/** A run node: its paused ranks (one item per rank), and every other rank stacks or steps report. */
export function runItem(cluster: string, g: RunGroup, stacks: RunStacks | undefined, steps: RunSteps | undefined, now: number): ViewItem {
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
  const by = stacks && stacks.held_by.length > 0 ? [...stacks.held_by].sort((a, b) => a - b) : paused;
  for (const f of rankFacts(stacks, steps).values()) {
    if (byRank.has(f.rank)) continue;
    const held = f.stacks?.state === "held" && by.length > 0;
    ranked.push([f.rank, rankItem(runId, cluster, g.ref, f, held ? by : null, steps?.factor ?? null)]);
  }
  ranked.sort((a, b) => a[0] - b[0]);
  const waits = waitsItem(runId, cluster, stacks);
  const children = [...(waits ? [waits] : []), ...ranked.map(([, item]) => item), ...unranked.map((s) => sessionItem(cluster, s, now))];
  const stragglers = steps?.stragglers ?? [];
  const slow = (stragglers.length > 0 ? ` · straggler${stragglers.length === 1 ? "" : "s"}: ${ranksText(stragglers)}` : "")
    + (waits?.description ? ` · ${waits.description}` : "");
  if (g.sessions.length === 0) return runningRunItem(runId, cluster, g.ref, children, stacks, slow);
  const sizes = g.sessions.map((s) => s.train_world_size).filter((n): n is number => n !== null);
  const world = sizes.length > 0 ? Math.max(...sizes) : (stacks?.world_size ?? null);
  const k = paused.length;
  const counted = world !== null ? `${k}/${world} ranks paused` : `${k} rank${k === 1 ? "" : "s"} paused`;
  const together = g.sessions.some((s) => s.group !== null) ? " · paused together" : "";
  return {
    id: runId,
    label: `run ${g.ref.run} (${counted})`,
    description: `job ${g.ref.job}${together}${slow}`,
    tooltip: `Ray Train run ${g.ref.run} of job ${g.ref.job}: ${ranksText(paused)} paused${world !== null ? ` of ${world}` : ""}`,
    contextValue: CTX.run,
    icon: "organization",
    children,
    cluster,
    run: g.ref,
  };
}

/** A run with nothing paused: collapsed; expanding it asks for its ranks' stacks. */
function runningRunItem(runId: string, cluster: string, ref: RunRef, children: ViewItem[], stacks: RunStacks | undefined, slow: string): ViewItem {
  const n = children.filter((c) => !c.id.endsWith("/waits")).length;
  const world = stacks?.world_size ?? n;
  return {
    id: runId,
    label: `run ${ref.run} (running, ${world} rank${world === 1 ? "" : "s"})`,
    description: `job ${ref.job}${slow}`,
    tooltip: `Ray Train run ${ref.run} of job ${ref.job}: nothing paused.\nExpand it for each rank's state, collective and step times; right-click a rank to Pause and attach.`,
    contextValue: CTX.run,
    icon: "organization",
    children: n > 0 ? children : [messageItem(`${runId}/none`, "No ranks reported yet", "The gateway's steps and stacks name no rank of this run yet.", false, cluster)],
    collapsed: true,
    cluster,
    run: ref,
  };
}
