/**
 * vscode glue for armed breakpoints: reads the gutter, registers Arm / Disarm, follows
 * breakpoint changes, and keeps the armed targets in the workspace's state.
 *
 * The work is done by arming.ts (sync, lists) and breakpointTree.ts (view nodes).
 */
import * as vscode from "vscode";
import { ArmedLists, BreakpointArming } from "./arming";
import { ArmTarget, EditorBreakpoint, jobLabel, ownerFor, specsFor } from "./breakpoints";
import { breakpointsNode, withBreakpoints } from "./breakpointTree";
import { pickCluster } from "./commands";
import { ClusterController } from "./controller";
import { GatewayClient } from "./gatewayClient";
import { ViewItem } from "./treeModel";

const STATE_KEY = "raydbg.armedTargets";

/** The gutter's source breakpoints in files on disk (function breakpoints have no location). */
export function editorBreakpoints(): EditorBreakpoint[] {
  const out: EditorBreakpoint[] = [];
  for (const b of vscode.debug.breakpoints) {
    const loc = (b as Partial<vscode.SourceBreakpoint>).location;
    if (!loc || loc.uri.scheme !== "file") continue;
    out.push({ file: loc.uri.fsPath, line: loc.range.start.line + 1, enabled: b.enabled, condition: b.condition, hitCondition: b.hitCondition, logMessage: b.logMessage });
  }
  return out;
}

function isTarget(v: unknown): v is ArmTarget {
  const t = v as ArmTarget;
  return typeof v === "object" && v !== null && typeof t.cluster === "string" && (t.job === null || typeof t.job === "string");
}

export interface BreakpointGlue {
  arming: BreakpointArming;
  lists: ArmedLists;
  /** The controller's tree with each cluster's armed breakpoints. */
  tree(items: ViewItem[]): ViewItem[];
  /** Call on every controller change: sends targets of clusters that (re)connected. */
  controllerChanged(): void;
  disposables: vscode.Disposable[];
}

export function setupBreakpoints(context: vscode.ExtensionContext, controller: ClusterController, redraw: () => void): BreakpointGlue {
  const folder = () => vscode.workspace.workspaceFolders?.[0];
  const workspaceKey = vscode.workspace.workspaceFile?.toString() ?? folder()?.uri.fsPath ?? "no-folder";
  const owner = ownerFor(vscode.env.machineId ?? "", workspaceKey);
  const stored = context.workspaceState?.get<unknown[]>(STATE_KEY) ?? [];
  const arming = new BreakpointArming(
    {
      owner,
      client: (c) => controller.client(c),
      specs: (c) => specsFor(editorBreakpoints(), controller.pathMappingsFor(c), folder()?.uri.fsPath ?? null),
      onChange: redraw,
      onError: (t, msg) => void vscode.window.showWarningMessage(`Ray: breakpoints for ${jobLabel(t.job)} on ${t.cluster}: ${msg}`),
      save: (targets) => void context.workspaceState?.update(STATE_KEY, targets),
    },
    Array.isArray(stored) ? stored.filter(isTarget) : [],
  );
  const lists = new ArmedLists({
    clusters: () => controller.current.clusters.map((c) => c.name),
    client: (c) => controller.client(c),
    intervalMs: () => controller.current.refreshIntervalMs,
    onChange: redraw,
  });
  const clients = new Map<string, GatewayClient>();
  const paused = new Map<string, string>();
  const controllerChanged = () => {
    const names = controller.current.clusters.map((c) => c.name);
    arming.keepClusters(names);
    for (const name of names) {
      const client = controller.client(name);
      // A session that paused or resumed moves a breakpoint's paused count: ask now, not at the next poll.
      const sig = controller.sessions(name).map((r) => r.id).sort().join(",");
      const moved = paused.get(name) !== sig;
      paused.set(name, sig);
      if (client && clients.get(name) !== client) {
        clients.set(name, client);
        arming.clusterReady(name);
        void lists.refresh(name);
      } else if (client && moved) void lists.refresh(name);
    }
  };
  const s = { controller, arming, lists };
  const disposables = [
    vscode.debug.onDidChangeBreakpoints(() => arming.editorChanged()),
    vscode.commands.registerCommand("raydbg.armBreakpoints", (a?: ViewItem) => armCommand(s, a)),
    vscode.commands.registerCommand("raydbg.disarmBreakpoints", (a?: ViewItem) => disarmCommand(s, a)),
    { dispose: () => arming.dispose() },
    { dispose: () => lists.dispose() },
  ];
  lists.start();
  return {
    arming,
    lists,
    tree: (items) => withBreakpoints(items, (c) => breakpointsNode(c, lists.get(c), arming.targets(c), owner)),
    controllerChanged,
    disposables,
  };
}

