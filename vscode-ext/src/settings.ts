/**
 * Validation of the `raydbg.*` settings and of gateway addresses.
 *
 * settings.json is hand-edited; a typo in one cluster must not hide the others, so each
 * problem becomes a message and the valid parts are kept.
 */

export interface PathMapping {
  localRoot: string;
  remoteRoot: string;
}

export interface ClusterConfig {
  name: string;
  address: string;
  tokenFile?: string;
  /** Send RAYDBG_TOKEN (VS Code's environment) to this cluster; off unless set. */
  tokenFromEnv?: boolean;
  pathMappings?: PathMapping[];
}

export interface Settings {
  clusters: ClusterConfig[];
  refreshIntervalMs: number;
  pathMappings: PathMapping[];
  notifyOnPause: boolean;
}

export interface RawSettings {
  clusters?: unknown;
  refreshInterval?: unknown;
  pathMappings?: unknown;
  notifyOnPause?: unknown;
}

export interface GatewayAddress {
  /** `http(s)://host:port[/prefix]`, no trailing slash. */
  httpBase: string;
  /** The same with `ws(s)://`, for the DAP relay. */
  wsBase: string;
}

export const DEFAULT_REFRESH_S = 5;
const MIN_REFRESH_S = 1;
const MAX_REFRESH_S = 3600;

/** `host:port` or `http(s)://host[:port][/prefix]` -> bases, or an error message. */
export function parseGatewayAddress(address: string): GatewayAddress | string {
  const text = address.trim();
  if (!text) return "gateway address is empty";
  const hasScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
  if (!hasScheme && !/^(\[[0-9a-f:]+\]|[^:/\s]+):\d+\/?$/i.test(text)) {
    return `gateway address "${text}" must be host:port or http(s)://host:port`;
  }
  let url: URL;
  try {
    url = new URL(hasScheme ? text : `http://${text}`);
  } catch {
    return `gateway address "${text}" is not a valid URL`;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return `gateway address "${text}" must use http or https, not ${url.protocol.slice(0, -1)}`;
  }
  if (url.search || url.hash || url.username) {
    return `gateway address "${text}" must not carry a query, fragment or user`;
  }
  const path = url.pathname.replace(/\/+$/, "");
  const httpBase = `${url.protocol}//${url.host}${path}`;
  const wsBase = `${url.protocol === "https:" ? "wss:" : "ws:"}//${url.host}${path}`;
  return { httpBase, wsBase };
}

/**
 * The identity a token belongs to: `host:port`, host lowercased, default port filled in
 * (`gw` and `http://GW:80/x` are one gateway). Null for an address that does not parse.
 */
export function addressKey(address: string): string | null {
  const a = parseGatewayAddress(address);
  if (typeof a === "string") return null;
  const url = new URL(a.httpBase);
  const port = url.port || (url.protocol === "https:" ? "443" : "80");
  return `${url.hostname.toLowerCase()}:${port}`;
}

