/**
 * Extension entry point: wires settings, SecretStorage, the Ray view, the status bar and
 * debug-session lifetimes to the plain modules.
 */
import * as vscode from "vscode";
import { AttachRegistry } from "./attach";
import { BreakpointGlue, setupBreakpoints } from "./breakpointCommands";
import { CommandServices, notifyPaused, registerCommands } from "./commands";
import { ClusterController } from "./controller";
import { PauseGlue, setupPause } from "./pauseCommands";
import { readLocalGateway } from "./localGateway";
import { addressKey, userClusters, validateSettings } from "./settings";
import { resolveToken } from "./token";
import { addressOfSecret, migrateLegacySecrets, secretKey } from "./tokenStore";
import { RayTreeProvider } from "./view";

export const VIEW_ID = "raydbg.sessions";

/** Returned from activate() so tests (and other extensions) can reach the model. */
export interface RaydbgApi {
  controller: ClusterController;
  provider: RayTreeProvider;
  attached: AttachRegistry;
  breakpoints: BreakpointGlue;
  pause: PauseGlue;
}

function readSettings() {
  const cfg = vscode.workspace.getConfiguration("raydbg");
  // Clusters from user settings only, whatever the workspace says (issue 14).
  const { clusters, notes } = userClusters(cfg.inspect("clusters"));
  const { settings, errors } = validateSettings({
    clusters,
    refreshInterval: cfg.get("refreshInterval"),
    pathMappings: cfg.get("pathMappings"),
    notifyOnPause: cfg.get("notifyOnPause"),
  });
  return { settings, errors: [...notes, ...errors] };
}

export function activate(context: vscode.ExtensionContext): RaydbgApi {
  const attached = new AttachRegistry();
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  status.command = `${VIEW_ID}.focus`;
  const provider = new RayTreeProvider(() => breakpoints.tree(controller.tree()));
  const initial = readSettings();
  const migrated = migrateLegacySecrets(context.secrets, initial.settings.clusters).catch(() => 0);
  const controller = new ClusterController({
    resolveToken: async (c) => {
      await migrated;
      const key = secretKey(c.address);
      return resolveToken({
        address: addressKey(c.address),
        secret: key === null ? undefined : await context.secrets.get(key),
        tokenFile: c.tokenFile,
        tokenFromEnv: c.tokenFromEnv,
        localGateway: await readLocalGateway(),
      });
    },
    onChange: () => {
      breakpoints.controllerChanged();
      pause.controllerChanged();
      provider.update();
      const n = controller.pausedCount();
      status.text = `$(debug-pause) ${n} paused`;
      status.tooltip = `Ray: ${n} paused task${n === 1 ? "" : "s"}; click to show`;
      if (n > 0) status.show();
      else status.hide();
    },
    // Pauses this window asked for attach on their own: no "paused" notification for them.
    onNewSessions: (cluster, sessions) => void notifyPaused(services, cluster, sessions.filter((r) => !attached.has(r.id) && !pause.pending.ours(cluster, r))),
  });
  const services: CommandServices = { context, controller, attached };
  // After the controller: its first onChange (applySettings below) finds the glue ready.
  const breakpoints: BreakpointGlue = setupBreakpoints(context, controller, () => provider.update());
  const pause: PauseGlue = setupPause(services);

  const view = vscode.window.createTreeView(VIEW_ID, { treeDataProvider: provider, showCollapseAll: true });
  controller.setVisible(view.visible);
  controller.applySettings(initial.settings, initial.errors);

  context.subscriptions.push(
    view,
    status,
    provider,
    view.onDidChangeVisibility((e) => {
      controller.setVisible(e.visible);
      breakpoints.lists.setVisible(e.visible);
    }),
    view.onDidExpandElement((e) => {
      const { run, cluster } = e.element;
      if (run && cluster) controller.expandRun(cluster, run);
    }),
    view.onDidCollapseElement((e) => {
      const { run, cluster } = e.element;
      if (run && cluster) controller.collapseRun(cluster, run);
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration("raydbg")) return;
      const next = readSettings();
      controller.applySettings(next.settings, next.errors);
    }),
    context.secrets.onDidChange((e) => {
      // Another window (or the Set Token command) changed a token: reconnect its clusters.
      const address = addressOfSecret(e.key);
      if (address !== null) controller.restartAddress(address);
    }),
    vscode.debug.onDidTerminateDebugSession((ds) => {
      const id: unknown = ds.configuration.raydbgSessionId;
      if (typeof id === "string") attached.stop(id);
    }),
    ...registerCommands(services),
    ...breakpoints.disposables,
    ...pause.disposables,
    { dispose: () => controller.dispose() },
    { dispose: () => attached.stopAll() },
  );
  return { controller, provider, attached, breakpoints, pause };
}

export function deactivate(): void {
  // Everything is in context.subscriptions.
}
