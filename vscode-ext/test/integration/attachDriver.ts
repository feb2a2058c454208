/**
 * Node half of tests/e2e/test_vscode_integration.py: the extension's own modules against a
 * real raydbg gateway. Lists sessions through ClusterController (the Ray view's model),
 * waits for a paused function, prepares the attach (config and inline adapter), tries an
 * adapter with a wrong token, and reports each step as one JSON line on stdout. Runs
 * until stdin closes.
 *
 * VS Code hands DAP messages to the inline adapter in-process; the Python DAP client
 * plays VS Code here, so this test scaffold carries its messages to the adapter over a
 * unix socket in a 0700 temp dir (the product itself opens nothing).
 *
 * env: RAYDBG_GATEWAY (host:port), RAYDBG_TOKEN, RAYDBG_FUNCTION, RAYDBG_WORKSPACE.
 */
import { mkdtempSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { prepareAttach } from "../../src/attach";
import { ClusterController } from "../../src/controller";
import { DapFrameReader, DapMessage, encodeDap } from "../../src/dapFraming";
import { DapRelay } from "../../src/dapRelay";
import { validateSettings } from "../../src/settings";
import { ViewItem } from "../../src/treeModel";
import { listeningSockets } from "../helpers/listeners";

function emit(event: string, body: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ event, ...body }) + "\n");
}

function need(name: string): string {
  const v = process.env[name];
  if (!v) {
    emit("fatal", { message: `${name} is not set` });
    process.exit(2);
  }
  return v;
}

function findSession(items: readonly ViewItem[], fn: string): ViewItem | undefined {
  for (const i of items) {
    if (i.session && i.session.function === fn && i.session.attachable) return i;
    const hit = findSession(i.children ?? [], fn);
    if (hit) return hit;
  }
  return undefined;
}

/** What VS Code does with an inline adapter, for one client on a unix socket: messages both ways. */
function bridge(relay: DapRelay, path: string, onMessage: (m: DapMessage) => void): net.Server {
  const server = net.createServer((sock) => {
    const frames = new DapFrameReader();
    relay.onDidSendMessage((m) => {
      onMessage(m);
      sock.write(encodeDap(m));
      if (m.type === "event" && m.event === "terminated") sock.end();
    });
    sock.on("data", (chunk: Buffer) => {
      for (const m of frames.push(chunk)) relay.handleMessage(m);
    });
    sock.on("close", () => relay.dispose());
  });
  server.listen(path);
  return server;
}

/** Send one request to a fresh adapter and collect everything until it ends the session. */
function tryOnce(relay: DapRelay): Promise<DapMessage[]> {
  const got: DapMessage[] = [];
  return new Promise((resolve) => {
    relay.onDidSendMessage((m) => {
      got.push(m);
      if (m.type === "event" && m.event === "terminated") resolve(got);
    });
    relay.handleMessage({ seq: 1, type: "request", command: "initialize", arguments: { clientID: "vscode", adapterID: "raydbg" } });
  });
}

async function main(): Promise<void> {
  const address = need("RAYDBG_GATEWAY");
  const token = need("RAYDBG_TOKEN");
  const fn = need("RAYDBG_FUNCTION");
  const workspace = process.env.RAYDBG_WORKSPACE ?? "/workspace";
  const deadline = setTimeout(() => {
    emit("fatal", { message: `no attachable session for ${fn} within 120 s` });
    process.exit(1);
  }, 120_000);

  let resolveListed: (item: ViewItem) => void = () => {};
  const listed = new Promise<ViewItem>((r) => (resolveListed = r));
  let modeLive = false;
  const controller = new ClusterController({
    resolveToken: () => Promise.resolve({ token, source: "env" }),
    onChange: () => {
      const item = findSession(controller.tree(), fn);
      const cluster = controller.tree().find((t) => t.label === "it");
      modeLive = Boolean(cluster?.description && !cluster.description.includes("(polling)"));
      if (item) resolveListed(item);
    },
  });
  const { settings, errors } = validateSettings({ clusters: [{ name: "it", address }], refreshInterval: 1 });
  controller.applySettings(settings, errors);

  const item = await listed;
  clearTimeout(deadline);
  const session = item.session;
  const client = controller.client("it");
  if (!session || !client) throw new Error("listed item lost its session or client");
  emit("listed", { label: item.label, description: item.description, tooltip: item.tooltip, contextValue: item.contextValue, live: modeLive, session });

  const relayErrors: Record<string, unknown>[] = [];
  const { config, relay } = prepareAttach({
    client,
    session,
    cluster: "it",
    pathMappings: controller.pathMappingsFor("it"),
    workspaceFolder: workspace,
    onError: (e) => relayErrors.push({ reason: e.reason, message: e.message }),
  });
  emit("prepared", { config });

  let badError: Record<string, unknown> | null = null;
  const bad = new DapRelay({ url: client.dapUrl(session.id), token: `${token}-wrong`, onError: (e) => (badError = { reason: e.reason, message: e.message }) });
  const badMessages = await tryOnce(bad);
  emit("badtoken", { error: badError, messages: badMessages });

  // While the client is attached, what this process listens on over TCP (none, if the product opens nothing).
  let tcpWhileAttached: string[] | null = null;
  const dir = mkdtempSync(join(tmpdir(), "raydbg-it-"));
  const server = bridge(relay, join(dir, "dap.sock"), (m) => {
    if (m.type === "event" && m.event === "stopped") tcpWhileAttached = listeningSockets().filter((l) => l.startsWith("tcp"));
  });
  emit("bridge", { path: join(dir, "dap.sock") });

  // The Python side drives the debugger; closing our stdin means "done".
  process.stdin.resume();
  await new Promise<void>((r) => process.stdin.once("end", r));
  relay.dispose();
  bad.dispose();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
  controller.dispose();
  emit("closed", { errors: relayErrors, tcpWhileAttached, relay: relay.status });
  // Everything is closed, so the process should end by itself. Once in CI (2026-12-02) it
  // did not within 30 s: name what still holds the event loop, then end.
  setTimeout(() => {
    process.stderr.write(`attachDriver: still alive 10 s after closing: ${JSON.stringify(process.getActiveResourcesInfo())}\n`);
    process.exit(0);
  }, 10_000).unref();
}

main().catch((e: unknown) => {
  emit("fatal", { message: e instanceof Error ? e.stack ?? e.message : String(e) });
  process.exit(1);
});
