/**
 * Train runs' recent step times from the gateway's `GET /api/v1/steps`, parsed defensively.
 *
 * The body is `{"runs": [{"job_id", "train_run", "factor", "steps", "stragglers",
 * "ranks": [{"world_rank", "node_id", "pid", "step", "busy_s", "wait_s", "busy_median_s",
 * "wait_median_s", "last_progress_s", "straggler"}]}], "errors": [...]}` (raydbg/gang/
 * stragglers.steps_view). It lists the live ranks of every run that beats, paused or not,
 * so it is also how the view finds Train runs with nothing paused.
 */
import { int, isObj, num, str } from "./fields";
import type { StepsRank, StepsRun } from "./records.generated";
import { runKey } from "./runStacks";

/** A StepsRank (the generated wire type) as the view holds it: what it shows. */
export interface RankSteps
  extends Pick<StepsRank, "world_rank" | "node_id" | "pid" | "step" | "busy_median_s" | "wait_median_s" | "straggler"> {
  last_progress_s: number | null;
}

/** A StepsRun (the generated wire type) as the view holds it. */
export interface RunSteps extends Pick<StepsRun, "job_id" | "stragglers"> {
  run: string;
  /** How many times the others' median a straggler's work is (the gateway's setting). */
  factor: number | null;
  ranks: RankSteps[];
}

function parseRank(k: unknown): RankSteps | null {
  if (!isObj(k)) return null;
  const rank = int(k, "world_rank");
  if (rank === null) return null;
  return {
    world_rank: rank,
    node_id: str(k, "node_id"),
    pid: int(k, "pid"),
    step: int(k, "step"),
    busy_median_s: num(k, "busy_median_s"),
    wait_median_s: num(k, "wait_median_s"),
    last_progress_s: num(k, "last_progress_s"),
    straggler: k.straggler === true,
  };
}

/** Every run of a steps body, by runKey; a message when the body is not a steps answer. */
export function parseSteps(payload: unknown): Map<string, RunSteps> | string {
  if (!isObj(payload) || !Array.isArray(payload.runs)) return "gateway sent no list of runs for steps";
  const out = new Map<string, RunSteps>();
  for (const r of payload.runs) {
    if (!isObj(r)) continue;
    const run = str(r, "train_run");
    if (!run) continue;
    const job = str(r, "job_id") || "unknown";
    const ranks = (Array.isArray(r.ranks) ? r.ranks : []).map(parseRank).filter((x): x is RankSteps => x !== null);
    ranks.sort((a, b) => a.world_rank - b.world_rank);
    const stragglers = Array.isArray(r.stragglers) ? r.stragglers.filter((x): x is number => Number.isInteger(x)) : [];
    out.set(runKey(job, run), { job_id: job, run, factor: num(r, "factor"), stragglers, ranks });
  }
  return out;
}

/** Seconds for a step time column: 3 decimals, as the TUI's gang view shows them. */
export function seconds(v: number | null): string {
  return v === null ? "-" : `${v.toFixed(3)} s`;
}
