/**
 * Armed breakpoints (issue 18) as plain data: the gateway's records parsed defensively,
 * the editor's gutter breakpoints turned into the PUT body, and the owner id.
 *
 * No vscode import: the glue hands in SourceBreakpoints already reduced to EditorBreakpoint.
 */
import { createHash } from "node:crypto";
import { remoteBreakpointPath } from "./launchConfig";
import { PathMapping } from "./settings";

/** A breakpoint as `GET /api/v1/breakpoints` lists it. `job` null: armed for every job. */
export interface ArmedBreakpoint {
  id: string;
  file: string;
  line: number;
  job: string | null;
  condition: string | null;
  hit_limit: number;
  owner: string;
  created: number;
  hits: number;
  paused: number;
  /** What went wrong arming it in the workers (e.g. a condition that does not compile), if anything. */
  error: string | null;
}

/** A gutter breakpoint, as the glue reads it from `vscode.debug.breakpoints`. */
export interface EditorBreakpoint {
  /** Local file system path. */
  file: string;
  /** 1-based. */
  line: number;
  enabled: boolean;
  condition?: string;
  hitCondition?: string;
  logMessage?: string;
}

/** One entry of the PUT body. */
export interface BreakpointSpec {
  file: string;
  line: number;
  condition?: string;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const int = (v: unknown, dflt: number) => (typeof v === "number" && Number.isInteger(v) ? v : dflt);

/** One record, or why it cannot be used. */
export function parseBreakpoint(raw: unknown): ArmedBreakpoint | string {
  if (!isObj(raw)) return "breakpoint record is not an object";
  if (typeof raw.id !== "string" || !raw.id) return "breakpoint record has no id";
  if (typeof raw.file !== "string" || !Number.isInteger(raw.line)) return `breakpoint ${raw.id} has no file:line`;
  return {
    id: raw.id,
    file: raw.file,
    line: raw.line as number,
    job: typeof raw.job === "string" && raw.job ? raw.job : null,
    condition: typeof raw.condition === "string" && raw.condition ? raw.condition : null,
    hit_limit: int(raw.hit_limit, 0),
    owner: typeof raw.owner === "string" ? raw.owner : "",
    created: typeof raw.created === "number" ? raw.created : 0,
    hits: int(raw.hits, 0),
    paused: int(raw.paused, 0),
    error: typeof raw.error === "string" && raw.error ? raw.error : null,
  };
}

/** `{"breakpoints": [...]}` -> the usable records (bad ones dropped), or a message when the body is not that. */
export function parseBreakpointList(payload: unknown): ArmedBreakpoint[] | string {
  if (!isObj(payload) || !Array.isArray(payload.breakpoints)) return "gateway sent no list of breakpoints (is it older than raydbg's breakpoints?)";
  const out: ArmedBreakpoint[] = [];
  for (const raw of payload.breakpoints) {
    const bp = parseBreakpoint(raw);
    if (typeof bp !== "string") out.push(bp);
  }
  return out;
}

/**
 * The PUT body for the editor's breakpoints: enabled ones only, logpoints left out (they
 * never pause), paths mapped as the attach maps them, duplicates once. VS Code's hit
 * counts are not sent: raydbg's hit limit (pauses at once) is another thing.
 */
export function specsFor(bps: readonly EditorBreakpoint[], mappings: readonly PathMapping[], workspaceFolder: string | null): BreakpointSpec[] {
  const seen = new Set<string>();
  const out: BreakpointSpec[] = [];
  for (const b of bps) {
    if (!b.enabled || b.logMessage || !Number.isInteger(b.line) || b.line < 1) continue;
    const spec: BreakpointSpec = { file: remoteBreakpointPath(b.file, mappings, workspaceFolder), line: b.line };
    const cond = b.condition?.trim();
    if (cond) spec.condition = cond;
    const key = JSON.stringify(spec);
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(spec);
  }
  return out;
}

/** `vscode-<12 hex>`: one owner per machine and workspace, the same after a reload (so a PUT replaces). */
export function ownerFor(machineId: string, workspaceKey: string): string {
  return `vscode-${createHash("sha256").update(`${machineId}\n${workspaceKey}`).digest("hex").slice(0, 12)}`;
}

/** A target of arming: a cluster and a job (null: every job). */
export interface ArmTarget {
  cluster: string;
  job: string | null;
}

export const targetKey = (t: ArmTarget): string => JSON.stringify([t.cluster, t.job]);

export function jobLabel(job: string | null): string {
  return job === null ? "every job" : `job ${job}`;
}
