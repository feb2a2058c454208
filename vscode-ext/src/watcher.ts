/**
 * Keeps one cluster's session list current: the gateway's SSE stream when it has one,
 * else polling; failures back off exponentially up to a cap.
 *
 * With the view hidden the stream stays (it is push, costs nothing while idle and keeps
 * pause notifications working) but polling slows to `hiddenIntervalMs`.
 */
import { GatewayClient, GatewayError, StreamHandle } from "./gatewayClient";
import { ClusterState } from "./treeModel";

export interface WatcherOptions {
  client: Pick<GatewayClient, "sessions" | "stream">;
  onState(state: ClusterState): void;
  intervalMs: number;
  hiddenIntervalMs?: number;
  maxBackoffMs?: number;
}

type Mode = "stream" | "poll";

export function backoffDelay(baseMs: number, failures: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, failures - 1));
}

export class SessionWatcher {
  private mode: Mode = "stream";
  private handle: StreamHandle | undefined;
  private timer: NodeJS.Timeout | undefined;
  private failures = 0;
  private visible = true;
  private running = false;
  private polling = false;
  private readonly maxBackoffMs: number;
  private readonly hiddenIntervalMs: number;

  constructor(private readonly opts: WatcherOptions) {
    this.maxBackoffMs = opts.maxBackoffMs ?? 60_000;
    this.hiddenIntervalMs = opts.hiddenIntervalMs ?? Math.max(60_000, opts.intervalMs);
  }

  get currentMode(): Mode {
    return this.mode;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.opts.onState({ kind: "loading" });
    this.connect();
  }

  stop(): void {
    this.running = false;
    this.clearTimer();
    this.handle?.close();
    this.handle = undefined;
  }

  setVisible(visible: boolean): void {
    const wasHidden = !this.visible;
    this.visible = visible;
    // Coming back into view: show fresh data now rather than after a slow hidden poll.
    if (visible && wasHidden && this.mode === "poll" && this.running) this.refresh();
  }

  /** Fetch now (the Refresh button), and retry at once if the cluster was failing. */
  refresh(): void {
    if (!this.running) return;
    this.clearTimer();
    if (this.mode === "stream" && !this.handle) this.connect();
    else void this.poll();
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(ms: number, fn: () => void): void {
    this.clearTimer();
    if (this.running) this.timer = setTimeout(fn, ms);
  }

  private fail(err: GatewayError): void {
    this.failures += 1;
    const reason = err.reason === "notFound" ? "protocol" : err.reason;
    this.opts.onState({ kind: "error", message: err.message, reason });
  }

  private retryDelay(): number {
    return backoffDelay(this.opts.intervalMs, this.failures, this.maxBackoffMs);
  }

  private connect(): void {
    let gotData = false;
    this.handle = this.opts.client.stream({
      onSessions: (parsed) => {
        gotData = true;
        this.failures = 0;
        if (typeof parsed === "string") this.opts.onState({ kind: "error", message: parsed, reason: "protocol" });
        else this.opts.onState({ kind: "ok", sessions: parsed.sessions, bad: parsed.bad, live: true });
      },
      onClose: (err) => {
        this.handle = undefined;
        if (!this.running) return;
        if (err.reason === "notFound") {
          // An older gateway without /api/v1/stream: poll from now on.
          this.mode = "poll";
          void this.poll();
        } else if (gotData && err.reason === "unreachable") {
          // A stream that worked and dropped (gateway restart, proxy timeout): reconnect soon.
          this.schedule(Math.min(1000, this.opts.intervalMs), () => this.connect());
        } else {
          this.fail(err);
          this.schedule(this.retryDelay(), () => this.connect());
        }
      },
    });
  }

  private async poll(): Promise<void> {
    if (!this.running || this.polling) return;
    this.polling = true;
    try {
      const parsed = await this.opts.client.sessions();
      if (!this.running) return;
      this.failures = 0;
      this.opts.onState({ kind: "ok", sessions: parsed.sessions, bad: parsed.bad, live: this.mode === "stream" });
      if (this.mode === "poll") this.schedule(this.visible ? this.opts.intervalMs : this.hiddenIntervalMs, () => void this.poll());
    } catch (e) {
      if (!this.running) return;
      const err = e instanceof GatewayError ? e : new GatewayError(String(e), "protocol");
      this.fail(err);
      if (this.mode === "poll") this.schedule(this.retryDelay(), () => void this.poll());
    } finally {
      this.polling = false;
    }
  }
}
