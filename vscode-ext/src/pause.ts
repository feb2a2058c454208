/**
 * `Pause and attach` on a rank, without vscode: the gateway's answer to
 * `POST /api/v1/pause` parsed, a snapshot written out, the command's flow, and the
 * pauses still waiting to attach (a thread blocked in C, a debugger still starting).
 *
 * The gateway answers `{"target", "node_id", "pid", "train_run", "world_rank", "thread",
 * "session": record | null}` (raydbg/gang/pause_service.py); `session` is null when the
 * worker's session was not listed within `wait_s`, state "snapshot" for a thread blocked
 * in C (frames with locals; it becomes a session under the same id once back in Python).
 */
import { int, isObj, str } from "./fields";
import { GatewayError } from "./gatewayClient";
import { parseSessionRecord, SessionRecord } from "./records";
import type { PauseAnswer as PauseAnswerWire } from "./records.generated";
import { PauseTarget } from "./viewItems";

/** The generated answer (raydbg/schema.py), parsed leniently: node and pid may be missing, the session parsed. */
export type PauseAnswer = Omit<PauseAnswerWire, "node_id" | "pid" | "session"> & {
  node_id: string | null;
  pid: number | null;
  session: SessionRecord | null;
};

/** The answer, or a one-line message when it is not a pause answer. */
export function parsePauseAnswer(body: unknown, target: string): PauseAnswer | string {
  if (!isObj(body)) return `the gateway's answer to pause ${target} is not an object`;
  let session: SessionRecord | null = null;
  if (body.session !== null && body.session !== undefined) {
    const rec = parseSessionRecord(body.session);
    if (typeof rec === "string") return `the gateway's answer to pause ${target} has an unreadable session: ${rec}`;
    session = rec;
  }
  return {
    target: str(body, "target") ?? target,
    node_id: str(body, "node_id"),
    pid: int(body, "pid"),
    train_run: str(body, "train_run"),
    world_rank: int(body, "world_rank"),
    thread: str(body, "thread"),
    session,
  };
}

/** What `raydbg pause` is told for a rank: `RUN:RANK`. */
export function targetText(t: Pick<PauseTarget, "run" | "rank">): string {
  return `${t.run}:${t.rank}`;
}

/** The gateway's own one line when it sent one (bad target, another user's worker, ...), else ours. */
export function pauseError(target: string, e: unknown): string {
  const own = e instanceof GatewayError && e.status !== 401 ? e.detail : undefined;
  return `Ray: pause ${target}: ${own ?? (e instanceof Error ? e.message : String(e))}`;
}

/** A snapshot as a read-only document: what it is, then its frames innermost first with their locals. */
export function snapshotText(rec: SessionRecord): string {
  const rank = rec.train_rank !== null ? ` of rank ${rec.train_rank}${rec.train_run ? ` (run ${rec.train_run})` : ""}` : "";
  const lines = [
    `# snapshot ${rec.id}: thread ${rec.thread_name ?? rec.thread_id ?? "?"}${rank} is blocked in C`,
    `# ${rec.task_name || rec.actor_name ? `${rec.task_name || rec.actor_name} · ` : ""}pid ${rec.pid ?? "?"} on node ${rec.node_ip || "?"} (${rec.node_id ? rec.node_id.slice(0, 12) : "?"}) · job ${rec.job_id}`,
    "# It becomes a debug session under the same id once the thread returns to Python:",
    "# Pause and attach attaches then; or Attach it from the Ray view.",
    "# Frames, innermost first; locals are safe reprs the worker took.",
    "",
  ];
  const frames = rec.frames ?? [];
  if (frames.length === 0) lines.push("(the worker sent no frames)");
  for (const f of frames) {
    lines.push(`${f.function}  ${f.file}:${f.line ?? "?"}`);
    for (const [name, value] of Object.entries(f.locals)) lines.push(`    ${name} = ${value.replace(/\n/g, "\n      ")}`);
  }
  return `${lines.join("\n")}\n`;
}

/** A pause that attaches once its session is attachable. */
export interface Pending {
  cluster: string;
  /** The session's id; null while the gateway has not listed it (found by node, pid and time). */
  id: string | null;
  node_id: string | null;
  pid: number | null;
  /** When it was asked (epoch seconds): a listed pause session of that pid from then on is it. */
  since: number;
  seen: boolean;
  addedMs: number;
  label: string;
}

/** How long a pause never listed is waited for (the gateway waited `wait_s` already). */
export const UNLISTED_MS = 60_000;
/** Worker clocks may differ from this one by this much. */
const CLOCK_SKEW_S = 5;

export class PendingAttaches {
  private items: Pending[] = [];
  /** Pauses asked and not answered yet: the gateway lists their session before it answers. */
  private asking: PauseTarget[] = [];

