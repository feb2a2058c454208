/**
 * vscode glue for the Ray commands: cluster management, refresh, attach (and the inline
 * debug adapter it runs through), launch snippet.
 *
 * Each handler gathers input from VS Code and hands the work to the plain modules.
 */
import * as vscode from "vscode";
import { adapterForConfig, AttachRegistry, prepareAttach } from "./attach";
import { ClusterController } from "./controller";
import { DEBUG_TYPE, launchSnippet } from "./launchConfig";
import { SessionRecord, sessionName } from "./records";
import { addressKey, checkClusterName, parseGatewayAddress } from "./settings";
import { addressOfSecret, secretKey } from "./tokenStore";
import { sessionDescription } from "./treeModel";

/** What the menus pass: a ViewItem, or the same shape from a notification button. */
export interface ItemArg {
  cluster?: string;
  session?: SessionRecord;
}

export interface CommandServices {
  context: vscode.ExtensionContext;
  controller: ClusterController;
  attached: AttachRegistry;
}

type ClusterList = Record<string, unknown>[];

function clusterList(v: unknown): ClusterList {
  return Array.isArray(v) ? v.filter((c): c is Record<string, unknown> => typeof c === "object" && c !== null) : [];
}

/** Edit raydbg.clusters in user settings, the only scope clusters are read from (settings.userClusters). */
async function editClusters(edit: (list: ClusterList) => ClusterList): Promise<void> {
  const cfg = vscode.workspace.getConfiguration("raydbg");
  const list = clusterList(cfg.inspect<unknown[]>("clusters")?.globalValue);
  await cfg.update("clusters", edit([...list]), vscode.ConfigurationTarget.Global);
}

export async function pickCluster(s: Pick<CommandServices, "controller">, arg: ItemArg | undefined, title: string): Promise<string | undefined> {
  if (arg?.cluster) return arg.cluster;
  const names = s.controller.current.clusters.map((c) => c.name);
  if (names.length === 0) {
    void vscode.window.showInformationMessage("Ray: no cluster is configured yet; run 'Ray: Add Cluster'.");
    return undefined;
  }
  return names.length === 1 ? names[0] : vscode.window.showQuickPick(names, { title });
}

async function addCluster(s: CommandServices): Promise<void> {
  const address = await vscode.window.showInputBox({
    title: "Ray: Add Cluster (1/3)",
    prompt: "raydbg gateway address (printed by `raydbg status`)",
    placeHolder: "head-node:8266 or https://gateway.example.com",
    ignoreFocusOut: true,
    validateInput: (v) => {
      const a = parseGatewayAddress(v);
      return typeof a === "string" ? a : undefined;
    },
  });
  if (!address) return;
  const taken = s.controller.current.clusters.map((c) => c.name);
  const suggested = new URL((parseGatewayAddress(address) as { httpBase: string }).httpBase).hostname;
  const name = await vscode.window.showInputBox({
    title: "Ray: Add Cluster (2/3)",
    prompt: "Name shown in the Ray view",
    value: taken.includes(suggested) ? "" : suggested,
    ignoreFocusOut: true,
    validateInput: (v) => checkClusterName(v, taken),
  });
  if (!name) return;
  const token = await vscode.window.showInputBox({
    title: "Ray: Add Cluster (3/3)",
    prompt: "Gateway token (kept in VS Code's secret storage, sent only to this address). Leave empty when this is the local Ray session's gateway.",
    password: true,
    ignoreFocusOut: true,
  });
  if (token === undefined) return;
  const key = secretKey(address);
  if (token.trim() && key) await s.context.secrets.store(key, token.trim());
  await editClusters((list) => [...list, { name: name.trim(), address: address.trim() }]);
}

async function removeCluster(s: CommandServices, arg?: ItemArg): Promise<void> {
  const name = await pickCluster(s, arg, "Ray: Remove Cluster");
  if (!name) return;
  const ok = await vscode.window.showWarningMessage(`Remove the Ray cluster "${name}" and its stored token?`, { modal: true }, "Remove");
  if (ok !== "Remove") return;
  const address = s.controller.cluster(name)?.address;
  await editClusters((list) => list.filter((c) => c.name !== name));
  // The token belongs to the address: keep it while another cluster entry still uses it.
  const key = address === undefined ? null : secretKey(address);
  const shared = s.controller.current.clusters.some((c) => c.name !== name && address !== undefined && addressKey(c.address) === addressKey(address));
  if (key && !shared) await s.context.secrets.delete(key);
}

async function renameCluster(s: CommandServices, arg?: ItemArg): Promise<void> {
  const name = await pickCluster(s, arg, "Ray: Rename Cluster");
  if (!name) return;
  const taken = s.controller.current.clusters.map((c) => c.name).filter((n) => n !== name);
  const next = await vscode.window.showInputBox({ title: `Rename "${name}"`, value: name, validateInput: (v) => checkClusterName(v, taken) });
  if (!next || next.trim() === name) return;
  const newName = next.trim();
  // Tokens are stored by gateway address, so a new name needs no secret moved.
  await editClusters((list) => list.map((c) => (c.name === name ? { ...c, name: newName } : c)));
}

