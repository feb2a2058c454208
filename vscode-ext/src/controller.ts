/**
 * All configured clusters and their live session lists; the model behind the Ray view.
 *
 * No vscode import: the glue feeds it settings and tokens and renders what it reports,
 * so it can be driven against a real gateway from node.
 */
import { GatewayClient, GatewayError } from "./gatewayClient";
import { SessionRecord } from "./records";
import { addressKey, ClusterConfig, PathMapping, Settings } from "./settings";
import { RunRef, RunStacksCache } from "./runStacks";
import { StepsPoller } from "./stepsPoller";
import { TokenResult } from "./token";
import { buildTree, ClusterState, pausedCount, RunInfo, ViewItem } from "./treeModel";
import { SessionWatcher } from "./watcher";

export interface ControllerDeps {
  resolveToken(cluster: ClusterConfig): Promise<TokenResult>;
  /** Anything shown changed: redraw the view and the status bar. */
  onChange(): void;
  /** Sessions that paused since the cluster's previous update (never the first one). */
  onNewSessions?(cluster: string, sessions: SessionRecord[]): void;
  makeClient?(cluster: ClusterConfig, token: string): GatewayClient;
}

interface Entry {
  cluster: ClusterConfig;
  key: string;
  state: ClusterState;
  client?: GatewayClient;
  watcher?: SessionWatcher;
  stacks?: RunStacksCache;
  steps?: StepsPoller;
  seen?: Set<string>;
  generation: number;
}

function clusterKey(c: ClusterConfig): string {
  return JSON.stringify([c.address, c.tokenFile ?? null, c.tokenFromEnv ?? false]);
}

export class ClusterController {
  private entries = new Map<string, Entry>();
  private settings: Settings = { clusters: [], refreshIntervalMs: 5000, pathMappings: [], notifyOnPause: true };
  private errors: string[] = [];
  private visible = true;
  private generation = 0;

  constructor(private readonly deps: ControllerDeps) {}

  get current(): Settings {
    return this.settings;
  }

  /** Start, keep or stop watchers so they match the settings. */
  applySettings(settings: Settings, errors: readonly string[]): void {
    const intervalChanged = settings.refreshIntervalMs !== this.settings.refreshIntervalMs;
    this.settings = settings;
    this.errors = [...errors];
    const next = new Map<string, Entry>();
    const created: Entry[] = [];
    for (const c of settings.clusters) {
      const old = this.entries.get(c.name);
      if (old && old.key === clusterKey(c) && !intervalChanged) {
        old.cluster = c;
        next.set(c.name, old);
        this.entries.delete(c.name);
      } else {
        const e = this.newEntry(c);
        created.push(e);
        next.set(c.name, e);
      }
    }
    for (const gone of this.entries.values()) this.stopEntry(gone);
    this.entries = next;
    for (const e of created) void this.startEntry(e);
    this.deps.onChange();
  }

  /** Reconnect one cluster from scratch (e.g. after its token changed). */
  restart(name: string): void {
    const old = this.entries.get(name);
    if (!old) return;
    this.stopEntry(old);
    const e = this.newEntry(old.cluster);
    this.entries.set(name, e);
    void this.startEntry(e);
    this.deps.onChange();
  }

  /** Reconnect every cluster whose gateway is `key` (settings.addressKey): its stored token changed. */
  restartAddress(key: string): void {
    for (const e of [...this.entries.values()]) if (addressKey(e.cluster.address) === key) this.restart(e.cluster.name);
  }

  refresh(name?: string): void {
    for (const e of this.entries.values()) {
      if (name !== undefined && e.cluster.name !== name) continue;
      if (e.watcher) {
        e.watcher.refresh();
        e.stacks?.refresh();
        e.steps?.refresh();
      } else if (e.state.kind === "error") this.restart(e.cluster.name);
    }
  }

  /** A Train run's node was expanded: ask for its ranks' stacks now, and its step times while it stays open. */
  expandRun(cluster: string, ref: RunRef): void {
    const e = this.entries.get(cluster);
    e?.stacks?.expand(ref);
    e?.steps?.refresh();
  }

  /** A Train run's node was collapsed: stop keeping its stacks (unless a rank of it is paused). */
  collapseRun(cluster: string, ref: RunRef): void {
    this.entries.get(cluster)?.stacks?.collapse(ref);
  }

  setVisible(visible: boolean): void {
    this.visible = visible;
    for (const e of this.entries.values()) {
      e.watcher?.setVisible(visible);
      e.steps?.setVisible(visible);
    }
  }