  /** Is this newly listed session one this window paused (no "paused" notification for it)? */
  ours(cluster: string, rec: SessionRecord): boolean {
    if (this.has(cluster, rec.id)) return true;
    return rec.reason === "pause" && this.asking.some((t) => t.cluster === cluster && t.run === rec.train_run && t.rank === rec.train_rank);
  }

  add(p: Omit<Pending, "seen" | "addedMs">, nowMs = Date.now()): void {
    this.items = this.items.filter((x) => !(x.cluster === p.cluster && p.id !== null && x.id === p.id));
    this.items.push({ ...p, seen: false, addedMs: nowMs });
  }

  get size(): number {
    return this.items.length;
  }

  /** A pause of `t` was sent (true) or answered (false). */
  asked(t: PauseTarget, inflight: boolean): void {
    if (inflight) this.asking.push(t);
    else this.asking = this.asking.filter((x) => x !== t);
  }

  has(cluster: string, id: string): boolean {
    return this.items.some((p) => p.cluster === cluster && p.id === id);
  }

  /**
   * A cluster's session list: the pending sessions now attachable (no longer pending), and
   * those that went away (a snapshot continued or dropped) or were never listed in time.
   */
  update(cluster: string, sessions: readonly SessionRecord[], nowMs = Date.now()): { attach: SessionRecord[]; gone: Pending[] } {
    const attach: SessionRecord[] = [];
    const gone: Pending[] = [];
    const keep: Pending[] = [];
    for (const p of this.items) {
      if (p.cluster !== cluster) {
        keep.push(p);
        continue;
      }
      const rec = sessions.find((s) => (p.id !== null ? s.id === p.id : s.reason === "pause" && s.pid === p.pid && s.node_id === p.node_id && (s.since ?? 0) >= p.since - CLOCK_SKEW_S));
      if (rec) {
        p.id = rec.id;
        p.seen = true;
        if (rec.attachable) attach.push(rec);
        else keep.push(p);
      } else if (p.seen || nowMs - p.addedMs > UNLISTED_MS) gone.push(p);
      else keep.push(p);
    }
    this.items = keep;
    return { attach, gone };
  }

  /** Forget the pauses of clusters no longer configured. */
  keepClusters(names: readonly string[]): void {
    this.items = this.items.filter((p) => names.includes(p.cluster));
  }
}

export interface PauseDeps {
  /** POST /api/v1/pause through the cluster's client; rejects with a GatewayError. */
  pause(target: string, job: string | null): Promise<unknown>;
  /** The Attach command's path for a listed session. */
  attach(session: SessionRecord): Promise<boolean>;
  showSnapshot(session: SessionRecord): Promise<void> | void;
  info(text: string): void;
  error(text: string): void;
  pending: PendingAttaches;
  nowMs?(): number;
}

export type PauseOutcome = "attached" | "snapshot" | "waiting" | "failed";

/** Pause the rank `t` names and attach to it, or show its snapshot and attach once it is back in Python. */
export async function pauseAndAttach(deps: PauseDeps, t: PauseTarget): Promise<PauseOutcome> {
  const target = targetText(t);
  const nowMs = deps.nowMs?.() ?? Date.now();
  const asked = nowMs / 1000;
  let body: unknown;
  deps.pending.asked(t, true);
  try {
    body = await deps.pause(target, t.job);
  } catch (e) {
    deps.error(pauseError(target, e));
    return "failed";
  } finally {
    deps.pending.asked(t, false);
  }
  const answer = parsePauseAnswer(body, target);
  if (typeof answer === "string") {
    deps.error(`Ray: ${answer}`);
    return "failed";
  }
  const who = `rank ${t.rank} of run ${t.run}`;
  const rec = answer.session;
  const pending = { cluster: t.cluster, node_id: answer.node_id, pid: answer.pid, since: asked, label: who };
  if (rec === null) {
    deps.pending.add({ ...pending, id: null }, nowMs);
    deps.info(`Ray: ${who} (pid ${answer.pid ?? "?"}) was asked to pause${answer.thread ? ` in thread ${answer.thread}` : ""}; its session is not listed yet: it attaches when it is.`);
    return "waiting";
  }
  if (rec.attachable) return (await deps.attach(rec)) ? "attached" : "failed";
  deps.pending.add({ ...pending, id: rec.id }, nowMs);
  if (rec.state === "snapshot") {
    await deps.showSnapshot(rec);
    deps.info(`Ray: ${who} is blocked in C (snapshot ${rec.id}): its frames are shown; it attaches when the thread returns to Python.`);
    return "snapshot";
  }
  deps.info(`Ray: ${who} paused (session ${rec.id}); it attaches once its debugger is ready.`);
  return "waiting";
}
