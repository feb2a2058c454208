/**
 * Issue 31 parts 1/2 in VS Code: Train runs with nothing paused, found by the gateway's
 * steps; each rank with its state, the collective it is in, its median work / wait step
 * times and a straggler mark; asked for only as the view needs (expanded nodes).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { GatewayError } from "../src/gatewayClient";
import { parseSessionList } from "../src/records";
import { runKey, RunStacksCache } from "../src/runStacks";
import { collectiveText, parseRunStacks, RunStacks } from "../src/stacks";
import { parseSteps, RunSteps } from "../src/steps";
import { StepsPoller } from "../src/stepsPoller";
import { clusterItem, ClusterState, CTX, ViewItem } from "../src/treeModel";
import { record, waitFor } from "./helpers/fakeGateway";

const cluster = { name: "prod", address: "head:8266" };
const NOW = 1_700_000_090_000;
const JOB = "02000000";
const KEY = runKey(JOB, "sd-train");

/** GET /api/v1/steps for a 4-rank run, rank 3 a straggler (raydbg/gang/stragglers.steps_view). */
function stepsBody(over: Record<string, unknown> = {}) {
  return {
    runs: [{
      job_id: JOB, train_run: "sd-train", factor: 1.5, steps: 8, stragglers: [3],
      ranks: [0, 1, 2, 3].map((r) => ({
        world_rank: r, node_id: "n".repeat(56), pid: 100 + r, step: 41, last_progress_s: 0.4,
        busy_s: [0.4, 0.41], wait_s: [0.2, 0.19], busy_median_s: r === 3 ? 0.8123 : 0.405, wait_median_s: r === 3 ? 0.01 : 0.195, straggler: r === 3,
      })),
      ...over,
    }],
    errors: [],
  };
}

/** GET /api/v1/stacks?run=sd-train with nothing paused: ranks 0-2 in all_reduce #12, rank 3 still working (behind). */
function runningStacks() {
  const coll = (r: number) => ({ default_pg: { started: { seq: r === 3 ? 11 : 12, op: "all_reduce" }, completed: { seq: 11, op: "all_reduce" } } });
  return {
    classes: [{ id: "c-ar", summary: "all_reduce <- train_step train_loop.py:104" }, { id: "c-fw", summary: "forward <- train_step train_loop.py:98" }],
    runs: [{
      run: "sd-train", job_id: JOB, world_size: 4, held_by: [] as number[], waiting: [0, 1, 2], not_waiting: [3], culprits: [3],
      ranks: [0, 1, 2, 3].map((r) => ({ world_rank: r, local_rank: r % 2, node_id: "n".repeat(56), pid: 100 + r, state: "running", class_id: r === 3 ? "c-fw" : "c-ar", last_progress_s: 0.4, collectives: coll(r) })),
    }],
  };
}

function ok(payload: unknown): ClusterState {
  const parsed = parseSessionList(payload);
  if (typeof parsed === "string") assert.fail(parsed);
  return { kind: "ok", sessions: parsed.sessions, bad: parsed.bad, live: true };
}

function info(steps: unknown, stacks?: unknown) {
  const st = parseSteps(steps);
  assert.ok(typeof st !== "string", st as string);
  const out = new Map<string, RunStacks>();
  if (stacks !== undefined) {
    const p = parseRunStacks(stacks, "sd-train", JOB);
    assert.ok(p && typeof p === "object");
    out.set(KEY, p);
  }
  return { stacks: out, steps: st };
}

const kids = (i: ViewItem | undefined): ViewItem[] => {
  assert.ok(i?.children, `${i?.label} has no children`);
  return i.children;
};

test("the steps answer: per run by runKey, ranks in order, odd parts left out", () => {
  const runs = parseSteps(stepsBody()) as Map<string, RunSteps>;
  const run = runs.get(KEY);
  assert.deepEqual([run?.run, run?.job_id, run?.factor, run?.stragglers], ["sd-train", JOB, 1.5, [3]]);
  assert.deepEqual(run?.ranks[3], { world_rank: 3, node_id: "n".repeat(56), pid: 103, step: 41, busy_median_s: 0.8123, wait_median_s: 0.01, last_progress_s: 0.4, straggler: true });
  for (const bad of [null, [], {}, { runs: 3 }]) assert.equal(typeof parseSteps(bad), "string");
  const odd = parseSteps({ runs: [null, { train_run: "" }, { train_run: "r", ranks: [{ world_rank: "1" }, { world_rank: 1, straggler: "yes", busy_median_s: "x" }], stragglers: ["1", 2] }] }) as Map<string, RunSteps>;
  assert.deepEqual([...odd.keys()], [runKey("unknown", "r")]);
  assert.deepEqual(odd.get(runKey("unknown", "r"))?.ranks, [{ world_rank: 1, node_id: null, pid: null, step: null, busy_median_s: null, wait_median_s: null, last_progress_s: null, straggler: false }]);
  assert.deepEqual(odd.get(runKey("unknown", "r"))?.stragglers, [2]);
});

