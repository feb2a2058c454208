/**
 * Attach plumbing shared by the extension and the integration test: a forwarder per
 * paused session plus the debugpy config that points VS Code at it.
 */
import { AttachConfig, buildAttachConfig } from "./launchConfig";
import { Forwarder, ForwarderError } from "./forwarder";
import { GatewayClient } from "./gatewayClient";
import { SessionRecord } from "./records";
import { PathMapping } from "./settings";

export interface PreparedAttach {
  config: AttachConfig;
  forwarder: Forwarder;
}

export async function prepareAttach(opts: {
  client: Pick<GatewayClient, "dapUrl" | "token">;
  session: SessionRecord;
  pathMappings: readonly PathMapping[];
  workspaceFolder?: string | null;
  cluster?: string;
  onError?: (err: ForwarderError) => void;
}): Promise<PreparedAttach> {
  const forwarder = await Forwarder.start({ url: opts.client.dapUrl(opts.session.id), token: opts.client.token, onError: opts.onError });
  const config = buildAttachConfig({
    session: opts.session,
    port: forwarder.port,
    pathMappings: opts.pathMappings,
    workspaceFolder: opts.workspaceFolder,
    cluster: opts.cluster,
  });
  return { config, forwarder };
}

/** Forwarders of attached sessions, by session id; each lives as long as its debug session. */
export class AttachRegistry {
  private readonly forwarders = new Map<string, Forwarder>();

  has(sessionId: string): boolean {
    return this.forwarders.has(sessionId);
  }

  add(sessionId: string, fwd: Forwarder): void {
    const old = this.forwarders.get(sessionId);
    this.forwarders.set(sessionId, fwd);
    if (old && old !== fwd) void old.close();
  }

  async stop(sessionId: string): Promise<void> {
    const fwd = this.forwarders.get(sessionId);
    this.forwarders.delete(sessionId);
    await fwd?.close();
  }

  async stopAll(): Promise<void> {
    const all = [...this.forwarders.values()];
    this.forwarders.clear();
    await Promise.all(all.map((f) => f.close()));
  }

  get size(): number {
    return this.forwarders.size;
  }
}
