/**
 * Pause and attach in the whole extension (stubbed vscode, a real fake gateway): a running
 * Train run in the view, expanded for its ranks, a rank paused and attached, a snapshot
 * shown and attached once back in Python, the gateway's refusal in a notification; and
 * package.json's contributions matching the items' contextValues.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { RaydbgApi } from "../src/extension";
import { CTX, ViewItem } from "../src/treeModel";
import { activateExtension } from "./helpers/activate";
import { FakeGateway, record, waitFor } from "./helpers/fakeGateway";
import type { makeVscodeStub } from "./helpers/vscodeStub";

interface Menu {
  command: string;
  when?: string;
  group?: string;
}
const pkg = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8")) as { contributes: { commands: { command: string }[]; menus: Record<string, Menu[]> } };

const JOB = "02000000";
const NODE = "n".repeat(56);
const steps = {
  runs: [{ job_id: JOB, train_run: "sd-train", factor: 1.5, steps: 8, stragglers: [], ranks: [0, 1, 2, 3].map((r) => ({ world_rank: r, node_id: NODE, pid: 100 + r, step: 9, busy_median_s: 0.5, wait_median_s: 0.1, last_progress_s: 0.3, straggler: false })) }],
  errors: [],
};
const stacks = {
  classes: [{ id: "c", summary: "all_reduce <- train_step train_loop.py:104" }],
  runs: [{ run: "sd-train", job_id: JOB, world_size: 4, held_by: [], waiting: [0, 1, 2, 3], culprits: [], ranks: [0, 1, 2, 3].map((r) => ({ world_rank: r, node_id: NODE, pid: 100 + r, state: "running", class_id: "c", collectives: { default_pg: { started: { seq: 5, op: "all_reduce" }, completed: { seq: 4 } } } })) }],
};
const paused = (rank: number, over: Record<string, unknown> = {}) =>
  record({ id: `p${rank}`, job_id: JOB, node_id: NODE, pid: 100 + rank, train_run: "sd-train", train_rank: rank, train_world_size: 4, reason: "pause", ...over });
const frames = [{ function: "all_reduce", file: "/venv/torch/distributed/distributed_c10d.py", line: 2501, locals: { tensor: "tensor([1.])" } }];

let gw: FakeGateway;
let stub: ReturnType<typeof makeVscodeStub>;
let api: RaydbgApi;
/** What the gateway does with the next pause: it lists the session (setSessions) and then answers. */
let nextAnswer: () => [number, unknown] = () => [500, { error: "not set" }];

before(async () => {
  gw = await new FakeGateway({ sessions: [], steps, stacks, pause: () => nextAnswer() }).listen();
  ({ stub, api } = await activateExtension({ folder: "/home/me/proj", config: { "raydbg.clusters": [{ name: "local", address: gw.address }], "raydbg.refreshInterval": 1 }, secrets: { [`raydbg.token@${gw.address}`]: "s3cret" } }));
});

after(async () => {
  for (const d of stub.context.subscriptions) await d.dispose();
  await gw.close();
});

const runNode = () => api.provider.items.find((i) => i.label === "local")?.children?.find((i) => i.run);
const rankItem = (r: number) => runNode()?.children?.find((i) => i.label.startsWith(`rank ${r}`));
const command = (id: string) => {
  const fn = stub.rec.commands.get(id);
  assert.ok(fn, `${id} is registered`);
  return fn;
};

/** Does a menu's `viewItem` clause (== or =~ /re/) take this contextValue? */
function menuTakes(when: string, contextValue: string): boolean {
  const eq = /viewItem == (\S+)/.exec(when);
  if (eq) return eq[1] === contextValue;
  const re = /viewItem =~ \/(.+)\/(?:\s|$)/.exec(when);
  return re ? new RegExp(re[1]).test(contextValue) : false;
}

test("package.json: Pause and Attach on running and held ranks only; Show Snapshot on snapshots; both off the palette", () => {
  const cmds = pkg.contributes.commands.map((c) => c.command);
  assert.ok(cmds.includes("raydbg.pauseAndAttach") && cmds.includes("raydbg.showSnapshot"));
  const item = pkg.contributes.menus["view/item/context"];
  const pauseWhen = item.filter((m) => m.command === "raydbg.pauseAndAttach").map((m) => m.when ?? "");
  assert.ok(pauseWhen.length >= 1);
  for (const w of pauseWhen) {
    assert.ok(w.includes("view == raydbg.sessions"), w);
    for (const ctx of [CTX.running, CTX.held]) assert.equal(menuTakes(w, ctx), true, `${w} takes ${ctx}`);
    for (const ctx of [CTX.rank, CTX.run, CTX.attachable, CTX.starting, CTX.snapshot, CTX.cluster, `${CTX.running}x`]) assert.equal(menuTakes(w, ctx), false, `${w} takes ${ctx}`);
  }
  const snapWhen = item.filter((m) => m.command === "raydbg.showSnapshot").map((m) => m.when ?? "");
  assert.ok(snapWhen.length >= 1 && snapWhen.every((w) => menuTakes(w, CTX.snapshot) && !menuTakes(w, CTX.starting)), snapWhen.join(" | "));
  const palette = pkg.contributes.menus.commandPalette.filter((m) => m.command === "raydbg.pauseAndAttach" || m.command === "raydbg.showSnapshot");
  assert.deepEqual(palette.map((m) => m.when), ["false", "false"]);
});

