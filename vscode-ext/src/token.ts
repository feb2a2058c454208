/**
 * Which token to send to a cluster's gateway.
 *
 * Order: the token stored in VS Code's SecretStorage, the cluster's `tokenFile`, then the
 * same discovery as the CLI (docs/architecture.md). Ray's and raydbg's default token
 * files are only used for a gateway on this machine, so a local token is never sent to
 * a remote host the user did not give it to.
 */
import { homedir } from "node:os";
import { readFile } from "node:fs/promises";
import { join } from "node:path";

export interface TokenSources {
  secret?: string;
  tokenFile?: string;
  gatewayHost: string;
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

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h);
}

async function tryRead(read: (p: string) => Promise<string>, path: string): Promise<string | null> {
  try {
    const t = (await read(path)).trim();
    return t || null;
  } catch {
    return null;
  }
}

export async function resolveToken(src: TokenSources): Promise<TokenResult> {
  const env = src.env ?? process.env;
  const home = src.home ?? homedir();
  const read = src.read ?? ((p: string) => readFile(p, "utf8"));
  if (src.secret && src.secret.trim()) return { token: src.secret.trim(), source: "secret storage" };
  if (src.tokenFile) {
    const path = expandHome(src.tokenFile, home);
    const t = await tryRead(read, path);
    // An explicitly configured file that cannot be read is an error, not a reason to guess.
    return t ? { token: t, source: path } : { error: `cannot read a token from tokenFile ${path}` };
  }
  const fromEnv = env.RAYDBG_TOKEN?.trim() || env.RAY_AUTH_TOKEN?.trim();
  if (fromEnv) return { token: fromEnv, source: env.RAYDBG_TOKEN?.trim() ? "RAYDBG_TOKEN" : "RAY_AUTH_TOKEN" };
  if (env.RAY_AUTH_TOKEN_PATH) {
    const t = await tryRead(read, expandHome(env.RAY_AUTH_TOKEN_PATH, home));
    if (t) return { token: t, source: env.RAY_AUTH_TOKEN_PATH };
  }
  if (isLoopbackHost(src.gatewayHost)) {
    for (const p of [join(home, ".ray", "auth_token"), join(home, ".raydbg", "token")]) {
      const t = await tryRead(read, p);
      if (t) return { token: t, source: p };
    }
  }
  return { error: "no token: use 'Ray: Set Cluster Token' or set tokenFile for this cluster" };
}
