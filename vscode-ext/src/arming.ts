/**
 * Keeps the editor's breakpoints armed on the chosen (cluster, job) targets, and the
 * clusters' armed lists fresh for the Ray view.
 *
 * Arming is a PUT of this workspace's whole set (owner `vscode-<id>`), so it is
 * idempotent: a change in the gutter (debounced) or a reconnect sends the set again, one
 * request per target at a time, skipped when the gateway already has exactly that set.
 * No vscode import: the glue supplies clients, the mapped specs and a place to store targets.
 */
import { ArmedBreakpoint, ArmTarget, BreakpointSpec, jobLabel, parseBreakpointList, targetKey } from "./breakpoints";
import { GatewayClient, GatewayError } from "./gatewayClient";

export type ArmingClient = Pick<GatewayClient, "putBreakpoints" | "breakpoints">;

export interface TargetState {
  target: ArmTarget;
  status: "syncing" | "ok" | "error";
  /** The last failure, one line. */
  error?: string;
  /** How many breakpoints the gateway holds for this target from this workspace. */
  armed: number;
}

export interface ArmingDeps {
  owner: string;
  client(cluster: string): ArmingClient | undefined;
  /** The editor's breakpoints as the cluster's workers name the files (mappings are per cluster). */
  specs(cluster: string): BreakpointSpec[];
  onChange(): void;
  /** A target's sync failed with a message it did not have before. */
  onError?(target: ArmTarget, message: string): void;
  /** The armed targets changed (to keep them across reloads). */
  save?(targets: ArmTarget[]): void;
  debounceMs?: number;
}

interface Entry extends TargetState {
  sent?: string;
  inflight: boolean;
  again: boolean;
}

const message = (e: unknown) => (e instanceof GatewayError || e instanceof Error ? e.message : String(e));

export class BreakpointArming {
  private readonly entries = new Map<string, Entry>();
  private timer?: NodeJS.Timeout;
  private disposed = false;

  constructor(
    private readonly deps: ArmingDeps,
    restored: readonly ArmTarget[] = [],
  ) {
    for (const t of restored) this.entries.set(targetKey(t), { target: t, status: "syncing", armed: 0, inflight: false, again: false });
  }

  get owner(): string {
    return this.deps.owner;
  }

  targets(cluster?: string): TargetState[] {
    return [...this.entries.values()]
      .filter((e) => cluster === undefined || e.target.cluster === cluster)
      .map(({ target, status, error, armed }) => ({ target, status, error, armed }));
  }

  isArmed(t: ArmTarget): boolean {
    return this.entries.has(targetKey(t));
  }

  /** Arm `t` (or send again if armed): resolves once the gateway answered; rejects with its message. */
  async arm(t: ArmTarget): Promise<TargetState> {
    const key = targetKey(t);
    let e = this.entries.get(key);
    if (!e) {
      e = { target: t, status: "syncing", armed: 0, inflight: false, again: false };
      this.entries.set(key, e);
      this.save();
    }
    e.sent = undefined; // an explicit arm always asks the gateway
    await this.push(e);
    if (e.status === "error") throw new Error(e.error);
    return this.targets().find((s) => targetKey(s.target) === key) as TargetState;
  }

  /** Send the empty set for `t`, then forget it; on failure it stays armed (and says why). */
  async disarm(t: ArmTarget): Promise<void> {
    const key = targetKey(t);
    const e = this.entries.get(key);
    const client = this.deps.client(t.cluster);
    if (!client) throw new Error(`cluster "${t.cluster}" is not connected; its breakpoints for ${jobLabel(t.job)} stay armed`);
    try {
      await client.putBreakpoints(this.deps.owner, t.job, []);
    } catch (err) {
      if (e) this.fail(e, `disarming failed: ${message(err)}`);
      throw new Error(`could not disarm ${jobLabel(t.job)} on ${t.cluster}: ${message(err)}`, { cause: err });
    }
    this.entries.delete(key);
    this.save();
    this.deps.onChange();
  }

