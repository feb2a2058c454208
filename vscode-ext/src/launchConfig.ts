/**
 * Attach configurations for a paused Ray session (debug type `raydbg`; debugpy in the worker
 * receives them as its attach arguments).
 *
 * The debuggee's files live under the worker's cwd on a remote node; pathMappings tell
 * debugpy which local file is which, so breakpoints and the editor line up.
 */
import { SessionRecord, sessionName } from "./records";
import { PathMapping } from "./settings";

/** The extension's own debug type: its inline adapter relays to debugpy in the worker. */
export const DEBUG_TYPE = "raydbg";

export interface AttachConfig {
  type: typeof DEBUG_TYPE;
  request: "attach";
  name: string;
  pathMappings: PathMapping[];
  justMyCode: false;
  /** Which paused session, on which cluster (a name in raydbg.clusters): where the adapter relays. */
  raydbgSessionId: string;
  raydbgCluster: string;
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
  cluster: string;
  pathMappings: readonly PathMapping[];
  workspaceFolder?: string | null;
}): AttachConfig {
  return {
    type: DEBUG_TYPE,
    request: "attach",
    name: attachName(opts.session),
    pathMappings: resolvePathMappings(opts.session, opts.pathMappings, opts.workspaceFolder),
    justMyCode: false,
    raydbgSessionId: opts.session.id,
    raydbgCluster: opts.cluster,
  };
}

/**
 * A launch.json entry for users who keep their own configs: the extension's own attach,
 * which runs from launch.json as well (VS Code's debugpy cannot attach to a unix socket,
 * so `raydbg forward --unix` is for other clients; docs/vscode.md).
 */
export function launchSnippet(opts: { session: SessionRecord; cluster: string; pathMappings: readonly PathMapping[] }): string {
  const cfg = buildAttachConfig({ session: opts.session, cluster: opts.cluster, pathMappings: opts.pathMappings });
  const body = JSON.stringify(cfg, null, 2);
  return `// Ray attach, no local port: "raydbgCluster" is a cluster of your user settings; a session id lasts one pause.\n${body}`;
}
