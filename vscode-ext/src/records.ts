/**
 * Session records as the gateway sends them (docs/records.md), parsed defensively.
 *
 * The gateway is another process on another machine, possibly another raydbg version:
 * anything it sends is checked field by field and a bad record becomes an error value,
 * never an exception that would blank the whole view.
 */

import { isObj, num, str } from "./fields";
import type { ExceptionInfo, SessionRecord as SessionWire, SnapshotFrame } from "./records.generated";

export type { ExceptionInfo, SnapshotFrame };

/** Fields a record from another gateway version may lack: null here, shown as "?". */
type Lenient = "pid" | "thread_id" | "thread_name" | "line" | "function" | "since" | "cwd";

/**
 * A session as the extension holds it: the generated wire type (raydbg/schema.py), with the
 * lenient fields nullable and `state` open to a newer gateway's states.
 */
export type SessionRecord = Omit<SessionWire, Lenient | "state"> & { [K in Lenient]: SessionWire[K] | null } & {
  state: string;
};

/** A record that could not be used, with what was wrong (shown as an error item). */
export interface BadRecord {
  index: number;
  error: string;
}

export interface ParsedSessions {
  sessions: SessionRecord[];
  bad: BadRecord[];
}

function parseException(v: unknown): ExceptionInfo | null {
  if (!isObj(v)) return null;
  return {
    type: str(v, "type") ?? "Exception",
    message: str(v, "message") ?? "",
    traceback: str(v, "traceback") ?? "",
  };
}

function parseFrames(v: unknown): SnapshotFrame[] | null {
  if (!Array.isArray(v)) return null;
  const out: SnapshotFrame[] = [];
  for (const f of v) {
    if (!isObj(f)) continue;
    const locals: Record<string, string> = {};
    if (isObj(f.locals)) for (const [k, x] of Object.entries(f.locals)) locals[k] = typeof x === "string" ? x : JSON.stringify(x) ?? String(x);
    out.push({ function: str(f, "function") ?? "?", file: str(f, "file") ?? "?", line: num(f, "line"), locals });
  }
  return out;
}

/** One record; `id` is the only field without which nothing can be done. */
export function parseSessionRecord(raw: unknown): SessionRecord | string {
  if (!isObj(raw)) return `expected an object, got ${describe(raw)}`;
  const id = str(raw, "id");
  if (!id) return "record has no session id";
  const state = str(raw, "state") ?? "waiting";
  const attachable = typeof raw.attachable === "boolean" ? raw.attachable : state !== "starting" && state !== "snapshot";
  return {
    id,
    job_id: str(raw, "job_id") ?? "unknown",
    task_id: str(raw, "task_id"),
    task_name: str(raw, "task_name"),
    actor_id: str(raw, "actor_id"),
    actor_name: str(raw, "actor_name"),
    train_run: str(raw, "train_run") || null,
    train_rank: num(raw, "train_rank"),
    train_local_rank: num(raw, "train_local_rank"),
    train_world_size: num(raw, "train_world_size"),
    group: str(raw, "group") || null,
    node_id: str(raw, "node_id") ?? "",
    node_ip: str(raw, "node_ip") ?? "",
    pid: num(raw, "pid"),
    thread_id: num(raw, "thread_id"),
    thread_name: str(raw, "thread_name"),
    file: str(raw, "file") ?? "",
    line: num(raw, "line"),
    function: str(raw, "function"),
    reason: str(raw, "reason") ?? "breakpoint",
    exception: parseException(raw.exception),
    since: num(raw, "since"),
    state,
    attachable,
    cwd: str(raw, "cwd"),
    breakpoint_id: str(raw, "breakpoint_id") || null,
    frames: parseFrames(raw.frames),
  };
}

/** The `GET /api/v1/sessions` body (already JSON-decoded) or a string to decode. */
export function parseSessionList(payload: unknown): ParsedSessions | string {
  let value = payload;
  if (typeof payload === "string") {
    try {
      value = JSON.parse(payload) as unknown;
    } catch (e) {
      return `gateway sent invalid JSON (${(e as Error).message})`;
    }
  }
  if (!Array.isArray(value)) return `gateway sent ${describe(value)} where a list of sessions was expected`;
  const out: ParsedSessions = { sessions: [], bad: [] };
  value.forEach((raw, index) => {
    const rec = parseSessionRecord(raw);
    if (typeof rec === "string") out.bad.push({ index, error: rec });
    else out.sessions.push(rec);
  });
  return out;
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "a list";
  return typeof v === "object" ? "an object" : `a ${typeof v}`;
}

/** Sessions in `current` whose id was not in `seen` (drives "a task paused" notifications). */
export function newSessions(seen: ReadonlySet<string>, current: readonly SessionRecord[]): SessionRecord[] {
  return current.filter((s) => !seen.has(s.id));
}

/** Short human name: task or actor method, with the Train rank when there is one. */
export function sessionName(s: SessionRecord): string {
  // `||`: a Train worker's snapshot record can carry an empty task name (seen on a real cluster).
  const base = s.task_name || (s.actor_name ? `${s.actor_name}.${s.function ?? "?"}` : null) || s.function || s.id;
  return s.train_rank !== null ? `${base} [rank ${s.train_rank}]` : base;
}