test("a rank's collectives read as the TUI's gang view says them", () => {
  assert.equal(collectiveText(null), null);
  assert.equal(collectiveText({}), "none yet");
  assert.equal(collectiveText({ default_pg: { started: { seq: 12, op: "all_reduce" }, completed: { seq: 11 } } }), "in all_reduce #12");
  assert.equal(collectiveText({ default_pg: { started: { seq: 12, op: "all_reduce" }, completed: { seq: 12 } }, pg1: { started: { seq: 3, op: "broadcast" }, completed: null } }), "after all_reduce #12, in broadcast #3 (pg1)");
});

test("a run with nothing paused, from steps alone: a collapsed node, each rank's step times and straggler mark", () => {
  const [run] = kids(clusterItem(cluster, ok([]), NOW, info(stepsBody())));
  assert.equal(run.label, "run sd-train (running, 4 ranks)");
  assert.equal(run.description, `job ${JOB} · straggler: rank 3`);
  assert.deepEqual([run.contextValue, run.collapsed, run.run], [CTX.run, true, { job: JOB, run: "sd-train" }]);
  const ranks = kids(run);
  assert.deepEqual(ranks.map((r) => [r.label, r.description, r.contextValue, r.icon]), [
    ["rank 0", "work 0.405 s · wait 0.195 s", CTX.running, "pulse"],
    ["rank 1", "work 0.405 s · wait 0.195 s", CTX.running, "pulse"],
    ["rank 2", "work 0.405 s · wait 0.195 s", CTX.running, "pulse"],
    ["rank 3", "work 0.812 s · wait 0.010 s · straggler", CTX.running, "warning"],
  ]);
  assert.deepEqual(ranks[3].pauseTarget, { cluster: "prod", job: JOB, run: "sd-train", rank: 3 });
  assert.match(ranks[3].tooltip ?? "", /straggler: works 1\.5x longer than the others' median/);
  assert.match(ranks[3].tooltip ?? "", /Pause and attach \(raydbg pause sd-train:3\)/);
  assert.equal(new Set(ranks.map((r) => r.id)).size, 4);
  // The cluster still counts paused sessions only.
  assert.equal(clusterItem(cluster, ok([]), NOW, info(stepsBody())).description, "head:8266 · 0 paused");
});

test("with its stacks (asked on expand): state, the collective it is in, who is behind", () => {
  const ranks = kids(kids(clusterItem(cluster, ok([]), NOW, info(stepsBody(), runningStacks())))[0]);
  assert.deepEqual(ranks.map((r) => r.description), [
    "in collective · in all_reduce #12 · work 0.405 s · wait 0.195 s",
    "in collective · in all_reduce #12 · work 0.405 s · wait 0.195 s",
    "in collective · in all_reduce #12 · work 0.405 s · wait 0.195 s",
    "running · after all_reduce #11 · work 0.812 s · wait 0.010 s · behind · straggler",
  ]);
  assert.match(ranks[3].tooltip ?? "", /stack: forward <- train_step train_loop\.py:98/);
  assert.match(ranks[3].tooltip ?? "", /behind: the other ranks wait for it/);
  assert.match(ranks[0].tooltip ?? "", /Ray Train run sd-train, rank 0 \(local rank 0\)/);
});

test("a run with a paused rank: held ranks keep their line and gain collective and step times", () => {
  const body = runningStacks();
  body.runs[0].held_by = [0];
  for (const r of body.runs[0].ranks) r.state = r.world_rank === 0 ? "paused" : "held";
  const paused = record({ id: "r0", job_id: JOB, train_run: "sd-train", train_rank: 0, train_world_size: 4 });
  const [run] = kids(clusterItem(cluster, ok([paused]), NOW, info(stepsBody(), body)));
  assert.equal(run.label, "run sd-train (1/4 ranks paused)");
  assert.equal(run.collapsed, undefined);
  assert.equal(run.description, `job ${JOB} · straggler: rank 3`);
  const ranks = kids(run);
  assert.deepEqual(ranks.map((r) => [r.label, r.contextValue]), [
    ["rank 0", CTX.attachable],
    ["rank 1 — held by rank 0: all_reduce <- train_step train_loop.py:104", CTX.held],
    ["rank 2 — held by rank 0: all_reduce <- train_step train_loop.py:104", CTX.held],
    ["rank 3 — held by rank 0: forward <- train_step train_loop.py:98", CTX.held],
  ]);
  assert.equal(ranks[1].description, "in all_reduce #12 · work 0.405 s · wait 0.195 s");
  assert.deepEqual(ranks[1].pauseTarget, { cluster: "prod", job: JOB, run: "sd-train", rank: 1 });
});

test("a snapshot session is its own kind of item (Show Snapshot), not attachable, not starting", () => {
  const snap = record({ id: "s9", job_id: JOB, train_run: "sd-train", train_rank: 1, reason: "pause", state: "snapshot", attachable: false, frames: [] });
  const [run] = kids(clusterItem(cluster, ok([snap]), NOW, info(stepsBody())));
  const item = kids(run)[1];
  assert.deepEqual([item.label, item.contextValue, item.icon, item.session?.id], ["rank 1", CTX.snapshot, "eye", "s9"]);
  assert.equal(item.description, "train.py:17 · pause (blocked in C: snapshot)");
  assert.match(item.tooltip ?? "", /blocked in C: a snapshot of its frames, attachable once it returns to Python/);
  assert.deepEqual(kids(run).map((r) => r.label), ["rank 0", "rank 1", "rank 2", "rank 3"]);
});

test("runs listed by steps but not yet ranked say so; steps of another run are not mixed in", () => {
  const [empty] = kids(clusterItem(cluster, ok([]), NOW, info(stepsBody({ ranks: [] }))));
  assert.deepEqual(kids(empty).map((i) => [i.label, i.contextValue]), [["No ranks reported yet", CTX.info]]);
  const two = stepsBody();
  two.runs.push({ ...two.runs[0], train_run: "eval", stragglers: [] });
  const runs = kids(clusterItem(cluster, ok([]), NOW, info(two)));
  assert.deepEqual(runs.map((r) => r.label), ["run eval (running, 4 ranks)", "run sd-train (running, 4 ranks)"]);
  assert.equal(runs[0].description, `job ${JOB}`);
});

test("stacks of a running run are kept only while its node is expanded", async () => {
  const calls: ((v: unknown) => void)[] = [];
  let changes = 0;
  const cache = new RunStacksCache({ fetch: () => new Promise((r) => calls.push(r)), onChange: () => changes++ });
  const ref = { job: JOB, run: "sd-train" };
  cache.sync([]);
  assert.equal(calls.length, 0);
  cache.expand(ref);
  assert.equal(cache.watching, 1);
  calls[0](runningStacks());
  await new Promise((r) => setImmediate(r));
  assert.equal(cache.get(KEY)?.ranks[0].collective, "in all_reduce #12");
  // A session list without it keeps it while expanded.
  cache.sync([]);
  assert.ok(cache.get(KEY));
  cache.collapse(ref);
  assert.equal(cache.get(KEY), undefined);
  assert.equal(cache.watching, 0);
  assert.equal(changes, 2);
});

test("steps poller: at start, fast while a run is expanded, slow otherwise, none while hidden; 404 stops it", async () => {
  let asked = 0;
  let watching = false;
  let answer: () => Promise<unknown> = () => Promise.resolve(stepsBody());
  let changes = 0;
  const p = new StepsPoller({ fetch: () => (asked++, answer()), onChange: () => changes++, watching: () => watching, intervalMs: 20, idleMs: 400 });
  p.start();
  await waitFor(() => p.snapshot().size === 1, 2000, "first steps");
  assert.equal(changes, 1);
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(asked, 1, "idle: the slow interval");
  watching = true;
  p.refresh();
  await waitFor(() => asked >= 5, 2000, "fast polls while expanded");
  assert.equal(changes, 1, "the same answer redraws nothing");
  p.setVisible(false);
  await new Promise((r) => setTimeout(r, 60));
  const hidden = asked;
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(asked, hidden, "no polls while hidden");
  answer = () => Promise.reject(new GatewayError("not found", "notFound", 404));
  p.setVisible(true);
  await waitFor(() => p.snapshot().size === 0, 2000, "runs dropped on failure");
  const after404 = asked;
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(asked, after404, "a gateway without steps is not asked again");
  answer = () => Promise.resolve(stepsBody());
  p.refresh();
  await waitFor(() => p.snapshot().size === 1, 2000, "Refresh asks again");
  p.stop();
});
