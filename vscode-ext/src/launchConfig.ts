/**
 * debugpy attach configurations for a paused Ray session.
 *
 * The debuggee's files live under the worker's cwd on a remote node; pathMappings tell
 * debugpy which local file is which, so breakpoints and the editor line up.
 */
import { SessionRecord, sessionName } from "./records";
import { PathMapping } from "./settings";

export interface AttachConfig {
  type: "debugpy";
  request: "attach";
  name: string;
  connect: { host: string; port: number };
  pathMappings: PathMapping[];
  justMyCode: false;
  /** Lets the glue find the forwarder to stop when this debug session ends. */
  raydbgSessionId: string;
  raydbgCluster?: string;
}

export const WORKSPACE_VAR = "${workspaceFolder}";
export const SESSION_CWD_VAR = "${sessionCwd}";

/**
 * Mappings for one session: the configured ones with `${sessionCwd}` (and, when the
 * folder is known, `${workspaceFolder}`) filled in, else workspace <-> session cwd.
 * `workspaceFolder`: a path; undefined keeps the variable for VS Code to resolve (launch.json);
 * null means no folder is open, so mappings that need one are dropped (VS Code would refuse them).
 */
export function resolvePathMappings(session: Pick<SessionRecord, "cwd">, configured: readonly PathMapping[], workspaceFolder?: string | null): PathMapping[] {
  const local = (p: string) => (typeof workspaceFolder === "string" ? p.split(WORKSPACE_VAR).join(workspaceFolder) : p);
  const wanted = configured.length > 0 ? configured : [{ localRoot: WORKSPACE_VAR, remoteRoot: SESSION_CWD_VAR }];
  const out: PathMapping[] = [];
  for (const m of wanted) {
    if (workspaceFolder === null && m.localRoot.includes(WORKSPACE_VAR)) continue;
    if (m.remoteRoot.includes(SESSION_CWD_VAR)) {
      // A worker that did not report its cwd cannot be mapped by it; skip rather than send a literal.
      if (!session.cwd) continue;
      out.push({ localRoot: local(m.localRoot), remoteRoot: m.remoteRoot.split(SESSION_CWD_VAR).join(session.cwd) });
    } else out.push({ localRoot: local(m.localRoot), remoteRoot: m.remoteRoot });
  }
  return out;
}

const posix = (p: string) => p.replace(/\\/g, "/").replace(/\/+$/, "");

/**
 * Where a local file is on the workers, for an armed breakpoint: the attach's mappings
 * (resolvePathMappings, so both agree), the longest matching localRoot winning. A mapping
 * to `${sessionCwd}` gives a path relative to the worker's cwd, which each worker resolves
 * against its own (workers of one job may run in different directories); a file no
 * mapping covers is sent as it is (a cluster on this machine runs the same files).
 */
export function remoteBreakpointPath(localPath: string, configured: readonly PathMapping[], workspaceFolder: string | null): string {
  // A cwd that is the variable itself keeps `${sessionCwd}` in remoteRoot, to be cut off below.
  const mappings = resolvePathMappings({ cwd: SESSION_CWD_VAR }, configured, workspaceFolder);
  const file = posix(localPath);
  let best: { root: string; remote: string } | undefined;
  for (const m of mappings) {
    const root = posix(m.localRoot);
    const inside = file === root || file.startsWith(`${root}/`) || root === "";
    if (inside && (!best || root.length > best.root.length)) best = { root, remote: posix(m.remoteRoot) };
  }
  if (!best) return localPath;
  const rest = file.slice(best.root.length).replace(/^\//, "");
  if (best.remote === SESSION_CWD_VAR) return rest;
  if (best.remote.startsWith(`${SESSION_CWD_VAR}/`)) return [best.remote.slice(SESSION_CWD_VAR.length + 1), rest].filter(Boolean).join("/");
  if (best.remote.includes(SESSION_CWD_VAR)) return localPath; // a cwd inside a root: nothing sound to send
  return rest ? `${best.remote}/${rest}` : best.remote;
}

export function attachName(session: SessionRecord): string {
  return `Ray: ${sessionName(session)} (${session.id})`;
}

export function buildAttachConfig(opts: {
  session: SessionRecord;
  port: number;
  pathMappings: readonly PathMapping[];
  workspaceFolder?: string | null;
  cluster?: string;
}): AttachConfig {
  if (!Number.isInteger(opts.port) || opts.port <= 0 || opts.port > 65535) {
    throw new RangeError(`forwarder port ${opts.port} is not a TCP port`);
  }
  const cfg: AttachConfig = {
    type: "debugpy",
    request: "attach",
    name: attachName(opts.session),
    connect: { host: "127.0.0.1", port: opts.port },
    pathMappings: resolvePathMappings(opts.session, opts.pathMappings, opts.workspaceFolder),
    justMyCode: false,
    raydbgSessionId: opts.session.id,
  };
  if (opts.cluster !== undefined) cfg.raydbgCluster = opts.cluster;
  return cfg;
}

/**
 * A launch.json entry for users who keep their own configs: it attaches to a port
 * that `raydbg forward` serves, since VS Code cannot start our forwarder from launch.json.
 */
export function launchSnippet(opts: { session: SessionRecord; gatewayAddress: string; port?: number; pathMappings: readonly PathMapping[] }): string {
  const port = opts.port ?? 5678;
  const cfg: Partial<AttachConfig> = buildAttachConfig({ session: opts.session, port, pathMappings: opts.pathMappings });
  delete cfg.raydbgSessionId; // only meaningful for debug sessions the extension starts
  const body = JSON.stringify(cfg, null, 2);
  return `// First run: raydbg forward ${opts.session.id} --port ${port} --address ${opts.gatewayAddress}\n${body}`;
}
