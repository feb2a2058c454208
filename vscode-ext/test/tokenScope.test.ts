/**
 * Issue 14, "VS Code tokens": the activated extension (stubbed `vscode`, real gateways)
 * sends each token only to the gateway it belongs to. A workspace's settings cannot
 * redirect a cluster, a token stored for one address never reaches another, and
 * RAYDBG_TOKEN / a tokenFile go nowhere they were not given to.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { RaydbgApi } from "../src/extension";
import type { ViewItem } from "../src/treeModel";
import { FakeGateway, record, waitFor } from "./helpers/fakeGateway";
import { installVscode, makeVscodeStub } from "./helpers/vscodeStub";

const TOKEN_A = "token-of-A";
const TOKEN_B = "token-of-B";
const ENV_TOKEN = "raydbg-env-token";
const FILE_TOKEN = "ray-token-from-a-file";

let a: FakeGateway;
let b: FakeGateway;
let attacker: FakeGateway;
let stub: ReturnType<typeof makeVscodeStub>;
let api: RaydbgApi;
let dir: string;
const savedEnv = process.env.RAYDBG_TOKEN;

before(async () => {
  // Set in VS Code's environment, as a user who also runs the CLI would have it.
  process.env.RAYDBG_TOKEN = ENV_TOKEN;
  dir = mkdtempSync(join(tmpdir(), "raydbg-tokscope-"));
  a = await new FakeGateway({ token: TOKEN_A, sessions: [record({ id: "on-a" })] }).listen();
  b = await new FakeGateway({ token: TOKEN_B, sessions: [record({ id: "on-b" })] }).listen();
  // Accepts any token, so any token that reaches it is visible in its request log.
  attacker = await new FakeGateway({ token: "whatever" }).listen();
  stub = makeVscodeStub({ config: { "raydbg.clusters": [{ name: "prod", address: a.address }], "raydbg.refreshInterval": 1 } });
  installVscode(stub.vscode);
  const ext = await import("../src/extension");
  api = ext.activate(stub.context as never);
});

after(async () => {
  for (const d of stub.context.subscriptions) await d.dispose();
  await Promise.all([a.close(), b.close(), attacker.close()]);
  rmSync(dir, { recursive: true, force: true });
  if (savedEnv === undefined) delete process.env.RAYDBG_TOKEN;
  else process.env.RAYDBG_TOKEN = savedEnv;
});

function cluster(name: string): ViewItem | undefined {
  return api.provider.items.find((i) => i.label === name);
}

function firstChild(name: string): string {
  return cluster(name)?.children?.[0]?.label ?? "";
}

/** Every Authorization header a gateway has been sent, HTTP and WebSocket. */
function bearers(gw: FakeGateway): string[] {
  return [...gw.requests, ...gw.upgrades].map((r) => r.headers.authorization ?? "(none)");
}

const settle = () => new Promise((r) => setTimeout(r, 400));

test("a token set for the cluster reaches its gateway", async () => {
  stub.rec.inputs.push(TOKEN_A);
  await stub.rec.commands.get("raydbg.setToken")?.({ cluster: "prod" });
  await waitFor(() => firstChild("prod") === "Job 01000000", 5000, "prod listed from A");
  assert.ok(bearers(a).includes(`Bearer ${TOKEN_A}`));
});

test("a workspace naming the cluster with its own address gets nothing", async () => {
  const rayTokenFile = join(dir, "auth_token");
  writeFileSync(rayTokenFile, FILE_TOKEN);
  stub.editSettings("workspace", "raydbg.clusters", [
    { name: "prod", address: attacker.address },
    { name: "helper", address: attacker.address, tokenFile: rayTokenFile, tokenFromEnv: true },
  ]);
  try {
    stub.rec.commands.get("raydbg.refresh")?.();
    await settle();
    assert.deepEqual(bearers(attacker), [], "the attacker's gateway was contacted");
    assert.ok(api.provider.items.some((i) => /workspace settings is ignored/.test(i.label)), "no note about the ignored workspace entries");
    // The user's cluster still points at A and still works.
    assert.equal(cluster("prod")?.description?.startsWith(a.address), true);
    assert.equal(firstChild("prod"), "Job 01000000");
    assert.equal(cluster("helper"), undefined);
  } finally {
    stub.editSettings("workspace", "raydbg.clusters", undefined);
  }
});

test("a token stored for address A is never sent to address B", async () => {
  // The user points the same cluster entry at another gateway.
  stub.editSettings("user", "raydbg.clusters", [{ name: "prod", address: b.address }]);
  await settle();
  assert.ok(!bearers(b).includes(`Bearer ${TOKEN_A}`), bearers(b).join(", "));
  await waitFor(() => /^prod: no token for 127\.0\.0\.1:\d+/.test(firstChild("prod")), 3000, "prod without a token on B");
  // B's own token, then back to A: each address keeps its own.
  stub.rec.inputs.push(TOKEN_B);
  await stub.rec.commands.get("raydbg.setToken")?.({ cluster: "prod" });
  await waitFor(() => firstChild("prod") === "Job 01000000", 5000, "prod listed from B");
  stub.editSettings("user", "raydbg.clusters", [{ name: "prod", address: a.address }]);
  await waitFor(() => cluster("prod")?.description?.startsWith(a.address) === true && firstChild("prod") === "Job 01000000", 5000, "back on A");
  assert.ok(!bearers(a).includes(`Bearer ${TOKEN_B}`), bearers(a).join(", "));
  assert.ok(!bearers(b).includes(`Bearer ${TOKEN_A}`), bearers(b).join(", "));
  assert.equal(stub.secrets.get(`raydbg.token@${a.address}`), TOKEN_A);
  assert.equal(stub.secrets.get(`raydbg.token@${b.address}`), TOKEN_B);
});

test("RAYDBG_TOKEN goes only to a user-settings cluster that opts in", async () => {
  stub.editSettings("user", "raydbg.clusters", [
    { name: "prod", address: a.address },
    { name: "other", address: attacker.address },
  ]);
  await settle();
  assert.deepEqual(bearers(attacker), []);
  await waitFor(() => /RAYDBG_TOKEN is set, but is only sent to clusters with "tokenFromEnv": true/.test(firstChild("other")), 3000, "no-token item");
  stub.editSettings("user", "raydbg.clusters", [
    { name: "prod", address: a.address },
    { name: "other", address: attacker.address, tokenFromEnv: true },
  ]);
  await waitFor(() => bearers(attacker).includes(`Bearer ${ENV_TOKEN}`), 3000, "opted-in cluster got RAYDBG_TOKEN");
  assert.ok(bearers(attacker).every((h) => h === `Bearer ${ENV_TOKEN}`), bearers(attacker).join(", "));
});
