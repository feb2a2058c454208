/**
 * One cluster's Train runs and their ranks' step times, from `GET /api/v1/steps`.
 *
 * The steps answer is cheap for the cluster (each node's progress beats, no stack dump)
 * and lists every live Train run, paused or not: it is how the view finds running runs.
 * Asked when the cluster connects and on Refresh; then every `intervalMs` while a run
 * node is expanded (its step times move), else every `idleMs` while the view is shown,
 * never while it is hidden. A gateway without the endpoint (404) is not asked again
 * until Refresh; any failure shows no runs from it, never an error.
 */
import { GatewayError } from "./gatewayClient";
import { parseSteps, RunSteps } from "./steps";

export interface StepsPollerOptions {
  fetch(): Promise<unknown>;
  /** The runs shown changed: redraw. */
  onChange(): void;
  /** A run node is expanded: poll at `intervalMs`. */
  watching(): boolean;
  intervalMs: number;
  idleMs?: number;
}

export const IDLE_STEPS_MS = 60_000;

export class StepsPoller {
  private runs = new Map<string, RunSteps>();
  private timer?: NodeJS.Timeout;
  private inflight = false;
  private again = false;
  private visible = true;
  private running = false;
  private unsupported = false;

  constructor(private readonly opts: StepsPollerOptions) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.poll();
  }

  stop(): void {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Ask now (Refresh, a run node expanded), even a gateway that had no steps. */
  refresh(): void {
    this.unsupported = false;
    this.poll();
  }

  setVisible(visible: boolean): void {
    const back = visible && !this.visible;
    this.visible = visible;
    if (back) this.poll();
  }

  snapshot(): ReadonlyMap<string, RunSteps> {
    return this.runs;
  }

  private poll(): void {
    if (!this.running || this.unsupported) return;
    if (this.inflight) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.inflight = true;
    this.again = false;
    this.opts.fetch().then(
      (body) => {
        const parsed = parseSteps(body);
        this.settle(typeof parsed === "string" ? new Map<string, RunSteps>() : parsed);
      },
      (e: unknown) => {
        if (e instanceof GatewayError && e.reason === "notFound") this.unsupported = true;
        this.settle(new Map<string, RunSteps>());
      },
    );
  }

  private settle(runs: Map<string, RunSteps>): void {
    this.inflight = false;
    if (!this.running) return;
    const changed = JSON.stringify([...this.runs]) !== JSON.stringify([...runs]);
    this.runs = runs;
    if (changed) this.opts.onChange();
    if (this.again) this.poll();
    else if (this.visible && !this.unsupported) {
      const ms = this.opts.watching() ? this.opts.intervalMs : (this.opts.idleMs ?? IDLE_STEPS_MS);
      this.timer = setTimeout(() => this.poll(), ms);
    }
  }
}
