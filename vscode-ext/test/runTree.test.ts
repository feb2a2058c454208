/**
 * Issue 13, the tree model: sessions of a Ray Train run under one run node, one item per
 * rank in rank order, and the ranks the paused ones hold (from the gateway's stacks).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseSessionList, parseSessionRecord, SessionRecord } from "../src/records";
import { runKey } from "../src/runStacks";
import { parseRunStacks } from "../src/stacks";
import { clusterItem, ClusterState, CTX, RunInfo, ViewItem } from "../src/treeModel";
import { record } from "./helpers/fakeGateway";

const cluster = { name: "prod", address: "head:8266" };
const NOW = 1_700_000_090_000;
const JOB = "02000000";

function ok(payload: unknown): ClusterState {
  const parsed = parseSessionList(payload);
  if (typeof parsed === "string") assert.fail(parsed);
  return { kind: "ok", sessions: parsed.sessions, bad: parsed.bad, live: true };
}

const rank = (r: number, over: Record<string, unknown> = {}) =>
  record({ id: `r${r}`, job_id: JOB, task_name: "RayTrainWorker.train_fn", train_run: "sd-train", train_rank: r, train_local_rank: r % 2, train_world_size: 4, ...over });

/** The gateway's stacks body for a 4-rank run with rank 0 paused (raydbg/gang shapes). */
function stacksBody(over: Record<string, unknown> = {}) {
  return {
    workers: [],
    classes: [
      { id: "c-pause", summary: "paused at breakpoint  train_loop.py:108 train_step", members: [], count: 1, total: 4, paused: true, in_collective: false, frames: [] },
      { id: "c-ar", summary: "all_reduce <- train_step train_loop.py:104", members: [], count: 3, total: 4, paused: false, in_collective: true, frames: [] },
    ],
    runs: [
      {
        run: "sd-train",
        job_id: JOB,
        world_size: 4,
        ranks: [0, 1, 2, 3].map((r) => ({ world_rank: r, local_rank: r % 2, node_id: "n".repeat(56), pid: 100 + r, state: r === 0 ? "paused" : "held", session_ids: r === 0 ? ["r0"] : [], class_id: r === 0 ? "c-pause" : "c-ar", last_progress_s: r === 0 ? null : 12.4 })),
        held_by: [0],
        waiting: [1, 2, 3],
        not_waiting: [0],
        ...over,
      },
    ],
    errors: [],
    took_s: 0.2,
  };
}

function held(body: unknown): RunInfo {
  const parsed = parseRunStacks(body, "sd-train", JOB);
  assert.ok(parsed && typeof parsed === "object", JSON.stringify(parsed));
  return { stacks: new Map([[runKey(JOB, "sd-train"), parsed]]), steps: new Map() };
}

function kids(item: ViewItem | undefined): ViewItem[] {
  assert.ok(item?.children, `${item?.label} has no children`);
  return item.children;
}

test("sessions of a Train run sit under one run node, ranks in order; other sessions by job as before", () => {
  const item = clusterItem(cluster, ok([rank(2, { since: 9 }), record({ id: "plain" }), rank(0, { since: 3 })]), NOW);
  const [run, job] = kids(item);
  assert.equal(run.label, "run sd-train (2/4 ranks paused)");
  assert.equal(run.description, `job ${JOB}`);
  assert.equal(run.contextValue, CTX.run);
  assert.deepEqual(run.run, { job: JOB, run: "sd-train" });
  const ranks = kids(run);
  assert.deepEqual(ranks.map((r) => r.label), ["rank 0", "rank 2"]);
  // A rank with one paused session is that session: attachable from the rank's line.
  assert.equal(ranks[0].session?.id, "r0");
  assert.equal(ranks[0].contextValue, CTX.attachable);
  assert.equal(ranks[0].description, "train.py:17 · breakpoint");
  assert.match(ranks[0].tooltip ?? "", /Ray Train run sd-train, rank 0 of 4 \(local rank 0\)/);
  assert.equal(job.label, "Job 01000000");
  assert.deepEqual(kids(job).map((s) => s.session?.id), ["plain"]);
  assert.equal(item.description, "head:8266 · 3 paused");
});

test("ranks sort numerically; a rank with several paused threads is a node of its sessions", () => {
  const sessions = [10, 9, 1].map((r) => rank(r, { train_world_size: 16 }));
  sessions.push(rank(1, { id: "r1-loader", thread_name: "loader" }));
  const [run] = kids(clusterItem(cluster, ok(sessions), NOW));
  assert.equal(run.label, "run sd-train (3/16 ranks paused)");
  const ranks = kids(run);
  assert.deepEqual(ranks.map((r) => r.label), ["rank 1", "rank 9", "rank 10"]);
  assert.equal(ranks[0].contextValue, CTX.rank);
  assert.equal(ranks[0].description, "2 paused threads");
  assert.deepEqual(kids(ranks[0]).map((s) => s.session?.id).sort(), ["r1", "r1-loader"]);
});

