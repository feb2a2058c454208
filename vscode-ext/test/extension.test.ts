/**
 * Activates the real extension against a stubbed `vscode` module and a real fake gateway:
 * the view, the commands, the status bar, and Attach -> startDebugging -> the inline
 * debug adapter relaying to the gateway (with no listening socket anywhere).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { RaydbgApi } from "../src/extension";
import type { ViewItem } from "../src/treeModel";
import type { DapMessage } from "../src/dapFraming";
import type { InlineDebugAdapter } from "../src/dapRelay";
import { activateExtension } from "./helpers/activate";
import { FakeGateway, fakeDebugpy, record, waitFor } from "./helpers/fakeGateway";
import { listeningSockets, newListeners } from "./helpers/listeners";
import { DebugAdapterInlineImplementation, type makeVscodeStub, type StartedSession } from "./helpers/vscodeStub";

interface PackageJson {
  activationEvents: string[];
  main: string;
  contributes: {
    commands: { command: string }[];
    views: Record<string, { id: string }[]>;
    viewsContainers: { activitybar: { id: string }[] };
    menus: Record<string, { command: string; when?: string }[]>;
    configuration: { properties: Record<string, unknown> };
    debuggers: { type: string; languages: string[]; configurationAttributes: { attach: { required: string[] } } }[];
  };
}
const pkg = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8")) as PackageJson;

let gw: FakeGateway;
let gw2: FakeGateway | undefined;
const gw2Address = () => gw2?.address ?? "(not started)";
let stub: ReturnType<typeof makeVscodeStub>;
let api: RaydbgApi;

before(async () => {
  gw = await new FakeGateway({ sessions: [record({ id: "s1", cwd: "/srv/job" })] }).listen();
  ({ stub, api } = await activateExtension({
    folder: "/home/me/proj",
    config: { "raydbg.clusters": [{ name: "local", address: gw.address }], "raydbg.refreshInterval": 1 },
    // A token stored by an earlier build (by cluster name): moved to the address on activation.
    secrets: { "raydbg.token.local": "s3cret" },
  }));
});

after(async () => {
  for (const d of stub.context.subscriptions) await d.dispose();
  await gw.close();
  await gw2?.close();
});

function sessionItems(): ViewItem[] {
  const out: ViewItem[] = [];
  const walk = (items: readonly ViewItem[]) => items.forEach((i) => (i.session && out.push(i), walk(i.children ?? [])));
  walk(api.provider.items);
  return out;
}

test("package.json: main is the compiled entry, view and container exist", () => {
  assert.equal(pkg.main, "./out/src/extension.js");
  assert.deepEqual(pkg.contributes.viewsContainers.activitybar.map((c) => c.id), ["raydbg"]);
  assert.deepEqual(pkg.contributes.views.raydbg.map((v) => v.id), ["raydbg.sessions"]);
  assert.ok(pkg.activationEvents.includes("onView:raydbg.sessions"));
  for (const k of ["raydbg.clusters", "raydbg.refreshInterval", "raydbg.pathMappings"]) assert.ok(k in pkg.contributes.configuration.properties, k);
  // Clusters decide where tokens go: VS Code must not take them from a workspace.
  assert.equal((pkg.contributes.configuration.properties["raydbg.clusters"] as { scope?: string }).scope, "application");
  // Attach is the extension's own debug type (VS Code refuses a type no extension declares).
  assert.deepEqual(pkg.contributes.debuggers.map((d) => [d.type, d.languages, d.configurationAttributes.attach.required]), [["raydbg", ["python"], ["raydbgCluster", "raydbgSessionId"]]]);
  assert.ok(pkg.activationEvents.includes("onDebugResolve:raydbg"));
});

test("activation registers the view and exactly the contributed commands", () => {
  assert.deepEqual(stub.rec.views.map((v) => v.id), ["raydbg.sessions"]);
  const contributed = pkg.contributes.commands.map((c) => c.command).sort();
  assert.deepEqual([...stub.rec.commands.keys()].sort(), contributed);
  // Every menu entry points at a contributed command.
  for (const entries of Object.values(pkg.contributes.menus)) for (const e of entries) assert.ok(contributed.includes(e.command), e.command);
});

test("a token stored by cluster name is moved to its address", async () => {
  await waitFor(() => sessionItems().length === 1, 5000, "session in the view");
  assert.equal(stub.secrets.get(`raydbg.token@${gw.address}`), "s3cret");
  assert.equal(stub.secrets.has("raydbg.token.local"), false);
});

test("menus match the contextValues the tree model gives items", async () => {
  await waitFor(() => sessionItems().length === 1, 5000, "session in the view");
  const item = api.provider.getTreeItem(sessionItems()[0]) as unknown as { contextValue: string; description: string; label: string };
  assert.equal(item.label, "train_step");
  assert.equal(item.description, "train.py:17 · breakpoint");
  const attachWhen = pkg.contributes.menus["view/item/context"].filter((m) => m.command === "raydbg.attach").map((m) => m.when ?? "");
  assert.ok(attachWhen.length > 0 && attachWhen.every((w) => w.includes(`viewItem == ${item.contextValue}`)), attachWhen.join(" | "));
  assert.deepEqual(stub.rec.statusBar, { text: "$(debug-pause) 1 paused", visible: true, command: "raydbg.sessions.focus" });
});

/** The inline adapter VS Code got for a started debug session (the stub asks the factory, as VS Code does). */
function inlineAdapter(started: StartedSession | undefined): InlineDebugAdapter {
  assert.ok(started?.descriptor instanceof DebugAdapterInlineImplementation, `no inline adapter: ${started?.factoryError ?? "no descriptor"}`);
  return started.descriptor.implementation as InlineDebugAdapter;
}