  tree(now?: number): ViewItem[] {
    const clusters = [...this.entries.values()].map((e) => e.cluster);
    const states = new Map([...this.entries.values()].map((e) => [e.cluster.name, e.state] as const));
    const runs = new Map<string, RunInfo>();
    for (const e of this.entries.values()) {
      if (e.stacks || e.steps) runs.set(e.cluster.name, { stacks: e.stacks?.snapshot() ?? new Map(), steps: e.steps?.snapshot() ?? new Map() });
    }
    return buildTree(clusters, states, this.errors, now, runs);
  }

  pausedCount(): number {
    return pausedCount([...this.entries.values()].map((e) => e.state));
  }

  client(name: string): GatewayClient | undefined {
    return this.entries.get(name)?.client;
  }

  cluster(name: string): ClusterConfig | undefined {
    return this.entries.get(name)?.cluster;
  }

  /** The cluster's own pathMappings when it has some, else the global ones. */
  pathMappingsFor(name: string): PathMapping[] {
    const own = this.cluster(name)?.pathMappings;
    return own && own.length > 0 ? own : this.settings.pathMappings;
  }

  /** The cluster's paused sessions as last listed (none while it does not answer). */
  sessions(cluster: string): SessionRecord[] {
    const st = this.entries.get(cluster)?.state;
    return st?.kind === "ok" ? st.sessions : [];
  }

  /** The cluster's sessions when its last answer was a list; null while connecting or failing. */
  listed(cluster: string): SessionRecord[] | null {
    const st = this.entries.get(cluster)?.state;
    return st?.kind === "ok" ? st.sessions : null;
  }

  /** The latest record of a session, if its cluster still lists it. */
  session(cluster: string, id: string): SessionRecord | undefined {
    const st = this.entries.get(cluster)?.state;
    return st?.kind === "ok" ? st.sessions.find((s) => s.id === id) : undefined;
  }

  dispose(): void {
    for (const e of this.entries.values()) this.stopEntry(e);
    this.entries.clear();
  }

  private newEntry(c: ClusterConfig): Entry {
    this.generation += 1;
    return { cluster: c, key: clusterKey(c), state: { kind: "loading" }, generation: this.generation };
  }

  private stopEntry(e: Entry): void {
    e.watcher?.stop();
    e.watcher = undefined;
    e.stacks?.dispose();
    e.stacks = undefined;
    e.steps?.stop();
    e.steps = undefined;
    e.generation = -1; // late token lookups for a stopped entry are dropped
  }

  private setState(e: Entry, state: ClusterState): void {
    if (state.kind === "ok") {
      if (e.seen && this.deps.onNewSessions) {
        const fresh = state.sessions.filter((s) => !e.seen?.has(s.id));
        if (fresh.length) this.deps.onNewSessions(e.cluster.name, fresh);
      }
      e.seen = new Set(state.sessions.map((s) => s.id));
    }
    e.state = state;
    if (state.kind === "ok") e.stacks?.sync(state.sessions);
    this.deps.onChange();
  }

  private async startEntry(e: Entry): Promise<void> {
    const gen = e.generation;
    const token = await this.deps.resolveToken(e.cluster);
    if (e.generation !== gen || this.entries.get(e.cluster.name) !== e) return;
    if ("error" in token) {
      this.setState(e, { kind: "error", message: `${e.cluster.name}: ${token.error}`, reason: "auth" });
      return;
    }
    try {
      e.client = this.deps.makeClient ? this.deps.makeClient(e.cluster, token.token) : new GatewayClient({ address: e.cluster.address, token: token.token });
    } catch (err) {
      const msg = err instanceof GatewayError ? err.message : String(err);
      this.setState(e, { kind: "error", message: msg, reason: "protocol" });
      return;
    }
    const client = e.client;
    e.stacks = new RunStacksCache({
      fetch: (ref) => client.stacks({ job: ref.job === "unknown" ? undefined : ref.job, run: ref.run }),
      onChange: () => {
        if (e.generation === gen) this.deps.onChange();
      },
    });
    const stacks = e.stacks;
    e.steps = new StepsPoller({
      fetch: () => client.steps(),
      onChange: () => {
        if (e.generation === gen) this.deps.onChange();
      },
      watching: () => stacks.watching > 0,
      intervalMs: this.settings.refreshIntervalMs,
    });
    e.steps.setVisible(this.visible);
    e.steps.start();
    e.watcher = new SessionWatcher({
      client: e.client,
      intervalMs: this.settings.refreshIntervalMs,
      onState: (st) => {
        if (e.generation === gen) this.setState(e, st);
      },
    });
    e.watcher.setVisible(this.visible);
    e.watcher.start();
  }
}
