/**
 * The Ray view's content as plain data: clusters -> Train runs -> ranks (runNodes.ts), and
 * clusters -> jobs -> paused sessions for everything else.
 *
 * view.ts only turns these items into vscode.TreeItems, so everything a user reads
 * (labels, descriptions, tooltips, error items) is decided and tested here.
 */
import { BadRecord, SessionRecord } from "./records";
import { groupByRun, runItem } from "./runNodes";
import { runKey } from "./runStacks";
import { ClusterConfig } from "./settings";
import { RunStacks } from "./stacks";
import { RunSteps } from "./steps";
import { bySessionOrder, CTX, messageItem, sessionItem, ViewItem } from "./viewItems";

export { CTX, sessionDescription, sessionTooltip } from "./viewItems";
export type { PauseTarget, ViewItem } from "./viewItems";

export type ClusterState =
  | { kind: "loading" }
  | { kind: "ok"; sessions: SessionRecord[]; bad: BadRecord[]; live: boolean }
  | { kind: "error"; message: string; reason: "auth" | "unreachable" | "protocol" };

/** What the gateway said of a cluster's Train runs, by runKey: stacks (asked on expand) and steps. */
export interface RunInfo {
  stacks: ReadonlyMap<string, RunStacks>;
  steps: ReadonlyMap<string, RunSteps>;
}

const NO_RUN_INFO: RunInfo = { stacks: new Map(), steps: new Map() };

export function groupByJob(sessions: readonly SessionRecord[]): Map<string, SessionRecord[]> {
  const groups = new Map<string, SessionRecord[]>();
  for (const s of sessions) {
    const g = groups.get(s.job_id);
    if (g) g.push(s);
    else groups.set(s.job_id, [s]);
  }
  for (const g of groups.values()) g.sort(bySessionOrder);
  return groups;
}

function clusterChildren(c: ClusterConfig, state: ClusterState, now: number, info: RunInfo): ViewItem[] {
  const base = c.name;
  switch (state.kind) {
    case "loading":
      return [messageItem(`${base}/loading`, "Connecting…", `Contacting ${c.address}`, false, base)];
    case "error":
      return [messageItem(`${base}/error`, state.message, state.message, true, base)];
    case "ok": {
      const items: ViewItem[] = [];
      const { runs, rest } = groupByRun(state.sessions, info.steps);
      for (const g of runs) {
        const key = runKey(g.ref.job, g.ref.run);
        items.push(runItem(base, g, info.stacks.get(key), info.steps.get(key), now));
      }
      for (const [job, sessions] of groupByJob(rest)) {
        items.push({
          id: `${base}/job/${job}`,
          label: `Job ${job}`,
          description: `${sessions.length} paused`,
          tooltip: `Ray job ${job}: ${sessions.length} paused session${sessions.length === 1 ? "" : "s"}`,
          contextValue: CTX.job,
          icon: "layers",
          children: sessions.map((s) => sessionItem(base, s, now)),
          cluster: base,
        });
      }
      for (const b of state.bad) {
        items.push(messageItem(`${base}/bad/${b.index}`, `Unreadable session record #${b.index}`, b.error, true, base));
      }
      if (items.length === 0) items.push(messageItem(`${base}/empty`, "No paused sessions", "Nothing is paused on this cluster. Set RAY_DEBUG=1 and call breakpoint() in a task.", false, base));
      return items;
    }
  }
}

function clusterDescription(c: ClusterConfig, state: ClusterState): string {
  switch (state.kind) {
    case "loading":
      return c.address;
    case "error":
      return `${c.address} · ${state.reason === "auth" ? "token rejected" : state.reason === "unreachable" ? "unreachable" : "error"}`;
    case "ok":
      return `${c.address} · ${state.sessions.length} paused${state.live ? "" : " (polling)"}`;
  }
}

export function clusterItem(c: ClusterConfig, state: ClusterState, now: number = Date.now(), info: RunInfo = NO_RUN_INFO): ViewItem {
  return {
    id: `${c.name}`,
    label: c.name,
    description: clusterDescription(c, state),
    tooltip: `raydbg gateway ${c.address}`,
    contextValue: state.kind === "error" ? CTX.clusterError : CTX.cluster,
    icon: state.kind === "error" ? "debug-disconnect" : "server",
    children: clusterChildren(c, state, now, info),
    cluster: c.name,
  };
}

/** The whole view: one item per configured cluster, settings problems first. */
export function buildTree(
  clusters: readonly ClusterConfig[],
  states: ReadonlyMap<string, ClusterState>,
  settingsErrors: readonly string[] = [],
  now: number = Date.now(),
  /** Per cluster name: what the gateway said of its Train runs. */
  runs: ReadonlyMap<string, RunInfo> = new Map(),
): ViewItem[] {
  const items = settingsErrors.map((e, i) => messageItem(`settings/${i}`, `Settings: ${e}`, e, true));
  for (const c of clusters) items.push(clusterItem(c, states.get(c.name) ?? { kind: "loading" }, now, runs.get(c.name)));
  return items;
}

/** Total of paused sessions over clusters that answered (the status-bar count). */
export function pausedCount(states: Iterable<ClusterState>): number {
  let n = 0;
  for (const s of states) if (s.kind === "ok") n += s.sessions.length;
  return n;
}