interface Services {
  controller: ClusterController;
  arming: BreakpointArming;
  lists: ArmedLists;
}

/** `other`: ask for a job id. */
type JobPick = vscode.QuickPickItem & { job: string | null; other?: true };

async function pickJob(s: Services, cluster: string): Promise<string | null | undefined> {
  const jobs = new Set<string>();
  for (const rec of s.controller.sessions(cluster)) if (rec.job_id !== "unknown") jobs.add(rec.job_id);
  const list = s.lists.get(cluster);
  if (list?.kind === "ok") for (const b of list.breakpoints) if (b.job !== null) jobs.add(b.job);
  const items: JobPick[] = [
    { label: "Every job", description: "every raydbg-activated job on the cluster, including later ones", job: null },
    ...[...jobs].sort().map((j) => ({ label: `Job ${j}`, description: s.arming.isArmed({ cluster, job: j }) ? "armed" : "", job: j })),
    { label: "Another job id…", description: "e.g. a job not started yet", job: null, other: true },
  ];
  const picked = await vscode.window.showQuickPick(items, { title: `Ray: arm breakpoints on ${cluster} for…` });
  if (!picked) return undefined;
  if (!picked.other) return picked.job;
  const typed = await vscode.window.showInputBox({
    title: "Ray: job id",
    prompt: "The Ray job id (`ray job list`, or the job column of `raydbg list`)",
    validateInput: (v) => (/^[0-9a-zA-Z_.-]{1,128}$/.test(v.trim()) ? undefined : "a job id is letters, digits, _ . -"),
  });
  return typed?.trim() || undefined;
}

async function armCommand(s: Services, arg?: ViewItem): Promise<boolean> {
  let target = arg?.armTarget;
  if (!target) {
    const cluster = await pickCluster(s, arg, "Ray: Arm Breakpoints — cluster");
    if (!cluster) return false;
    const job = await pickJob(s, cluster);
    if (job === undefined) return false;
    target = { cluster, job };
  }
  try {
    const st = await s.arming.arm(target);
    void s.lists.refresh(target.cluster);
    const n = st.armed;
    const what = n === 0 ? "No breakpoints in the editor yet: the ones you set" : `${n} breakpoint${n === 1 ? "" : "s"} armed; the ones you add or remove`;
    void vscode.window.showInformationMessage(`Ray: ${jobLabel(target.job)} on ${target.cluster}: ${what} are kept in sync.`);
    return true;
  } catch (e) {
    void vscode.window.showErrorMessage(`Ray: arming for ${jobLabel(target.job)} on ${target.cluster} failed: ${(e as Error).message}`);
    return false;
  }
}

async function disarmCommand(s: Services, arg?: ViewItem): Promise<boolean> {
  let target = arg?.armTarget;
  if (!target) {
    const armed = s.arming.targets().map((t) => ({ label: `${jobLabel(t.target.job)} on ${t.target.cluster}`, target: t.target }));
    if (armed.length === 0) {
      void vscode.window.showInformationMessage("Ray: no breakpoints are armed from this workspace.");
      return false;
    }
    const picked = armed.length === 1 ? armed[0] : await vscode.window.showQuickPick(armed, { title: "Ray: Disarm Breakpoints" });
    if (!picked) return false;
    target = picked.target;
  }
  try {
    await s.arming.disarm(target);
    void s.lists.refresh(target.cluster);
    void vscode.window.showInformationMessage(`Ray: this workspace's breakpoints for ${jobLabel(target.job)} on ${target.cluster} are disarmed.`);
    return true;
  } catch (e) {
    void vscode.window.showErrorMessage(`Ray: ${(e as Error).message}`);
    return false;
  }
}
