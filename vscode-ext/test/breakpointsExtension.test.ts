/**
 * The extension's armed breakpoints end to end, against a stubbed `vscode` and a real HTTP
 * gateway: the Arm command sends the gutter (lines 1-based, paths mapped), keeps it in
 * sync, shows it in the Ray view, and Disarm clears it; targets survive a reload.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { RaydbgApi } from "../src/extension";
import type { ViewItem } from "../src/treeModel";
import { FakeGateway, record, waitFor } from "./helpers/fakeGateway";
import { activateExtension } from "./helpers/activate";
import type { makeVscodeStub } from "./helpers/vscodeStub";

const WS = "/home/me/proj";
let gw: FakeGateway;
let stub: ReturnType<typeof makeVscodeStub>;
let api: RaydbgApi;

before(async () => {
  gw = await new FakeGateway({ breakpoints: true, sessions: [record({ id: "s1", job_id: "05000000", breakpoint_id: "bp-0009" })] }).listen();
  ({ stub, api } = await activateExtension({
    folder: WS,
    config: { "raydbg.clusters": [{ name: "local", address: gw.address }], "raydbg.refreshInterval": 1 },
    secrets: { [`raydbg.token@${gw.address}`]: "s3cret" },
  }));
});

after(async () => {
  for (const d of stub.context.subscriptions) await d.dispose();
  await gw.close();
});

function find(pred: (i: ViewItem) => boolean): ViewItem | undefined {
  let hit: ViewItem | undefined;
  const walk = (items: readonly ViewItem[]) => items.forEach((i) => (pred(i) && (hit ??= i), walk(i.children ?? [])));
  walk(api.provider.items);
  return hit;
}

const command = (id: string) => {
  const fn = stub.rec.commands.get(id);
  assert.ok(fn, id);
  return fn;
};

test("Arm for a job from the cluster's menu: the gutter goes to the gateway, kept in sync, shown in the view", async () => {
  await waitFor(() => api.controller.client("local") !== undefined && find((i) => i.session?.id === "s1") !== undefined, 5000, "cluster connected");
  // The paused session was stopped by an armed breakpoint: its node says so.
  assert.match(find((i) => i.session?.id === "s1")?.description ?? "", /bp-0009 \(armed\)/);
  stub.setBreakpoints([{ file: `${WS}/train.py`, line: 12, condition: "step == 3" }, { file: `${WS}/train.py`, line: 20, logMessage: "x" }]);
  // Quick pick answers its first item: "Every job". Lines arrive 1-based, the path relative to the worker's cwd.
  const ok = await command("raydbg.armBreakpoints")({ cluster: "local" });
  assert.equal(ok, true);
  const owner = api.breakpoints.arming.owner;
  assert.match(owner, /^vscode-[0-9a-f]{12}$/);
  assert.deepEqual(gw.puts.at(-1), { owner, job: null, body: { breakpoints: [{ file: "train.py", line: 12, condition: "step == 3" }] } });
  assert.ok(stub.rec.messages.some((m) => /every job on local: 1 breakpoint armed/.test(m.text)), JSON.stringify(stub.rec.messages));
  await waitFor(() => find((i) => i.id === "local/breakpoints/job/*")?.children?.length === 1, 5000, "armed node in the view");
  const jobNode = find((i) => i.id === "local/breakpoints/job/*") as ViewItem;
  assert.equal(jobNode.contextValue, "raydbg.breakpoints.job.armed");
  assert.equal(jobNode.children?.[0].label, "train.py:12");
  assert.deepEqual(stub.workspaceState.get("raydbg.armedTargets"), [{ cluster: "local", job: null }]);
  // A breakpoint added in the gutter is armed without a command.
  const before = gw.puts.length;
  stub.setBreakpoints([{ file: `${WS}/train.py`, line: 12, condition: "step == 3" }, { file: `${WS}/model.py`, line: 7 }]);
  await waitFor(() => gw.puts.length === before + 1, 3000, "sync PUT");
  assert.deepEqual((gw.puts.at(-1)?.body as { breakpoints: unknown[] }).breakpoints, [{ file: "train.py", line: 12, condition: "step == 3" }, { file: "model.py", line: 7 }]);
  await waitFor(() => find((i) => i.id === "local/breakpoints/job/*")?.children?.length === 2, 5000, "two in the view");
});

test("Disarm from the job node: the empty set, the node and the stored target gone", async () => {
  const jobNode = find((i) => i.id === "local/breakpoints/job/*") as ViewItem;
  assert.equal(await command("raydbg.disarmBreakpoints")(jobNode), true);
  assert.deepEqual(gw.puts.at(-1)?.body, { breakpoints: [] });
  assert.equal(gw.bps.length, 0);
  assert.deepEqual(stub.workspaceState.get("raydbg.armedTargets"), []);
  await waitFor(() => find((i) => i.id === "local/breakpoints") === undefined, 5000, "breakpoints node gone");
  // Nothing armed: Disarm says so.
  assert.equal(await command("raydbg.disarmBreakpoints")(), false);
  assert.match(stub.rec.messages.at(-1)?.text ?? "", /no breakpoints are armed/);
});

test("a gateway that refuses the set says why in one line, and the node shows it", async () => {
  gw.putError = { status: 400, error: "file must be a path" };
  try {
    assert.equal(await command("raydbg.armBreakpoints")({ armTarget: { cluster: "local", job: "05000000" } }), false);
    const err = stub.rec.messages.filter((m) => m.level === "error").at(-1);
    assert.match(err?.text ?? "", /^Ray: arming for job 05000000 on local failed: gateway .* answered HTTP 400: file must be a path$/);
    await waitFor(() => find((i) => i.id === "local/breakpoints/job/05000000/error") !== undefined, 5000, "error node");
  } finally {
    gw.putError = undefined;
  }
});