/** What `WorkspaceConfiguration.inspect("clusters")` reports, per settings scope. */
export interface ScopedValues {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/**
 * The cluster list to use: user settings only. A repository's `.vscode/settings.json`
 * must not choose where tokens are sent (it could name a known cluster with its own
 * address), so workspace entries are ignored, with a note saying so.
 */
export function userClusters(values: ScopedValues | undefined): { clusters: unknown; notes: string[] } {
  const notes: string[] = [];
  for (const [where, v] of [["workspace", values?.workspaceValue], ["workspace folder", values?.workspaceFolderValue]] as const) {
    if (Array.isArray(v) && v.length > 0) {
      notes.push(`raydbg.clusters in ${where} settings is ignored: clusters come from user settings only, so a repository cannot choose where your tokens go`);
    }
  }
  return { clusters: values?.globalValue, notes };
}

/** For input boxes: an error message, or undefined when the name can be used. */
export function checkClusterName(name: string, taken: readonly string[]): string | undefined {
  const n = name.trim();
  if (!n) return "a cluster needs a name";
  if (n.length > 64) return "keep the name under 64 characters";
  if (taken.includes(n)) return `a cluster named "${n}" already exists`;
  return undefined;
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function parseMappings(raw: unknown, where: string, errors: string[]): PathMapping[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    errors.push(`${where}: expected a list of {localRoot, remoteRoot}`);
    return [];
  }
  const out: PathMapping[] = [];
  raw.forEach((m, i) => {
    if (isObj(m) && typeof m.localRoot === "string" && m.localRoot.trim() && typeof m.remoteRoot === "string" && m.remoteRoot.trim()) {
      out.push({ localRoot: m.localRoot.trim(), remoteRoot: m.remoteRoot.trim() });
    } else {
      errors.push(`${where}[${i}]: needs non-empty "localRoot" and "remoteRoot" strings`);
    }
  });
  return out;
}

function parseCluster(raw: unknown, i: number, names: Set<string>, errors: string[]): ClusterConfig | null {
  const where = `raydbg.clusters[${i}]`;
  if (!isObj(raw)) {
    errors.push(`${where}: expected an object with "name" and "address"`);
    return null;
  }
  const name = typeof raw.name === "string" ? raw.name.trim() : "";
  const nameErr = checkClusterName(name, [...names]);
  if (nameErr) {
    errors.push(`${where}: ${nameErr}`);
    return null;
  }
  if (typeof raw.address !== "string") {
    errors.push(`${where} ("${name}"): "address" must be a string like host:port`);
    return null;
  }
  const addr = parseGatewayAddress(raw.address);
  if (typeof addr === "string") {
    errors.push(`${where} ("${name}"): ${addr}`);
    return null;
  }
  const cluster: ClusterConfig = { name, address: raw.address.trim() };
  if (raw.tokenFile !== undefined) {
    if (typeof raw.tokenFile === "string" && raw.tokenFile.trim()) cluster.tokenFile = raw.tokenFile.trim();
    else errors.push(`${where} ("${name}"): "tokenFile" must be a non-empty path`);
  }
  if (raw.tokenFromEnv !== undefined) {
    if (typeof raw.tokenFromEnv === "boolean") cluster.tokenFromEnv = raw.tokenFromEnv;
    else errors.push(`${where} ("${name}"): "tokenFromEnv" must be true or false`);
  }
  if (raw.pathMappings !== undefined) {
    cluster.pathMappings = parseMappings(raw.pathMappings, `${where}.pathMappings`, errors);
  }
  names.add(name);
  return cluster;
}

export function validateSettings(raw: RawSettings): { settings: Settings; errors: string[] } {
  const errors: string[] = [];
  const clusters: ClusterConfig[] = [];
  if (raw.clusters !== undefined && raw.clusters !== null) {
    if (!Array.isArray(raw.clusters)) errors.push("raydbg.clusters: expected a list of clusters");
    else {
      const names = new Set<string>();
      raw.clusters.forEach((c, i) => {
        const cluster = parseCluster(c, i, names, errors);
        if (cluster) clusters.push(cluster);
      });
    }
  }
  let refreshS = DEFAULT_REFRESH_S;
  if (raw.refreshInterval !== undefined && raw.refreshInterval !== null) {
    const v = raw.refreshInterval;
    if (typeof v !== "number" || !Number.isFinite(v)) {
      errors.push(`raydbg.refreshInterval: expected a number of seconds, using ${DEFAULT_REFRESH_S}`);
    } else if (v < MIN_REFRESH_S || v > MAX_REFRESH_S) {
      refreshS = Math.min(MAX_REFRESH_S, Math.max(MIN_REFRESH_S, v));
      errors.push(`raydbg.refreshInterval: ${v} is outside ${MIN_REFRESH_S}..${MAX_REFRESH_S} s, using ${refreshS}`);
    } else refreshS = v;
  }
  const pathMappings = parseMappings(raw.pathMappings, "raydbg.pathMappings", errors);
  const notifyOnPause = typeof raw.notifyOnPause === "boolean" ? raw.notifyOnPause : true;
  return { settings: { clusters, refreshIntervalMs: refreshS * 1000, pathMappings, notifyOnPause }, errors };
}