/** What VS Code sends first: initialize, then attach with the whole configuration as arguments. */
async function handshake(adapter: InlineDebugAdapter, config: Record<string, unknown>): Promise<DapMessage[]> {
  const got: DapMessage[] = [];
  adapter.onDidSendMessage((m) => got.push(m));
  adapter.handleMessage({ seq: 1, type: "request", command: "initialize", arguments: { clientID: "vscode", adapterID: "raydbg" } });
  adapter.handleMessage({ seq: 2, type: "request", command: "attach", arguments: { ...config, __sessionId: "ds-1" } });
  await waitFor(() => got.length === 3, 3000, "initialize and attach answered, initialized sent");
  return got;
}

test("Attach: a raydbg debug session whose inline adapter relays DAP through the gateway; nothing listens", async () => {
  await waitFor(() => sessionItems().length === 1, 5000, "session in the view");
  const debugpy: DapMessage[] = [];
  let relayClosed: number | undefined;
  gw.onRelay = (ws) => {
    fakeDebugpy(debugpy)(ws);
    ws.on("close", (code: number) => (relayClosed = code));
  };
  const listening = listeningSockets();
  const ok = await stub.rec.commands.get("raydbg.attach")?.(sessionItems()[0]);
  assert.equal(ok, true);
  assert.deepEqual(newListeners(listening), [], "Attach opened a listening socket");
  const started = stub.rec.started.at(-1);
  assert.deepEqual(started?.folder, { uri: { fsPath: "/home/me/proj" }, name: "ws", index: 0 });
  const config = started?.config ?? {};
  assert.deepEqual(config, {
    type: "raydbg",
    request: "attach",
    name: "Ray: train_step (s1)",
    pathMappings: [{ localRoot: "/home/me/proj", remoteRoot: "/srv/job" }],
    justMyCode: false,
    raydbgSessionId: "s1",
    raydbgCluster: "local",
  });
  const got = await handshake(inlineAdapter(started), config);
  assert.deepEqual(got.map((m) => [m.type, m.command ?? m.event, m.success]), [
    ["response", "initialize", true],
    ["response", "attach", true],
    ["event", "initialized", undefined],
  ]);
  // debugpy got the attach arguments exactly as VS Code sent them, over s1's relay with the cluster's token.
  assert.deepEqual(debugpy[1].arguments, { ...config, __sessionId: "ds-1" });
  assert.equal(gw.upgrades.at(-1)?.url, "/api/v1/sessions/s1/dap");
  assert.equal(gw.upgrades.at(-1)?.headers.authorization, "Bearer s3cret");
  assert.deepEqual(newListeners(listening), [], "something listens while attached");
  // A second Attach of the same session is refused while the first is alive.
  assert.equal(await stub.rec.commands.get("raydbg.attach")?.(sessionItems()[0]), false);
  // Ending the debug session closes the relay, so the gateway detaches from the worker.
  stub.endDebugSession(started);
  await waitFor(() => api.attached.size === 0, 3000, "relay released");
  await waitFor(() => relayClosed === 1000, 3000, "relay closed normally");
});

