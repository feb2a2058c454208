/**
 * Stacks (rank states, held ranks, collectives) for one cluster's Train runs that have a
 * paused rank or whose node the user has expanded.
 *
 * Stacks cost the cluster a dump of every worker, so they are fetched only for those
 * runs: when the set of paused sessions of a run changes, when its node is expanded, and
 * on Refresh; one request per run at a time. A run with nothing paused is kept only while
 * its node is expanded (`watch` / `unwatch`). A failed or odd answer leaves nothing extra
 * in the tree, never an error.
 */
import { SessionRecord } from "./records";
import { parseRunStacks, RunStacks } from "./stacks";

export interface RunRef {
  job: string;
  run: string;
}

/** Map key of a run: Train run names are unique within a job only. */
export function runKey(job: string, run: string): string {
  return JSON.stringify([job, run]);
}

export interface RunStacksOptions {
  /** GET /api/v1/stacks for the run; rejects on any failure. */
  fetch(ref: RunRef): Promise<unknown>;
  /** New information (or none any more) for some run: redraw. */
  onChange(): void;
}

interface Entry {
  ref: RunRef;
  /** Its node is expanded: kept (and asked on expand) with nothing paused. */
  watched: boolean;
  /** Paused session ids of the run when it was last asked for. */
  sig: string;
  data?: RunStacks;
  inflight: boolean;
  again: boolean;
}

export class RunStacksCache {
  private readonly entries = new Map<string, Entry>();
  private disposed = false;

  constructor(private readonly opts: RunStacksOptions) {}

  /** The session list changed: ask again for runs whose paused sessions changed, forget runs with none. */
  sync(sessions: readonly SessionRecord[]): void {
    const paused = new Map<string, { ref: RunRef; ids: string[] }>();
    for (const s of sessions) {
      if (!s.train_run) continue;
      const key = runKey(s.job_id, s.train_run);
      const p = paused.get(key) ?? { ref: { job: s.job_id, run: s.train_run }, ids: [] };
      p.ids.push(s.id);
      paused.set(key, p);
    }
    let dropped = false;
    for (const [key, e] of [...this.entries]) {
      if (paused.has(key)) continue;
      if (e.watched) {
        // Its last paused rank went on: the held ranks it showed run again.
        if (e.sig !== "") {
          e.sig = "";
          this.load(key, e);
        }
        continue;
      }
      this.entries.delete(key);
      dropped = true;
    }
    for (const [key, p] of paused) {
      const sig = p.ids.sort().join(",");
      const e = this.entries.get(key);
      if (e && e.sig === sig) continue;
      const entry = e ?? { ref: p.ref, watched: false, sig, inflight: false, again: false };
      entry.sig = sig;
      this.entries.set(key, entry);
      this.load(key, entry);
    }
    if (dropped) this.opts.onChange();
  }

  /** Ask again for every run with a paused rank or an expanded node (the Refresh command). */
  refresh(): void {
    for (const [key, e] of this.entries) this.load(key, e);
  }

  /** A run's node was expanded: ask for it now, and keep it while it stays expanded. */
  expand(ref: RunRef): void {
    const key = runKey(ref.job, ref.run);
    let e = this.entries.get(key);
    if (!e) {
      e = { ref, watched: true, sig: "", inflight: false, again: false };
      this.entries.set(key, e);
    }
    e.watched = true;
    this.load(key, e);
  }

  /** A run's node was collapsed: forget it unless a rank of it is paused. */
  collapse(ref: RunRef): void {
    const key = runKey(ref.job, ref.run);
    const e = this.entries.get(key);
    if (!e) return;
    e.watched = false;
    if (e.sig === "") {
      this.entries.delete(key);
      if (e.data) this.opts.onChange();
    }
  }

  /** Runs whose node is expanded (the steps poller asks faster while there are some). */
  get watching(): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.watched) n++;
    return n;
  }

  get(key: string): RunStacks | undefined {
    return this.entries.get(key)?.data;
  }

  /** Every run with information, by runKey. */
  snapshot(): Map<string, RunStacks> {
    const out = new Map<string, RunStacks>();
    for (const [key, e] of this.entries) if (e.data) out.set(key, e.data);
    return out;
  }

  dispose(): void {
    this.disposed = true;
    this.entries.clear();
  }

  private load(key: string, e: Entry): void {
    if (e.inflight) {
      e.again = true;
      return;
    }
    e.inflight = true;
    e.again = false;
    this.opts.fetch(e.ref).then(
      (body) => {
        const parsed = parseRunStacks(body, e.ref.run, e.ref.job === "unknown" ? null : e.ref.job);
        this.settle(key, e, typeof parsed === "object" && parsed !== null ? parsed : undefined);
      },
      () => this.settle(key, e, undefined),
    );
  }

  private settle(key: string, e: Entry, data: RunStacks | undefined): void {
    e.inflight = false;
    // A run that left (or a disposed cache) takes no late answer.
    if (this.disposed || this.entries.get(key) !== e) return;
    const changed = JSON.stringify(e.data) !== JSON.stringify(data);
    e.data = data;
    if (e.again) this.load(key, e);
    if (changed) this.opts.onChange();
  }
}
