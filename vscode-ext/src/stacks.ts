/**
 * One Train run's ranks from the gateway's `GET /api/v1/stacks?run=NAME`, parsed defensively.
 *
 * The body is `{"runs": [RunSummary], "classes": [StackClass], ...}` (raydbg/gang):
 * a RunSummary lists each rank's state (paused | held | running) and stack class id,
 * `held_by` the paused ranks; a StackClass has the one-line `summary` shown in the tree.
 */
import { int, isObj, num, str } from "./fields";
import type { RunRank, RunSummary } from "./records.generated";

/** A RunSummary's rank (the generated wire type), with its class's summary and collective said. */
export interface RankStacks extends Pick<RunRank, "world_rank" | "local_rank" | "node_id" | "pid" | "state" | "last_progress_s"> {
  /** The rank's stack class, one line (e.g. `all_reduce <- train_step train.py:104`). */
  summary: string | null;
  /** Its stack is in a collective (the run's `waiting`), whatever Flight Recorder says. */
  waiting: boolean;
  /** From Flight Recorder: `in all_reduce #12`, `after broadcast #3 (pg1)`; null without it. */
  collective: string | null;
}

/** A RunSummary (the generated wire type) as the view holds it. */
export interface RunStacks extends Pick<RunSummary, "run" | "world_size" | "held_by" | "culprits" | "chain"> {
  job_id: string | null;
  /** Cycles of ranks waiting on each other (deadlocks: each Deadlock's `ranks`), each from its lowest rank. */
  deadlocks: number[][];
  ranks: RankStacks[];
}

const ints = (v: unknown): number[] => (Array.isArray(v) ? v.filter((x): x is number => Number.isInteger(x)) : []);

/**
 * A rank's last collective per process group, as the TUI's gang view says it
 * (raydbg/tui/gang_view._in_collective): `in OP #SEQ` while started and not completed,
 * else `after OP #SEQ`; the group by its label (`group [2,3]`) unless it is the world group;
 * a group with send/recv only (no collective) left out. Null: no Flight Recorder.
 */
export function collectiveText(groups: unknown): string | null {
  if (!isObj(groups)) return null;
  const parts: string[] = [];
  for (const name of Object.keys(groups).sort()) {
    const g = groups[name];
    if (!isObj(g)) continue;
    const started = isObj(g.started) ? g.started : {};
    const done = isObj(g.completed) ? g.completed : {};
    const seq = typeof started.seq === "number" ? started.seq : null;
    if (seq === 0) continue;
    const inside = seq !== null && seq !== (typeof done.seq === "number" ? done.seq : null);
    const op = typeof started.op === "string" ? started.op : "?";
    const label = typeof g.label === "string" && g.label ? g.label : name;
    const world = label === "world" || label === "default_pg";
    parts.push(`${inside ? "in" : "after"} ${op} #${seq ?? "?"}${world ? "" : ` (${label})`}`);
  }
  return parts.join(", ") || "none yet";
}

const lists = (v: unknown): number[][] => (Array.isArray(v) ? v.map((d) => ints(isObj(d) ? d.ranks : null)).filter((d) => d.length > 0) : []);
const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);

/**
 * The run named `run` (of job `job` when the gateway says which job) from a stacks body;
 * null when the body does not have it, a message when the body is not a stacks answer.
 */
export function parseRunStacks(payload: unknown, run: string, job: string | null): RunStacks | null | string {
  if (!isObj(payload) || !Array.isArray(payload.runs)) return "gateway sent no list of runs for stacks";
  const summaries = new Map<string, string>();
  if (Array.isArray(payload.classes)) {
    for (const c of payload.classes) {
      if (isObj(c) && typeof c.id === "string" && typeof c.summary === "string") summaries.set(c.id, c.summary);
    }
  }
  for (const r of payload.runs) {
    if (!isObj(r) || str(r, "run") !== run) continue;
    const jobId = str(r, "job_id") || null;
    if (job !== null && jobId !== null && jobId !== job) continue;
    const waiting = new Set(ints(r.waiting));
    const ranks: RankStacks[] = [];
    for (const k of Array.isArray(r.ranks) ? r.ranks : []) {
      if (!isObj(k)) continue;
      const rank = int(k, "world_rank");
      if (rank === null) continue;
      const cls = str(k, "class_id");
      ranks.push({
        world_rank: rank,
        local_rank: int(k, "local_rank"),
        node_id: str(k, "node_id"),
        pid: int(k, "pid"),
        state: str(k, "state") ?? "running",
        summary: cls !== null ? (summaries.get(cls) ?? null) : null,
        last_progress_s: num(k, "last_progress_s"),
        waiting: waiting.has(rank),
        collective: collectiveText(k.collectives),
      });
    }
    return {
      run, job_id: jobId, world_size: int(r, "world_size"), held_by: ints(r.held_by), culprits: ints(r.culprits),
      deadlocks: lists(r.deadlocks), chain: strings(r.chain), ranks,
    };
  }
  return null;
}
