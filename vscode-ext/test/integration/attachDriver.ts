/**
 * Node half of tests/test_vscode_integration.py: the extension's own modules against a
 * real raydbg gateway. Lists sessions through ClusterController (the Ray view's model),
 * waits for a paused function, starts the attach forwarder (and one with a wrong token),
 * and reports each step as one JSON line on stdout. Runs until stdin closes.
 *
 * env: RAYDBG_GATEWAY (host:port), RAYDBG_TOKEN, RAYDBG_FUNCTION, RAYDBG_WORKSPACE.
 */
import { prepareAttach } from "../../src/attach";
import { ClusterController } from "../../src/controller";
import { Forwarder } from "../../src/forwarder";
import { validateSettings } from "../../src/settings";
import { ViewItem } from "../../src/treeModel";

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

  const { config, forwarder } = await prepareAttach({
    client,
    session,
    pathMappings: controller.pathMappingsFor("it"),
    workspaceFolder: workspace,
    cluster: "it",
    onError: (e) => emit("error", { which: "attach", reason: e.reason, message: e.message }),
  });
  emit("forwarding", { port: forwarder.port, config });

  const bad = await Forwarder.start({
    url: client.dapUrl(session.id),
    token: `${token}-wrong`,
    onError: (e) => emit("error", { which: "badtoken", reason: e.reason, message: e.message }),
  });
  emit("badtoken", { port: bad.port });

  // The Python side drives the debugger; closing our stdin means "done".
  process.stdin.resume();
  await new Promise<void>((r) => process.stdin.once("end", r));
  await Promise.all([forwarder.close(), bad.close()]);
  controller.dispose();
  emit("closed", { connections: forwarder.connections });
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