  /** The gutter changed: send every target again after a quiet moment. */
  editorChanged(): void {
    if (this.disposed) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      for (const e of this.entries.values()) void this.push(e);
    }, this.deps.debounceMs ?? 300);
  }

  /** A cluster (re)connected: send its targets that the gateway may not have. */
  clusterReady(cluster: string): void {
    for (const e of this.entries.values()) {
      if (e.target.cluster === cluster && e.status !== "ok") void this.push(e);
    }
  }

  /** Targets of clusters that are gone from the settings are forgotten (nothing can be sent there). */
  keepClusters(names: readonly string[]): void {
    let changed = false;
    for (const [key, e] of this.entries) {
      if (!names.includes(e.target.cluster)) {
        this.entries.delete(key);
        changed = true;
      }
    }
    if (changed) {
      this.save();
      this.deps.onChange();
    }
  }

  dispose(): void {
    this.disposed = true;
    if (this.timer) clearTimeout(this.timer);
  }

  private save(): void {
    this.deps.save?.([...this.entries.values()].map((e) => e.target));
  }

  private fail(e: Entry, error: string): void {
    const fresh = e.error !== error;
    e.status = "error";
    e.error = error;
    e.sent = undefined;
    if (fresh) this.deps.onError?.(e.target, error);
    this.deps.onChange();
  }

  private async push(e: Entry): Promise<void> {
    if (this.disposed) return;
    if (e.inflight) {
      e.again = true;
      return;
    }
    const client = this.deps.client(e.target.cluster);
    if (!client) {
      this.fail(e, `cluster "${e.target.cluster}" is not connected`);
      return;
    }
    const specs = this.deps.specs(e.target.cluster);
    const body = JSON.stringify(specs);
    if (e.status === "ok" && e.sent === body) return;
    e.inflight = true;
    e.again = false;
    if (e.status !== "error") e.status = "syncing";
    try {
      const answer = await client.putBreakpoints(this.deps.owner, e.target.job, specs);
      const list = parseBreakpointList(answer);
      if (typeof list === "string") throw new Error(list);
      if (this.entries.get(targetKey(e.target)) === e) {
        e.status = "ok";
        e.error = undefined;
        e.sent = body;
        e.armed = list.length;
        this.deps.onChange();
      }
    } catch (err) {
      if (this.entries.get(targetKey(e.target)) === e) this.fail(e, message(err));
    } finally {
      e.inflight = false;
    }
    if (e.again && this.entries.get(targetKey(e.target)) === e) await this.push(e);
  }
}

export type ListState = { kind: "ok"; breakpoints: ArmedBreakpoint[] } | { kind: "error"; message: string } | { kind: "unsupported" };

/** Each connected cluster's armed breakpoints, polled while the view is visible. */
export class ArmedLists {
  private readonly states = new Map<string, ListState>();
  private timer?: NodeJS.Timeout;
  private visible = true;
  private inflight = new Set<string>();

  constructor(
    private readonly opts: {
      clusters(): string[];
      client(cluster: string): ArmingClient | undefined;
      intervalMs(): number;
      onChange(): void;
    },
  ) {}

  get(cluster: string): ListState | undefined {
    return this.states.get(cluster);
  }

  start(): void {
    this.schedule(0);
  }

  setVisible(visible: boolean): void {
    const was = this.visible;
    this.visible = visible;
    if (visible && !was) this.schedule(0);
  }

  /** Ask now (after arming, on Refresh). */
  async refresh(cluster?: string): Promise<void> {
    const names = this.opts.clusters().filter((c) => cluster === undefined || c === cluster);
    for (const gone of [...this.states.keys()]) if (!this.opts.clusters().includes(gone)) this.states.delete(gone);
    await Promise.all(names.map((c) => this.load(c)));
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.visible = false;
  }

  private schedule(ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.visible) return;
      void this.refresh().finally(() => {
        if (this.visible) this.schedule(this.opts.intervalMs());
      });
    }, ms);
  }

  private async load(cluster: string): Promise<void> {
    const client = this.opts.client(cluster);
    if (!client || this.inflight.has(cluster)) return;
    this.inflight.add(cluster);
    let next: ListState;
    try {
      const list = parseBreakpointList(await client.breakpoints());
      next = typeof list === "string" ? { kind: "error", message: list } : { kind: "ok", breakpoints: list };
    } catch (err) {
      next = err instanceof GatewayError && err.reason === "notFound" ? { kind: "unsupported" } : { kind: "error", message: message(err) };
    } finally {
      this.inflight.delete(cluster);
    }
    if (JSON.stringify(this.states.get(cluster)) !== JSON.stringify(next)) {
      this.states.set(cluster, next);
      this.opts.onChange();
    }
  }
}
