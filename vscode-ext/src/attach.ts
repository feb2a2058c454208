/**
 * Attach plumbing shared by the extension and the integration test: the attach config
 * and relay for one paused session, the session a `raydbg` debug configuration names,
 * and the relays of attached sessions.
 */
import { DapRelay } from "./dapRelay";
import { GatewayClient } from "./gatewayClient";
import { AttachConfig, buildAttachConfig } from "./launchConfig";
import { SessionRecord } from "./records";
import { RelayError } from "./relayErrors";
import { PathMapping } from "./settings";

type RelayClient = Pick<GatewayClient, "dapUrl" | "token">;

export interface PreparedAttach {
  config: AttachConfig;
  /** Opens the gateway's relay at VS Code's first message, not before. */
  relay: DapRelay;
}

export function prepareAttach(opts: {
  client: RelayClient;
  session: SessionRecord;
  cluster: string;
  pathMappings: readonly PathMapping[];
  workspaceFolder?: string | null;
  onError?: (err: RelayError) => void;
}): PreparedAttach {
  const config = buildAttachConfig({ session: opts.session, cluster: opts.cluster, pathMappings: opts.pathMappings, workspaceFolder: opts.workspaceFolder });
  return { config, relay: newRelay(opts.client, opts.session.id, opts.onError) };
}

function newRelay(client: RelayClient, sessionId: string, onError?: (err: RelayError) => void): DapRelay {
  return new DapRelay({ url: client.dapUrl(sessionId), token: client.token, onError });
}

export interface AttachTarget {
  cluster: string;
  sessionId: string;
}

// raydbg's ids (raydbg/validate.py), less "." and "..", which a URL path would resolve.
const SESSION_ID = /^(?!\.+$)[A-Za-z0-9_.-]{1,128}$/;

/**
 * The session a `raydbg` debug configuration names (ours, or a launch.json's), or the
 * one-line reason it names none.
 */
export function attachTarget(config: Record<string, unknown>): AttachTarget | string {
  const { raydbgCluster: cluster, raydbgSessionId: sessionId } = config;
  if (typeof cluster !== "string" || !cluster) return `a raydbg attach configuration needs "raydbgCluster", the name of a cluster in raydbg.clusters (user settings)`;
  if (typeof sessionId !== "string" || !SESSION_ID.test(sessionId)) {
    return `a raydbg attach configuration needs "raydbgSessionId", a paused session's id (letters, digits, '_', '.', '-'); got ${JSON.stringify(sessionId ?? null)}`;
  }
  return { cluster, sessionId };
}

/** Relays of attached sessions, by session id; each lives as long as its debug session. */
export class AttachRegistry {
  private readonly relays = new Map<string, { relay: DapRelay; cluster: string; claimed: boolean }>();

  has(sessionId: string): boolean {
    return this.relays.has(sessionId);
  }

  /** The relay an Attach made, kept for the debug session VS Code is about to start. */
  add(sessionId: string, cluster: string, relay: DapRelay, claimed = false): void {
    const old = this.relays.get(sessionId);
    this.relays.set(sessionId, { relay, cluster, claimed });
    if (old && old.relay !== relay) old.relay.dispose();
  }

  /**
   * The adapter for a debug session VS Code starts: the relay its Attach made, else one
   * from `make` (a launch.json configuration, or a restarted session).
   */
  adapterFor(target: AttachTarget, make: () => DapRelay): DapRelay {
    const kept = this.relays.get(target.sessionId);
    if (kept && !kept.claimed && kept.cluster === target.cluster) {
      kept.claimed = true;
      return kept.relay;
    }
    const relay = make();
    this.add(target.sessionId, target.cluster, relay, true);
    return relay;
  }

  stop(sessionId: string): void {
    const kept = this.relays.get(sessionId);
    this.relays.delete(sessionId);
    kept?.relay.dispose();
  }

  stopAll(): void {
    const all = [...this.relays.values()];
    this.relays.clear();
    for (const k of all) k.relay.dispose();
  }

  get size(): number {
    return this.relays.size;
  }
}

/** The adapter for a `raydbg` debug session, or an Error with the one line to show. */
export function adapterForConfig(
  config: Record<string, unknown>,
  deps: { registry: AttachRegistry; client(cluster: string): RelayClient | undefined; onError?: (err: RelayError) => void },
): DapRelay {
  const target = attachTarget(config);
  if (typeof target === "string") throw new Error(target);
  return deps.registry.adapterFor(target, () => {
    const client = deps.client(target.cluster);
    if (!client) throw new Error(`cluster "${target.cluster}" is not configured or not connected; check raydbg.clusters (user settings) and its token`);
    return newRelay(client, target.sessionId, deps.onError);
  });
}