async function setToken(s: CommandServices, arg?: ItemArg): Promise<void> {
  const name = await pickCluster(s, arg, "Ray: Set Cluster Token");
  if (!name) return;
  const cluster = s.controller.cluster(name);
  const key = cluster ? secretKey(cluster.address) : null;
  if (!cluster || !key) return;
  const token = await vscode.window.showInputBox({
    title: `Ray: token for "${name}" (${addressKey(cluster.address) ?? cluster.address})`,
    prompt: "Paste the gateway token. Leave empty to forget the stored one.",
    password: true,
    ignoreFocusOut: true,
  });
  if (token === undefined) return;
  if (token.trim()) await s.context.secrets.store(key, token.trim());
  else await s.context.secrets.delete(key);
  s.controller.restartAddress(addressOfSecret(key) ?? "");
}

const showRelayError = (e: Error) => void vscode.window.showErrorMessage(`Ray: ${e.message}`);

export async function attach(s: CommandServices, arg?: ItemArg): Promise<boolean> {
  const cluster = arg?.cluster;
  const picked = arg?.session;
  if (!cluster || !picked) return false;
  const session = s.controller.session(cluster, picked.id) ?? picked;
  const client = s.controller.client(cluster);
  if (!client) {
    void vscode.window.showErrorMessage(`Ray: cluster "${cluster}" is not connected; check its address and token.`);
    return false;
  }
  if (!session.attachable) {
    void vscode.window.showInformationMessage(`Ray: ${sessionName(session)} is still starting its debugger; try again in a moment.`);
    return false;
  }
  if (s.attached.has(session.id)) {
    void vscode.window.showInformationMessage(`Ray: ${sessionName(session)} is already attached.`);
    return false;
  }
  const folder = vscode.workspace.workspaceFolders?.[0];
  const prepared = prepareAttach({
    client,
    session,
    cluster,
    pathMappings: s.controller.pathMappingsFor(cluster),
    workspaceFolder: folder ? folder.uri.fsPath : null,
    onError: showRelayError,
  });
  // Kept until VS Code asks the adapter factory for it (inside startDebugging).
  s.attached.add(session.id, cluster, prepared.relay);
  let started = false;
  try {
    started = await vscode.debug.startDebugging(folder, prepared.config);
  } catch (e) {
    void vscode.window.showErrorMessage(`Ray: could not start debugging: ${(e as Error).message}`);
  }
  if (!started) s.attached.stop(session.id);
  return started;
}

/**
 * Debug sessions of type `raydbg` (Attach, or a launch.json) run an inline adapter that
 * relays DAP through the gateway: VS Code talks to it in-process, so no port is opened.
 */
function registerDebugAdapter(s: CommandServices): vscode.Disposable {
  return vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, {
    createDebugAdapterDescriptor: (ds) => {
      const relay = adapterForConfig(ds.configuration, { registry: s.attached, client: (c) => s.controller.client(c), onError: showRelayError });
      return new vscode.DebugAdapterInlineImplementation(relay);
    },
  });
}

async function copyLaunchConfig(s: CommandServices, arg?: ItemArg): Promise<void> {
  if (!arg?.cluster || !arg.session) return;
  const cluster = s.controller.cluster(arg.cluster);
  if (!cluster) return;
  const text = launchSnippet({ session: arg.session, cluster: cluster.name, pathMappings: s.controller.pathMappingsFor(cluster.name) });
  await vscode.env.clipboard.writeText(text);
  void vscode.window.showInformationMessage("Ray: launch.json snippet copied. It attaches through this extension (no local port); its session id lasts one pause.");
}

/** Notification for newly paused sessions, with an Attach button for a single one. */
export async function notifyPaused(s: CommandServices, cluster: string, sessions: SessionRecord[]): Promise<void> {
  if (!s.controller.current.notifyOnPause || sessions.length === 0) return;
  if (sessions.length === 1) {
    const one = sessions[0];
    const pick = await vscode.window.showInformationMessage(`Ray: ${sessionName(one)} paused (${sessionDescription(one)}) on ${cluster}.`, "Attach", "Show");
    if (pick === "Attach") await attach(s, { cluster, session: one });
    else if (pick === "Show") await vscode.commands.executeCommand("raydbg.sessions.focus");
    return;
  }
  const pick = await vscode.window.showInformationMessage(`Ray: ${sessions.length} tasks paused on ${cluster}.`, "Show");
  if (pick === "Show") await vscode.commands.executeCommand("raydbg.sessions.focus");
}

export function registerCommands(s: CommandServices): vscode.Disposable[] {
  const reg = (id: string, fn: (arg?: ItemArg) => Promise<unknown> | void) => vscode.commands.registerCommand(id, fn);
  return [
    reg("raydbg.addCluster", () => addCluster(s)),
    reg("raydbg.removeCluster", (a) => removeCluster(s, a)),
    reg("raydbg.renameCluster", (a) => renameCluster(s, a)),
    reg("raydbg.setToken", (a) => setToken(s, a)),
    reg("raydbg.refresh", (a) => s.controller.refresh(a?.cluster)),
    reg("raydbg.attach", (a) => attach(s, a)),
    reg("raydbg.copyLaunchConfig", (a) => copyLaunchConfig(s, a)),
    registerDebugAdapter(s),
  ];
}