test("held ranks: 'rank R — held by rank P: <class summary>', in rank order with the paused one", () => {
  const [run] = kids(clusterItem(cluster, ok([rank(0)]), NOW, held(stacksBody())));
  assert.equal(run.label, "run sd-train (1/4 ranks paused)");
  const ranks = kids(run);
  assert.deepEqual(ranks.map((r) => r.label), [
    "rank 0",
    "rank 1 — held by rank 0: all_reduce <- train_step train_loop.py:104",
    "rank 2 — held by rank 0: all_reduce <- train_step train_loop.py:104",
    "rank 3 — held by rank 0: all_reduce <- train_step train_loop.py:104",
  ]);
  assert.equal(ranks[1].contextValue, CTX.held);
  assert.equal(ranks[1].session, undefined);
  assert.match(ranks[1].tooltip ?? "", /rank 1 \(local rank 1\) waits for rank 0, paused by raydbg/);
  assert.match(ranks[1].tooltip ?? "", /pid 101/);
  assert.match(ranks[1].tooltip ?? "", /last step 12 s ago/);
  const ids = ranks.map((r) => r.id);
  assert.equal(new Set(ids).size, ids.length);
});

test("several paused ranks are named; an unknown class leaves the summary out", () => {
  const body = stacksBody({ held_by: [2, 0] });
  (body.runs[0].ranks[2] as Record<string, unknown>).state = "paused";
  (body.runs[0].ranks[1] as Record<string, unknown>).class_id = "no-such-class";
  const [run] = kids(clusterItem(cluster, ok([rank(0), rank(2)]), NOW, held(body)));
  assert.deepEqual(kids(run).map((r) => r.label), [
    "rank 0",
    "rank 1 — held by ranks 0,2",
    "rank 2",
    "rank 3 — held by ranks 0,2: all_reduce <- train_step train_loop.py:104",
  ]);
});

test("no stacks or stacks of another job: nothing extra; ranks not held show as running ranks to pause", () => {
  const plain = kids(kids(clusterItem(cluster, ok([rank(0)]), NOW))[0]);
  assert.deepEqual(plain.map((r) => r.label), ["rank 0"]);
  assert.equal(parseRunStacks(stacksBody({ job_id: "09000000" }), "sd-train", JOB), null);
  assert.equal(parseRunStacks(stacksBody(), "other-run", JOB), null);
  const running = stacksBody({ held_by: [] });
  for (const r of running.runs[0].ranks) r.state = r.world_rank === 0 ? "paused" : "running";
  const ranks = kids(kids(clusterItem(cluster, ok([rank(0)]), NOW, held(running)))[0]);
  assert.deepEqual(ranks.map((r) => [r.label, r.contextValue, r.description]), [
    ["rank 0", CTX.attachable, "train.py:17 · breakpoint"],
    // Their stacks are in a collective (the run's `waiting`).
    ["rank 1", CTX.running, "in collective"],
    ["rank 2", CTX.running, "in collective"],
    ["rank 3", CTX.running, "in collective"],
  ]);
  assert.deepEqual(ranks[2].pauseTarget, { cluster: "prod", job: JOB, run: "sd-train", rank: 2 });
});

test("malformed stacks answers parse to a message or to defaults, never an exception", () => {
  for (const bad of [null, [], "x", { runs: "no" }, {}]) assert.equal(typeof parseRunStacks(bad, "sd-train", null), "string");
  const odd = parseRunStacks({ runs: [{ run: "sd-train", ranks: [null, { world_rank: "1" }, { world_rank: 2, state: 7 }], held_by: ["0", 1] }], classes: "x" }, "sd-train", JOB);
  assert.deepEqual(odd, {
    run: "sd-train", job_id: null, world_size: null, held_by: [1], culprits: [], deadlocks: [], chain: [],
    ranks: [{ world_rank: 2, local_rank: null, node_id: null, pid: null, state: "running", summary: null, last_progress_s: null, waiting: false, collective: null }],
  });
});

test("world size unknown: the count says how many are paused; pause-all groups say so", () => {
  const [run] = kids(clusterItem(cluster, ok([rank(0, { train_world_size: null, group: "g1" }), rank(1, { train_world_size: null, group: "g1" })]), NOW));
  assert.equal(run.label, "run sd-train (2 ranks paused)");
  assert.equal(run.description, `job ${JOB} · paused together`);
  assert.match(kids(run)[0].tooltip ?? "", /paused together with its run's other ranks \(group g1\)/);
});

test("new record fields are checked like the others", () => {
  const rec = parseSessionRecord(rank(0, { train_run: 5, train_local_rank: "0", train_world_size: 4, group: "" })) as SessionRecord;
  assert.equal(rec.train_run, null);
  assert.equal(rec.train_local_rank, null);
  assert.equal(rec.train_world_size, 4);
  assert.equal(rec.group, null);
  // Without train_run the rank still reads as today, under its job.
  const [job] = kids(clusterItem(cluster, ok([rank(3, { train_run: null })]), NOW));
  assert.equal(job.label, `Job ${JOB}`);
  assert.equal(kids(job)[0].label, "RayTrainWorker.train_fn [rank 3]");
});