test("a launch.json configuration of type raydbg runs the same adapter; a bad one is refused in one line", async () => {
  const debugpy: DapMessage[] = [];
  gw.onRelay = fakeDebugpy(debugpy);
  const text = await (async () => {
    await stub.rec.commands.get("raydbg.copyLaunchConfig")?.(sessionItems()[0]);
    return stub.rec.clipboard.at(-1) ?? "";
  })();
  // The snippet as a user pastes it: VS Code resolves ${workspaceFolder}, then starts it.
  const config = JSON.parse(text.split("\n").slice(1).join("\n").split("${workspaceFolder}").join("/home/me/proj")) as Record<string, unknown>;
  assert.equal(await stub.vscode.debug.startDebugging(undefined, config), true);
  const started = stub.rec.started.at(-1);
  await handshake(inlineAdapter(started), config);
  assert.deepEqual(debugpy[1].arguments, { ...config, __sessionId: "ds-1" });
  assert.equal(gw.upgrades.at(-1)?.url, "/api/v1/sessions/s1/dap");
  assert.ok(api.attached.has("s1"));
  stub.endDebugSession(started as StartedSession);
  await waitFor(() => api.attached.size === 0, 3000, "relay released");

  const refused = async (over: Record<string, unknown>) => {
    assert.equal(await stub.vscode.debug.startDebugging(undefined, { ...config, ...over }), false);
    return stub.rec.started.at(-1)?.factoryError ?? "";
  };
  assert.equal(await refused({ raydbgCluster: "nope" }), `cluster "nope" is not configured or not connected; check raydbg.clusters (user settings) and its token`);
  assert.match(await refused({ raydbgSessionId: ".." }), /^a raydbg attach configuration needs "raydbgSessionId", a paused session's id .*; got "\.\."$/);
  assert.match(await refused({ raydbgCluster: undefined }), /^a raydbg attach configuration needs "raydbgCluster"/);
  assert.equal(api.attached.size, 0);
});

test("a new pause shows a notification with an Attach button", async () => {
  gw.setSessions([record({ id: "s1", cwd: "/srv/job" }), record({ id: "s2", task_name: "load_batch", line: 99 })]);
  await waitFor(() => stub.rec.messages.some((m) => m.text.includes("load_batch")), 5000, "notification");
  const m = stub.rec.messages.find((x) => x.text.includes("load_batch"));
  assert.equal(m?.text, `Ray: load_batch paused (train.py:99 · breakpoint) on local.`);
  assert.deepEqual(m?.items, ["Attach", "Show"]);
  assert.equal(stub.rec.statusBar.text, "$(debug-pause) 2 paused");
});

test("Copy launch.json snippet puts the extension's own attach config on the clipboard", async () => {
  await stub.rec.commands.get("raydbg.copyLaunchConfig")?.(sessionItems()[0]);
  const [first, ...rest] = (stub.rec.clipboard.at(-1) ?? "").split("\n");
  assert.match(first, /^\/\/ Ray attach, no local port/);
  const cfg = JSON.parse(rest.join("\n")) as Record<string, unknown>;
  assert.deepEqual([cfg.type, cfg.request, cfg.raydbgCluster, cfg.raydbgSessionId], ["raydbg", "attach", "local", "s1"]);
});

test("Add Cluster stores the token for its address and the cluster in user settings; a wrong token shows in the view", async () => {
  gw2 = await new FakeGateway({ token: "other-secret", sessions: [record({ id: "o1" })] }).listen();
  stub.rec.inputs.push(gw2.address, "other", "wrong-token");
  await stub.rec.commands.get("raydbg.addCluster")?.();
  assert.equal(stub.secrets.get(`raydbg.token@${gw2.address}`), "wrong-token");
  assert.equal(stub.secrets.get(`raydbg.token@${gw.address}`), "s3cret", "the first cluster's token is untouched");
  assert.deepEqual(stub.rec.configUpdates.at(-1), {
    key: "raydbg.clusters",
    value: [{ name: "local", address: gw.address }, { name: "other", address: gw2.address }],
    target: 1,
  });
  await waitFor(() => /rejected the token/.test(api.provider.items.find((i) => i.label === "other")?.children?.[0]?.label ?? ""), 5000, "auth error item");
  // Fixing the token reconnects that cluster.
  stub.rec.inputs.push("other-secret");
  await stub.rec.commands.get("raydbg.setToken")?.({ cluster: "other" });
  await waitFor(() => api.provider.items.find((i) => i.label === "other")?.children?.[0]?.label === "Job 01000000", 5000, "reconnected with the right token");
});

test("Rename keeps the address's token; Remove deletes it", async () => {
  stub.rec.inputs.push("renamed");
  await stub.rec.commands.get("raydbg.renameCluster")?.({ cluster: "other" });
  assert.equal(stub.secrets.get(`raydbg.token@${gw2Address()}`), "other-secret");
  assert.deepEqual((stub.config["raydbg.clusters"] as { name: string }[]).map((c) => c.name), ["local", "renamed"]);
  await waitFor(() => api.provider.items.find((i) => i.label === "renamed")?.children?.[0]?.label === "Job 01000000", 5000, "renamed cluster connected");
  // Remove asks for confirmation; the stub answers the modal with "Remove".
  const win = stub.vscode.window as unknown as { showWarningMessage: (...a: unknown[]) => Promise<unknown> };
  const orig = win.showWarningMessage;
  win.showWarningMessage = () => Promise.resolve("Remove");
  try {
    await stub.rec.commands.get("raydbg.removeCluster")?.({ cluster: "renamed" });
  } finally {
    win.showWarningMessage = orig;
  }
  assert.deepEqual((stub.config["raydbg.clusters"] as { name: string }[]).map((c) => c.name), ["local"]);
  assert.equal(stub.secrets.has(`raydbg.token@${gw2Address()}`), false);
  assert.equal(stub.secrets.get(`raydbg.token@${gw.address}`), "s3cret");
  assert.deepEqual(api.provider.items.map((i) => i.label), ["local"]);
});

test("a Train run is one node with its ranks; expanding it asks the gateway again for held ranks", async () => {
  gw.stacks = {
    classes: [{ id: "c1", summary: "all_reduce <- train_step train_loop.py:104" }],
    runs: [{ run: "r", job_id: "03000000", world_size: 2, held_by: [0], ranks: [{ world_rank: 0, state: "paused" }, { world_rank: 1, state: "held", class_id: "c1" }] }],
  };
  gw.setSessions([record({ id: "t0", job_id: "03000000", train_run: "r", train_rank: 0, train_world_size: 2 })]);
  const runNode = () => api.provider.items.find((i) => i.label === "local")?.children?.find((i) => i.run);
  await waitFor(() => runNode()?.children?.length === 2, 5000, "run node with the held rank");
  const run = runNode();
  assert.ok(run?.children);
  assert.deepEqual(run.children.map((i) => i.label), ["rank 0", "rank 1 — held by rank 0: all_reduce <- train_step train_loop.py:104"]);
  const tree = api.provider.getTreeItem(run) as unknown as { label: string; collapsibleState: number; contextValue: string };
  assert.deepEqual([tree.label, tree.collapsibleState, tree.contextValue], ["run r (1/2 ranks paused)", 2, "raydbg.run"]);
  // The rank's item is the paused session: the Attach menu applies to it.
  assert.equal((api.provider.getTreeItem(run.children[0]) as unknown as { contextValue: string }).contextValue, "raydbg.session.attachable");
  const asked = () => gw.requests.filter((r) => r.url.startsWith("/api/v1/stacks")).length;
  const before = asked();
  stub.expanded.fire({ element: run });
  await waitFor(() => asked() === before + 1, 3000, "stacks asked on expand");
});
