/**
 * Which token to send to a cluster's gateway, and to which gateway each token belongs.
 *
 * A token goes only to the gateway it belongs to (docs/vscode.md, "Which token is sent"):
 * - a stored token (SecretStorage) to the address (host:port) it was stored for;
 * - a cluster's `tokenFile` to that cluster (entries come from user settings only);
 * - `RAYDBG_TOKEN` to clusters that set `"tokenFromEnv": true`;
 * - Ray's token (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`, `~/.ray/auth_token`) and the
 *   head's `~/.raydbg/tokens/<host_port>` to the gateway the local Ray session names, nowhere else.
 */
import { homedir } from "node:os";
import { readFile } from "node:fs/promises";
import { join } from "node:path";

export interface TokenSources {
  /** The cluster's gateway, normalised (settings.addressKey); null if it does not parse. */
  address: string | null;
  /** The token stored for `address`. */
  secret?: string;
  tokenFile?: string;
  tokenFromEnv?: boolean;
  /** The gateway the local Ray session names (localGateway.ts), normalised, if any. */
  localGateway?: string | null;
  env?: NodeJS.ProcessEnv;
  home?: string;
  read?: (path: string) => Promise<string>;
}

export type TokenResult = { token: string; source: string } | { error: string };

export function expandHome(path: string, home: string): string {
  if (path === "~") return home;
  if (path.startsWith("~/")) return join(home, path.slice(2));
  return path;
}

async function tryRead(read: (p: string) => Promise<string>, path: string): Promise<string | null> {
  try {
    const t = (await read(path)).trim();
    return t || null;
  } catch {
    return null;
  }
}

/** The local cluster's token, in the CLI's order (raydbg/auth.py client_token). */
/** The file the head's agent leaves the token of the gateway at `address` in (raydbg/auth.py token_path). */
export function headTokenFile(home: string, address: string): string {
  return join(home, ".raydbg", "tokens", address.trim().toLowerCase().replace(/[^A-Za-z0-9.-]/g, "_"));
}

async function localToken(address: string, env: NodeJS.ProcessEnv, home: string, read: (p: string) => Promise<string>): Promise<{ token: string; source: string } | null> {
  const head = headTokenFile(home, address);
  const own = await tryRead(read, head);
  if (own) return { token: own, source: head };
  const fromEnv = env.RAY_AUTH_TOKEN?.trim();
  if (fromEnv) return { token: fromEnv, source: "RAY_AUTH_TOKEN" };
  if (env.RAY_AUTH_TOKEN_PATH) {
    const path = expandHome(env.RAY_AUTH_TOKEN_PATH, home);
    const t = await tryRead(read, path);
    if (t) return { token: t, source: path };
  }
  if ((env.RAY_AUTH_MODE ?? "").toLowerCase() === "disabled") return null;
  const ray = join(home, ".ray", "auth_token");
  const t = await tryRead(read, ray);
  return t ? { token: t, source: ray } : null;
}

export async function resolveToken(src: TokenSources): Promise<TokenResult> {
  const env = src.env ?? process.env;
  const home = src.home ?? homedir();
  const read = src.read ?? ((p: string) => readFile(p, "utf8"));
  if (src.address === null) return { error: "the gateway address does not parse; no token is sent" };
  if (src.secret && src.secret.trim()) return { token: src.secret.trim(), source: "secret storage" };
  if (src.tokenFile) {
    const path = expandHome(src.tokenFile, home);
    const t = await tryRead(read, path);
    // An explicitly configured file that cannot be read is an error, not a reason to guess.
    return t ? { token: t, source: path } : { error: `cannot read a token from tokenFile ${path}` };
  }
  const raydbgEnv = env.RAYDBG_TOKEN?.trim();
  if (src.tokenFromEnv) {
    if (raydbgEnv) return { token: raydbgEnv, source: "RAYDBG_TOKEN" };
    return { error: '"tokenFromEnv" is set but RAYDBG_TOKEN is empty in the environment VS Code was started from' };
  }
  if (src.localGateway && src.localGateway === src.address) {
    const local = await localToken(src.address, env, home, read);
    if (local) return local;
  }
  const hint = raydbgEnv ? ' (RAYDBG_TOKEN is set, but is only sent to clusters with "tokenFromEnv": true)' : "";
  return { error: `no token for ${src.address}: use 'Ray: Set Cluster Token' or set tokenFile for this cluster${hint}` };
}