test("a running Train run shows collapsed; expanding it asks for its stacks and shows each rank's state and collective", async () => {
  await waitFor(() => runNode() !== undefined, 5000, "running run from steps");
  const run = runNode() as ViewItem;
  const tree = api.provider.getTreeItem(run) as unknown as { label: string; collapsibleState: number };
  assert.deepEqual([tree.label, tree.collapsibleState], ["run sd-train (running, 4 ranks)", 1]);
  assert.equal(gw.requests.filter((r) => r.url.startsWith("/api/v1/stacks")).length, 0, "no stacks before expand");
  stub.expanded.fire({ element: run });
  await waitFor(() => rankItem(2)?.description?.startsWith("in collective") === true, 5000, "ranks with their stacks");
  assert.deepEqual(gw.requests.filter((r) => r.url.startsWith("/api/v1/stacks")).map((r) => r.url), [`/api/v1/stacks?job=${JOB}&run=sd-train`]);
  assert.equal(rankItem(2)?.description, "in collective · in all_reduce #5 · work 0.500 s · wait 0.100 s");
  assert.equal((api.provider.getTreeItem(rankItem(2) as ViewItem) as unknown as { contextValue: string }).contextValue, CTX.running);
});

test("Pause and Attach on a rank: POST /api/v1/pause RUN:RANK with the job, then the Attach path", async () => {
  nextAnswer = () => {
    gw.setSessions([paused(2)]);
    return [200, { target: "sd-train:2", node_id: NODE, pid: 102, train_run: "sd-train", world_rank: 2, thread: "TrainingThread(train_fn)", session: paused(2) }];
  };
  const outcome = await command("raydbg.pauseAndAttach")(rankItem(2));
  assert.equal(outcome, "attached");
  assert.deepEqual(gw.pauses.at(-1), { target: "sd-train:2", wait_s: 5, job: JOB });
  const cfg = stub.rec.started.at(-1)?.config;
  assert.deepEqual([cfg?.type, cfg?.request, cfg?.raydbgSessionId, cfg?.raydbgCluster], ["raydbg", "attach", "p2", "local"]);
  assert.ok(api.attached.has("p2"));
  // The run now has a paused rank: the node says so, the rank is the session.
  await waitFor(() => runNode()?.label === "run sd-train (1/4 ranks paused)", 5000, "run with the paused rank");
  assert.equal(rankItem(2)?.contextValue, CTX.attachable);
  assert.equal(stub.rec.messages.some((m) => m.text.includes("paused (")), false, "no 'paused' notification for a pause this window asked for");
});

test("a rank blocked in C: its snapshot shown, attached once listed as waiting under the same id", async () => {
  const started = stub.rec.started.length;
  const snap = paused(1, { state: "snapshot", attachable: false, frames, thread_name: "TrainingThread(train_fn)" });
  nextAnswer = () => {
    gw.setSessions([paused(2), snap]);
    return [200, { target: "sd-train:1", node_id: NODE, pid: 101, train_run: "sd-train", world_rank: 1, thread: "TrainingThread(train_fn)", session: snap }];
  };
  assert.equal(await command("raydbg.pauseAndAttach")(rankItem(1)), "snapshot");
  const doc = stub.rec.documents.at(-1);
  assert.equal(doc?.uri, "raydbg-snapshot:/local/p1.txt");
  assert.match(doc?.text ?? "", /^# snapshot p1: thread TrainingThread\(train_fn\) of rank 1 \(run sd-train\) is blocked in C/);
  assert.match(doc?.text ?? "", /all_reduce {2}\/venv\/torch\/distributed\/distributed_c10d\.py:2501\n {4}tensor = tensor\(\[1\.\]\)/);
  assert.ok(stub.rec.messages.some((m) => m.level === "info" && /blocked in C \(snapshot p1\).*returns to Python/.test(m.text)));
  await waitFor(() => rankItem(1)?.contextValue === CTX.snapshot, 5000, "snapshot in the tree");
  // Show Snapshot from the tree opens the same document.
  await command("raydbg.showSnapshot")(rankItem(1));
  assert.equal(stub.rec.documents.at(-1)?.uri, "raydbg-snapshot:/local/p1.txt");
  assert.equal(stub.rec.started.length, started, "not attached while a snapshot");
  gw.setSessions([paused(2), paused(1, { state: "starting", attachable: false })]);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(stub.rec.started.length, started, "not attached while starting");
  gw.setSessions([paused(2), paused(1)]);
  await waitFor(() => stub.rec.started.length === started + 1, 5000, "attached once back in Python");
  assert.equal(stub.rec.started.at(-1)?.config.raydbgSessionId, "p1");
});

test("the gateway refusing: its one line in an error notification, nothing attached", async () => {
  const started = stub.rec.started.length;
  nextAnswer = () => [403, { error: "pid 103 runs as bob: raydbg pauses only its own user's workers (me)" }];
  assert.equal(await command("raydbg.pauseAndAttach")(rankItem(3)), "failed");
  assert.deepEqual(stub.rec.messages.at(-1), { level: "error", text: "Ray: pause sd-train:3: pid 103 runs as bob: raydbg pauses only its own user's workers (me)", items: [] });
  nextAnswer = () => [409, { error: "pid 103 is not a raydbg-activated worker (no stacks thread): run the job with RAY_DEBUG=1" }];
  await command("raydbg.pauseAndAttach")(rankItem(3));
  assert.equal(stub.rec.messages.at(-1)?.text, "Ray: pause sd-train:3: pid 103 is not a raydbg-activated worker (no stacks thread): run the job with RAY_DEBUG=1");
  assert.equal(stub.rec.started.length, started);
  assert.equal(stub.rec.messages.some((m) => /paused \(/.test(m.text)), false, "no 'paused' notification for the pauses this window asked for");
  // Not a rank (no pauseTarget): nothing asked.
  const asked = gw.pauses.length;
  assert.equal(await command("raydbg.pauseAndAttach")(runNode()), undefined);
  assert.equal(gw.pauses.length, asked);
});
